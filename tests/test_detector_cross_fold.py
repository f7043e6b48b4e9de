"""Cross-fold calibration (eval.detector_cv): each fold's calibration is fitted on the other folds' out-of-fold
predictions only, and --apply-to writes the pooled calibration where the runtime reads it."""

import json
import re

import numpy as np
import pytest

from inference.detector_stage import DetectorScores, load_detector_json
from inference.grounding import grounding_features
from training.data.records import SpanRecord
from training.detector import CalibrationConfig
from training.detector_scoring import Prediction

ANSWER = "The tower was built in 1950 and is 500 meters tall. It is in Paris."
CONTEXT = "The tower in Paris was built from 1887 to 1889 and is 330 meters tall."


def _record(i: int, hallucinated: bool) -> SpanRecord:
    spans = [{"start": 23, "end": 27, "text": "1950"}] if hallucinated else []
    return SpanRecord(id=f"r{i}", context=CONTEXT, answer=ANSWER, spans=spans, task_type="QA",
                      source="ragtruth_test_subset", meta={"source_id": str(i)})


def _prediction(rec: SpanRecord, rng) -> Prediction:
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", rec.answer)]
    gold = np.array([any(s["start"] < e and s["end"] > b for s in rec.spans) for b, e in offsets], dtype=float)
    probs = np.clip(0.1 + 0.6 * gold + rng.normal(0, 0.1, len(offsets)), 0.01, 0.99)  # informative, noisy
    g = grounding_features(rec.answer, rec.context, None, offsets)
    return Prediction(DetectorScores(offsets, probs, probs, g, 1, rec.task_type, [probs]), [])


@pytest.fixture()
def oof():
    rng = np.random.default_rng(0)
    out = {}
    for fold in range(3):
        recs = [_record(fold * 100 + i, hallucinated=i % 2 == 0) for i in range(12)]
        out[fold] = (recs, [_prediction(r, rng) for r in recs])
    return out


class _Cfg:
    calibration = CalibrationConfig(window_aggregation=["max"], combiner=["off", "on"])


def test_each_fold_is_calibrated_on_the_other_folds_only(oof, tmp_path, monkeypatch):
    import eval.detector_cv as cv

    seen = []
    real = cv.fit_calibration

    def spy(records, raw, *args, **kwargs):
        seen.append({r.id for r in records})
        return real(records, raw, *args, **kwargs)

    monkeypatch.setattr(cv, "fit_calibration", spy)
    for fold in oof:
        (tmp_path / f"fold-{fold}").mkdir()
    rows = cv.cross_fold_rows(_Cfg, tmp_path, oof)
    assert sorted(rows) == [0, 1, 2] and len(seen) == 3
    for fold, ids in zip(sorted(oof), seen):
        own = {r.id for r in oof[fold][0]}
        others = {r.id for j in oof if j != fold for r in oof[j][0]}
        assert ids == others and not ids & own  # fold k's labels never enter its calibration
        assert rows[fold]["calibration_records"] == 24
        saved = json.loads((tmp_path / f"fold-{fold}" / cv.CROSS_FOLD_FILE).read_text())
        assert saved["calibration"]["threshold"] == rows[fold]["calibration"]["threshold"]
    # the noise is small, so the fitted threshold separates the classes and finds the span
    assert rows[0]["levels"]["span"]["overall"]["f1"] > 0.9


def test_apply_to_writes_the_pooled_calibration_and_keeps_the_dev_one(oof, tmp_path):
    import eval.detector_cv as cv

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    dev = {"threshold": 0.55, "window_aggregation": "min", "task_thresholds": None, "smoothing": 0}
    (run / "detector.json").write_text(json.dumps({"max_length": 512, "calibration": dev,
                                                   "calibration_records": 7}))
    written = cv.apply_to_run(_Cfg, tmp_path, oof, run)
    data = json.loads((run / "detector.json").read_text())
    assert data["dev_calibration"] == dev and data["calibration"] == written
    assert data["calibration_records"] == 7  # the dev split's count, which --recalibrate checks
    assert data["calibration_source"]["records"] == 36 and data["max_length"] == 512
    cal = load_detector_json(run)[0]  # what the runtime reads
    assert cal.threshold == written["threshold"] and cal.window_aggregation == "max"
    cv.apply_to_run(_Cfg, tmp_path, oof, run)  # a second time keeps the original dev calibration
    assert json.loads((run / "detector.json").read_text())["dev_calibration"] == dev


def test_apply_to_refuses_a_dir_that_is_no_run(oof, tmp_path):
    import eval.detector_cv as cv
    from training.data.base import DataError

    with pytest.raises(DataError, match="--apply-to .*no config.json"):
        cv.apply_to_run(_Cfg, tmp_path, oof, tmp_path / "missing")


def test_the_summary_has_the_cross_fold_row_only_when_every_fold_has_it(oof, tmp_path):
    import eval.detector_cv as cv

    for fold in oof:
        (tmp_path / f"fold-{fold}").mkdir()
    rows = cv.cross_fold_rows(_Cfg, tmp_path, oof)
    folds = [{"fold": k, "rows": {name: r["levels"] for name in cv.ROWS}, "auroc": r["auroc"],
              "auroc_without_combiner": r["auroc"]} for k, r in rows.items()]
    assert cv.CROSS_FOLD_ROW not in cv.summarize(folds)["rows"]
    for f in folds[:2]:
        f["rows"][cv.CROSS_FOLD_ROW] = rows[f["fold"]]["levels"]
        f["auroc_cross_fold"] = rows[f["fold"]]["auroc"]
    assert cv.CROSS_FOLD_ROW not in cv.summarize(folds)["rows"]
    folds[2]["rows"][cv.CROSS_FOLD_ROW] = rows[2]["levels"]
    folds[2]["auroc_cross_fold"] = rows[2]["auroc"]
    summary = cv.summarize(folds)
    assert summary["rows"][cv.CROSS_FOLD_ROW]["span_f1"]["folds"] == [
        round(rows[k]["levels"]["span"]["overall"]["f1"], 4) for k in range(3)]
    assert "auroc_cross_fold" in summary


def test_the_summary_leaves_out_a_task_without_auroc_in_every_fold_run():
    # `--folds 1` on a fold whose QA answers are all of one class: AUROC is None there (a crash once, on a GPU)
    import eval.detector_cv as cv

    levels = {lvl: {"overall": {"precision": 0.5, "recall": 0.5, "f1": 0.5}, "by_task_type": {}}
              for lvl in cv.LEVELS}
    fold = {"fold": 1, "rows": {name: levels for name in cv.ROWS},
            "auroc": {"QA": None, "Summary": 0.7, "overall": 0.74},
            "auroc_without_combiner": {"QA": None, "Summary": 0.4, "overall": 0.61}}
    summary = cv.summarize([fold])
    assert summary["auroc"] == {"Summary": {"mean": 0.7, "std": 0.0, "folds": [0.7]},
                                "overall": {"mean": 0.74, "std": 0.0, "folds": [0.74]}}
    assert "QA" not in summary["auroc_without_combiner"]
