"""Calibration rules (training.detector_scoring): the one-standard-error selection keeps the simpler candidate
unless a richer one wins by more than the noise of the calibration responses, and task-type indicators enter
the combiner only where the task may have its own threshold."""

import numpy as np
import pytest

from tests.test_detector_cross_fold import ANSWER, CONTEXT, _prediction, _record
from training.data.records import SpanRecord
from training.detector import CalibrationConfig
from training.detector_scoring import (
    fit_calibration,
    objective,
    objective_of_stats,
    objective_stats,
    select_one_se,
)
from training.span_metrics import Scored


def _scored(rng) -> Scored:
    gold = [{"start": 23, "end": 27}] if rng.random() < 0.5 else []
    start = int(rng.integers(0, 40))
    pred = [{"start": start, "end": start + int(rng.integers(1, 20))}] if rng.random() < 0.6 else []
    return Scored("QA", gold, pred)


def test_objective_from_per_response_sums_equals_the_objective():
    rng = np.random.default_rng(1)
    items = [_scored(rng) for _ in range(40)]
    stats = objective_stats(items)
    assert objective_of_stats(stats, np.ones(len(items)))[0] == pytest.approx(objective(items))
    # a resample that counts one response twice is the objective of the list with that response repeated
    weights = np.ones(len(items))
    weights[3] = 2
    assert objective_of_stats(stats, weights)[0] == pytest.approx(objective([*items, items[3]]))


def _stats(n_hit: int, n: int = 60) -> np.ndarray:
    """n responses, each with one 10-character gold span; the first n_hit are found exactly, the rest missed
    with a 10-character false alarm elsewhere."""
    rows = [(10, 10, 10, 1, 1, 1) if i < n_hit else (0, 10, 10, 1, 1, 1) for i in range(n)]
    return np.asarray(rows, dtype=np.float64)


def test_one_se_keeps_the_simpler_candidate_when_the_gain_is_noise():
    # the richer candidate finds one response more out of 60: well within one standard error
    stats = [_stats(30), _stats(31)]
    objectives = [float(objective_of_stats(s, np.ones(60))[0]) for s in stats]
    chosen, ses = select_one_se(objectives, [0, 1], stats)
    assert objectives[1] > objectives[0] and chosen == 0 and ses[0] > objectives[1] - objectives[0]


def test_one_se_takes_the_richer_candidate_when_the_gain_is_real():
    stats = [_stats(10), _stats(50)]
    objectives = [float(objective_of_stats(s, np.ones(60))[0]) for s in stats]
    chosen, _ = select_one_se(objectives, [0, 1], stats)
    assert chosen == 1


def test_fit_calibration_reports_the_selection_and_the_standard_errors():
    from inference.settings import InferenceSettings

    rng = np.random.default_rng(0)
    recs = [_record(i, i % 2 == 0) for i in range(24)]
    raw = [_prediction(r, rng) for r in recs]
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    best, table, _ = fit_calibration(recs, raw, hm, ["max"], ["off", "on"], [0], selection="best")
    one_se, table_se, _ = fit_calibration(recs, raw, hm, ["max"], ["off", "on"], [0], selection="one_se")
    # the model's probabilities alone separate these responses: nothing richer is needed
    assert one_se.combiner is None
    assert sum("selected" in row for row in table_se) == 1
    assert all("se_to_best" in row for row in table_se) and not any("se_to_best" in row for row in table)
    assert best.threshold is not None and one_se.threshold is not None


def test_unknown_selection_is_refused():
    with pytest.raises(ValueError, match="calibration.selection"):
        CalibrationConfig(selection="smallest").validate()


