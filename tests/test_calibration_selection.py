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


def _qa_and_summary(qa_faithful_prob: float, qa_hallucinated_prob: float = 0.9):
    """24 Summary answers (12 hallucinated: qualifies for its own threshold) whose "1950" sits at 0.4 when
    hallucinated and every other token at 0.05, and 6 QA answers (2 hallucinated: too few) whose every token sits
    at `qa_faithful_prob` but the hallucinated "1950" at `qa_hallucinated_prob`."""
    import re

    from inference.detector_stage import DetectorScores
    from inference.grounding import grounding_features
    from training.detector_scoring import Prediction

    recs, raw = [], []
    for i in range(30):
        task, bad = ("Summary", i % 2 == 0) if i < 24 else ("QA", i < 26)
        recs.append(SpanRecord(id=f"r{i}", context=CONTEXT, answer=ANSWER, task_type=task, source="x",
                               spans=[{"start": 23, "end": 27, "text": "1950"}] if bad else [],
                               meta={"source_id": str(i)}))
        offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", ANSWER)]
        low, high = (qa_faithful_prob, qa_hallucinated_prob) if task == "QA" else (0.05, 0.4)
        probs = np.array([high if bad and b == 23 else low for b, _ in offsets])
        g = grounding_features(ANSWER, CONTEXT, None, offsets)
        raw.append(Prediction(DetectorScores(offsets, probs, probs, g, 1, task, [probs]), []))
    return recs, raw


def test_a_task_too_small_for_its_own_threshold_may_only_get_a_stricter_one():
    from inference.settings import InferenceSettings
    from training.detector_scoring import tasks_with_own_threshold

    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    # QA's faithful tokens at 0.45: the global threshold (at most 0.4, for the 24 Summary answers) flags every QA
    # answer; QA's own threshold (fitted on its six answers) is higher, and "stricter" takes it
    recs, raw = _qa_and_summary(0.45)
    assert sorted(tasks_with_own_threshold(recs)) == ["Summary"]
    plain, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0])
    strict, table, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0], small_tasks="stricter")
    assert "QA" not in (plain.task_thresholds or {})
    assert plain.threshold <= 0.4 and 0.45 < strict.task_thresholds["QA"] <= 0.9
    assert strict.threshold == plain.threshold
    assert [row["small_task_thresholds"] for row in table if "selected" in row] == [{"QA": strict.task_thresholds["QA"]}]
    # QA's answers separate below the global threshold: its own best is not above it, so nothing changes
    recs, raw = _qa_and_summary(0.01, 0.2)
    low, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0], small_tasks="stricter")
    assert "QA" not in (low.task_thresholds or {})
    with pytest.raises(ValueError, match="calibration.small_tasks"):
        fit_calibration(recs, raw, hm, ["max"], ["off"], [0], small_tasks="looser")
    with pytest.raises(ValueError, match="calibration.small_tasks"):
        CalibrationConfig(small_tasks="looser").validate()


def test_the_calibration_section_names_every_choice_it_passes():
    """CalibrationConfig.choices() is what every call site hands fit_calibration / calibrate: each key must be one
    of their parameters (a misspelt or new one fails here, not in a 66-minute CV) and each value its field's."""
    import inspect

    from training.detector import CalibrationConfig
    from training.detector_scoring import fit_calibration

    section = CalibrationConfig(window_aggregation=["min"], combiner=["on"], smoothing=[0, 3], selection="one_se",
                                task_indicators="all", span_extension=0.7, small_tasks="stricter",
                                threshold_choice="bagged")
    choices = section.choices()
    params = inspect.signature(fit_calibration).parameters
    assert set(choices) <= set(params) and set(params) - set(choices) == {"records", "raw", "settings"}
    assert choices == {"aggregations": ["min"], "combiner_modes": ["on"], "smoothings": [0, 3],
                       "selection": "one_se", "task_indicators": "all", "span_extension": 0.7,
                       "small_tasks": "stricter", "threshold_choice": "bagged"}


def test_the_bagged_threshold_is_the_median_of_the_resamples_choices():
    from training.detector_scoring import bagged_pick

    # rows: thresholds in rising order; columns: resamples. The full sample would take row 2 (one resample's
    # spike); the resamples' own best rows are 0, 1, 1, 2, 2 (ties to the higher row, as the plain choice)
    boot = np.array([[0.50, 0.40, 0.40, 0.30, 0.30],
                     [0.40, 0.50, 0.50, 0.30, 0.30],
                     [0.40, 0.40, 0.40, 0.30, 0.90]])
    assert bagged_pick(boot) == 1
    assert bagged_pick(boot[:, :4]) == 1  # an even count: the lower median, a row that exists
    assert bagged_pick(np.array([[0.1, 0.2], [0.3, 0.4]])) == 1  # a row best in every resample is kept


def test_bagged_thresholds_are_grid_values_and_follow_a_clear_separation():
    from inference.settings import InferenceSettings
    from training.detector_scoring import THRESHOLDS

    rng = np.random.default_rng(0)
    recs = [_record(i, i % 2 == 0) for i in range(24)]
    raw = [_prediction(r, rng) for r in recs]
    hm = InferenceSettings().hallucination_mitigation.hallucination_model
    best, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0])
    bagged, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0], threshold_choice="bagged")
    again, _, _ = fit_calibration(recs, raw, hm, ["max"], ["off"], [0], threshold_choice="bagged")
    assert bagged.threshold in THRESHOLDS and bagged.threshold == again.threshold  # seeded
    assert abs(THRESHOLDS.index(bagged.threshold) - THRESHOLDS.index(best.threshold)) <= 2
    with pytest.raises(ValueError, match="calibration.threshold_choice"):
        fit_calibration(recs, raw, hm, ["max"], ["off"], [0], threshold_choice="mean")
    with pytest.raises(ValueError, match="calibration.threshold_choice"):
        CalibrationConfig(threshold_choice="mean").validate()