def test_task_indicators_follow_the_per_task_threshold_rule():
    from training.detector_scoring import MIN_TASK_CLASS_RECORDS, combiner_features, tasks_with_own_threshold

    n = MIN_TASK_CLASS_RECORDS
    recs = ([SpanRecord(id=f"s{i}", context=CONTEXT, answer=ANSWER, task_type="Summary", source="x",
                        spans=[{"start": 23, "end": 27, "text": "1950"}] if i < n else []) for i in range(2 * n)]
            + [SpanRecord(id=f"q{i}", context=CONTEXT, answer=ANSWER, task_type="QA", source="x",
                          spans=[{"start": 23, "end": 27, "text": "1950"}] if i < 3 else []) for i in range(2 * n)])
    by_task = tasks_with_own_threshold(recs)
    assert sorted(by_task) == ["Summary"]  # 3 hallucinated QA answers are too few for a QA threshold
    feats = ("model_logit", "number_unsupported", "task=QA", "task=Summary", "task=Data2txt")
    assert combiner_features(feats, by_task) == ("model_logit", "number_unsupported", "task=Summary")
    assert combiner_features(feats, by_task, "all") == feats
    with pytest.raises(ValueError, match="calibration.task_indicators"):
        combiner_features(feats, by_task, "some")


def test_the_fitted_combiner_leaves_out_the_indicator_of_a_task_too_small_for_a_threshold():
    from inference.settings import InferenceSettings

    rng = np.random.default_rng(0)
    recs = [_record(i, i % 2 == 0) for i in range(24)]  # all QA, 12 hallucinated and 12 faithful: qualifies
    recs += [SpanRecord(id=f"d{i}", context=CONTEXT, answer=ANSWER, task_type="Data2txt", source="x",
                        spans=[{"start": 23, "end": 27, "text": "1950"}] if i < 2 else [], meta={"source_id": f"d{i}"})
             for i in range(6)]
    raw = [_prediction(r, rng) for r in recs]
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    _, _, by_mode = fit_calibration(recs, raw, hm, ["max"], ["on"], [0])
    feats = by_mode["on"].combiner.features
    assert "task=QA" in feats and "task=Data2txt" not in feats
    _, _, by_mode = fit_calibration(recs, raw, hm, ["max"], ["on"], [0], task_indicators="all")
    assert "task=Data2txt" in by_mode["on"].combiner.features


def test_the_calibration_carries_the_span_extension_its_thresholds_were_fitted_with():
    from inference.detector_stage import Calibration, extension_of
    from inference.settings import DetectorSettings, InferenceSettings

    rng = np.random.default_rng(0)
    recs = [_record(i, i % 2 == 0) for i in range(24)]
    raw = [_prediction(r, rng) for r in recs]
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    cal, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0], span_extension=0.5)
    assert cal.span_extension == 0.5 and cal.to_dict()["span_extension"] == 0.5
    assert Calibration.from_dict(cal.to_dict()).span_extension == 0.5
    # a detector.json written before the extension existed was fitted without it, and is read so
    assert Calibration.from_dict({"threshold": 0.2}).span_extension == 1.0
    # the runtime uses the calibration's extension when it uses the calibration, else the settings' own
    settings = DetectorSettings(span_extension=0.7)
    assert extension_of(settings, Calibration(threshold=0.2)) == 1.0
    assert extension_of(DetectorSettings(span_extension=0.7, use_model_calibration=False), cal) == 0.7
    assert extension_of(settings, None) == 0.7
    with pytest.raises(ValueError, match="calibration.span_extension"):
        CalibrationConfig(span_extension=0.0).validate()


def test_thresholds_are_fitted_on_the_models_own_spans_whatever_the_exact_check_adds():
    import dataclasses

    from inference.settings import InferenceSettings

    rng = np.random.default_rng(0)
    recs = [_record(i, i % 2 == 0) for i in range(24)]
    raw = [_prediction(r, rng) for r in recs]
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    assert hm.flag_ungrounded  # the default
    without, _, _ = fit_calibration(recs, raw, dataclasses.replace(hm, flag_ungrounded=False), ["max"], ["off"], [0])
    # every hallucinated answer's gold span as an ungrounded term: were the check's spans seen while fitting,
    # they would supply the recall, and a higher threshold would win
    for rec, p in zip(recs, raw):
        p.scores.ungrounded = [{**sp, "text": rec.answer[sp["start"]:sp["end"]]} for sp in rec.spans]
    with_check, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0])
    assert with_check.threshold == without.threshold
