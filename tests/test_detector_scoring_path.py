"""One scoring path: eval.detector scores through the runtime, so its spans are HaluGate's, on both backends;
cross-validation folds never share a source; the calibration file is honoured by the runtime."""

import json
from pathlib import Path

import pytest
from detect_helpers import export_tiny, make_run_dir

from inference.detector_stage import ALL_FEATURES, Calibration, Combiner
from inference.labels import DETECTOR_LABELS
from training.data.records import SpanRecord

CTX = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was built from 1887 to 1889. "
       "The tower is 330 meters tall. ") * 12  # long enough for several 128-token windows
RECORDS = [
    SpanRecord(id=f"r{i}", context=CTX, question=q, answer=a, task_type=t, source="x", spans=[],
               meta={"source_id": str(i)})
    for i, (q, a, t) in enumerate([
        ("How tall is it?", "The Eiffel Tower was built in 1950 and is about 500 meters tall.", "QA"),
        (None, "A tower in Paris, built 1887 to 1889, 330 meters tall.", "Summary"),
        (None, "The tower, opened by Bob Smith, is in Lyon.", "Data2txt"),
    ])]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, minilm_dir):
    path = make_run_dir(tmp_path_factory.mktemp("det") / "run", "token", DETECTOR_LABELS, minilm_dir, seed=3)
    weights = {"model_logit": 0.5, "number_unsupported": 3.0, "entity_unsupported": 2.0, "word_unsupported": 0.5,
               "function_word": -1.0, "sentence_unsupported": 1.0, "falsy_field": 2.0, "copied_4gram": -0.5,
               "pair_unsupported": 0.3, "task=QA": 0.1, "task=Data2txt": -0.2}
    comb = Combiner(list(ALL_FEATURES), [weights.get(f, 0.0) for f in ALL_FEATURES], -2.0)
    (path / "detector.json").write_text(json.dumps(
        {"max_length": 128, "calibration": Calibration(0.4, "min", comb).to_dict()}))
    return path


WINDOW = ["hallucination_mitigation.hallucination_model.max_length=128"]  # several windows per record


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_eval_and_runtime_give_identical_spans(run_dir, tmp_path, backend):
    from eval.detector import evaluate_model
    from inference.detect import HaluGate

    model = run_dir
    if backend == "onnx":
        model = tmp_path / "export"
        export_tiny(run_dir, model)
        assert (model / "detector.json").is_file()  # the calibration travels with the export
    result, preds = evaluate_model(str(model), RECORDS, backend, with_sweep=False, overrides=WINDOW)
    assert result["window_aggregation"] == "min" and result["threshold"] == 0.4 and result["combiner"]
    gate = HaluGate.from_dirs(detector=model, backend=backend, overrides=WINDOW)
    assert gate.detector_calibration.threshold == 0.4
    for rec, p in zip(RECORDS, preds):
        res = gate.detect_batch([{"context": rec.context, "question": rec.question, "answer": rec.answer,
                                  "task_type": rec.task_type}])[0]
        assert res.detector_windows == p.scores.windows > 1
        assert [(s.start, s.end, round(s.confidence, 6)) for s in res.spans] == \
            [(s["start"], s["end"], round(s["confidence"], 6)) for s in p.spans]
        assert res.hallucination_score == pytest.approx(p.scores.score, abs=1e-4)
    # the grounding combiner is in force: "500 meters" is flagged, "Paris" never
    texts = [s["text"] for p in preds for s in p.spans]
    assert any("500" in t for t in texts) and not any("Paris" in t for t in texts)


def test_use_model_calibration_off_ignores_the_file(run_dir):
    from inference.detect import HaluGate

    gate = HaluGate.from_dirs(detector=run_dir, backend="torch",
                              overrides=["hallucination_mitigation.hallucination_model.use_model_calibration=false"])
    res = gate.detect_batch([{"context": CTX, "answer": "It is 500 meters tall."}])[0]
    assert res.status == "ok"
    from inference.detector_stage import effective

    hm = gate.settings.hallucination_mitigation.hallucination_model
    assert effective(hm, gate.detector_calibration) == (hm.threshold, hm.window_aggregation, None)


def test_cv_folds_never_share_a_source():
    from eval.detector_cv import fold_of_sources
    from training.detector import group_key

    recs = [SpanRecord(id=f"{s}-{m}", source="ragtruth_test_subset", meta={"source_id": str(s)}, context=f"c{s}",
                       answer="a")
            for s in range(40) for m in range(6)]
    folds = fold_of_sources(recs, 5, seed=42)
    by_source: dict = {}
    for r in recs:
        by_source.setdefault(r.meta["source_id"], set()).add(folds[group_key(r)])
    assert all(len(f) == 1 for f in by_source.values())
    sizes = [sum(1 for v in folds.values() if v == k) for k in range(5)]
    assert sizes == [8] * 5 and fold_of_sources(recs, 5, seed=42) == folds


def test_cv_calibration_split_comes_from_the_folded_source_only():
    from training.detector import group_split

    folded = [SpanRecord(id=f"r{i}", context=f"doc {i // 3}", answer="a", source="rag", meta={"source_id": i // 3})
              for i in range(60)]
    extra = [SpanRecord(id=f"w{i}", context=f"page {i}", answer="b", source="wice") for i in range(20)]
    fit, calib, _ = group_split([*extra, *folded], (0.8, 0.2, 0.0), seed=1, train_only={"wice"})  # as run_fold
    assert {r.source for r in calib} == {"rag"} and sum(r.source == "wice" for r in fit) == 20
    assert group_split(folded, (0.8, 0.2, 0.0), seed=1)[1] == calib  # other sources do not move the split
    assert len(fit) + len(calib) == 80


def test_smoothing_averages_neighbouring_tokens():
    import numpy as np

    from inference.detector_stage import smooth

    assert np.allclose(smooth(np.array([0.0, 0.0, 0.9, 0.0, 0.0]), 3), [0, 0.3, 0.3, 0.3, 0])
    assert np.allclose(smooth(np.array([0.9, 0.0, 0.0]), 3), [0.45, 0.3, 0.0])  # edges: the neighbours that exist
    assert np.allclose(smooth(np.array([0.2, 0.8, 0.2, 0.8]), 5), [0.4, 0.5, 0.5, 0.6])
    for width in (0, 1):
        assert np.array_equal(smooth(np.array([0.1, 0.9]), width), [0.1, 0.9])
    with pytest.raises(ValueError, match="smoothing"):
        Calibration(smoothing=-1)


def test_the_runtime_applies_the_calibrated_smoothing_after_the_combiner(run_dir, tmp_path):
    import shutil

    import numpy as np

    from inference.detect import HaluGate
    from inference.detector_stage import smooth

    smoothed = tmp_path / "smoothed"
    shutil.copytree(run_dir, smoothed)
    data = json.loads((run_dir / "detector.json").read_text())
    data["calibration"]["smoothing"] = 3
    (smoothed / "detector.json").write_text(json.dumps(data))
    item = {"context": CTX, "question": "How tall is it?", "answer": RECORDS[0].answer, "task_type": "QA"}
    plain, sm = (HaluGate.from_dirs(detector=d, backend="torch", overrides=WINDOW) for d in (run_dir, smoothed))
    assert sm.detector_calibration.smoothing == 3 and plain.detector_calibration.smoothing == 0
    a, b = (g.score_tokens(g.prepare([item]))[0] for g in (plain, sm))
    assert np.allclose(a.model_probs, b.model_probs) and not np.allclose(a.probs, b.probs)
    assert np.allclose(b.probs, smooth(a.probs, 3))
    off = HaluGate.from_dirs(detector=smoothed, backend="torch", overrides=WINDOW + [
        "hallucination_mitigation.hallucination_model.use_model_calibration=false"])
    c = off.score_tokens(off.prepare([item]))[0]
    assert np.allclose(c.probs, c.model_probs)  # calibration off: no combiner, no smoothing



def test_the_runtime_computes_only_the_grounding_signals_its_combiner_reads(run_dir, tmp_path):
    """A combiner-off model skips the grounding signals, a combiner without copy signals skips those, and neither
    changes a probability; scores without the signals refuse to be rescored under a combiner that reads them."""
    import shutil

    import numpy as np

    from inference.detect import HaluGate
    from inference.detector_stage import rescore, score_answers
    from inference.grounding import COPY_FEATURES, FEATURES

    no_copy = tmp_path / "no-copy"
    shutil.copytree(run_dir, no_copy)
    data = json.loads((run_dir / "detector.json").read_text())
    comb = data["calibration"]["combiner"]
    kept = [i for i, f in enumerate(comb["features"]) if f not in COPY_FEATURES]
    comb["features"], comb["coef"] = [comb["features"][i] for i in kept], [comb["coef"][i] for i in kept]
    (no_copy / "detector.json").write_text(json.dumps(data))
    item = {"context": CTX, "question": "How tall is it?", "answer": RECORDS[0].answer, "task_type": "QA"}
    off = ["hallucination_mitigation.hallucination_model.use_model_calibration=false"]
    full = HaluGate.from_dirs(detector=run_dir, backend="torch").detector_calibration.combiner
    copy_columns = [j for j, f in enumerate(FEATURES) if f in COPY_FEATURES]
    scores = {}
    for model, extra, expected in ((run_dir, [], "all"), (no_copy, [], "grounding"), (run_dir, off, "none")):
        needed, every = (HaluGate.from_dirs(detector=model, backend="torch", overrides=WINDOW + extra)
                         for _ in range(2))
        every.detector_signals = "all"
        a, b = (g.score_tokens(g.prepare([item]))[0] for g in (needed, every))
        assert a.signals == expected and b.signals == "all", model
        assert len(b.grounding) == len(b.answer_offsets) > 0 and b.grounding[:, copy_columns].any()
        assert np.allclose(a.probs, b.probs)  # only signals nobody reads were left out
        scores[expected] = a
    assert len(scores["none"].grounding) == 0
    assert not scores["grounding"].grounding[:, copy_columns].any()
    for computed in ("none", "grounding"):
        with pytest.raises(ValueError, match="signals='all'"):
            rescore(scores[computed], "max", full)
    with pytest.raises(ValueError, match="signals: one of"):
        score_answers(None, [], None, None, 1, "some")
    with pytest.raises(ValueError, match="answer_types: one of"):
        score_answers(None, [], None, None, 1, "needed", "typed")


def test_eval_scores_the_onnx_file_the_runtime_runs_by_default(run_dir, tmp_path, auto_prefers_int8):
    """An export with int8 (faster, on injected timings): eval.detector's default scores model_quantized.onnx, as
    HaluGate's default does, and says so; --precision fp32 scores model.onnx."""
    from eval.detector import evaluate_model
    from inference.detect import HaluGate

    model = export_tiny(run_dir, tmp_path / "export", quantize=True)
    result, preds = evaluate_model(str(model), RECORDS, "onnx", with_sweep=False, overrides=WINDOW)
    assert (result["precision"], result["onnx_file"]) == ("int8", "model_quantized.onnx")
    gate = HaluGate.from_dirs(detector=model, overrides=WINDOW)
    assert gate.runners["detector"].precision == "int8"
    for rec, p in zip(RECORDS, preds):
        res = gate.detect_batch([{"context": rec.context, "question": rec.question, "answer": rec.answer,
                                  "task_type": rec.task_type}])[0]
        assert [(s.start, s.end) for s in res.spans] == [(s["start"], s["end"]) for s in p.spans]
    fp32, fp32_preds = evaluate_model(str(model), RECORDS, "onnx", with_sweep=False, overrides=WINDOW,
                                      precision="fp32")
    assert (fp32["precision"], fp32["onnx_file"]) == ("fp32", "model.onnx") and "fp32_reference" not in fp32
    # the int8 evaluation also scored the fp32 file: its figures are the fp32 evaluation's, and the agreement
    # counts compare the two scorings' spans
    ref = result["fp32_reference"]
    assert ref["levels"] == fp32["levels"] and ref["answers"] == len(RECORDS)
    same = sum([(s["start"], s["end"]) for s in a.spans] == [(s["start"], s["end"]) for s in b.spans]
               for a, b in zip(preds, fp32_preds))
    assert ref["same_spans"] == same and ref["same_flag"] >= same


def test_decision_agreement_counts_spans_flags_and_characters():
    from eval.detector import decision_agreement
    from training.detector_scoring import Prediction

    def pred(*spans):
        return Prediction(scores=None, spans=[{"start": a, "end": b} for a, b in spans])

    ours = [pred((0, 4)), pred((10, 20)), pred(), pred((5, 6))]
    theirs = [pred((0, 4)), pred((12, 20)), pred((1, 3)), pred()]
    assert decision_agreement(ours, theirs, ["x" * 25] * 4) == {
        "answers": 4, "same_spans": 1, "same_flag": 2, "flagged_chars_differing": 2 + 2 + 1,
        "flagged_chars_either": 4 + 10 + 2 + 1, "char_agreement": 1 - 5 / 100}


def test_detector_json_answer_types_are_read_and_checked(tmp_path):
    from inference.detector_stage import load_detector_json

    assert load_detector_json(tmp_path)[3] == "plain"  # no file: a plain model
    (tmp_path / "detector.json").write_text(json.dumps({"calibration": None, "answer_types": "grounding"}))
    assert load_detector_json(tmp_path)[3] == "grounding"
    (tmp_path / "detector.json").write_text(json.dumps({"calibration": None, "answer_types": "typed"}))
    with pytest.raises(ValueError, match="answer_types must be one of plain, grounding"):
        load_detector_json(tmp_path)


def test_cv_train_fraction_keeps_whole_sources_and_refuses_bad_values():
    from eval.detector_cv import run_cv, subsample_sources
    from training.data.base import DataError
    from training.detector import group_key

    recs = [SpanRecord(id=f"{s}-{m}", source="ragtruth_test_subset", meta={"source_id": str(s)}, context=f"c{s}",
                       answer="a")
            for s in range(40) for m in range(6)]
    half = subsample_sources(recs, 0.5, seed=42, fold=1)
    kept = {group_key(r) for r in half}
    assert len(kept) == 20 and len(half) == 120  # whole sources: all six responses of each kept one
    assert subsample_sources(recs, 0.5, seed=42, fold=1) == half  # seeded
    assert {group_key(r) for r in subsample_sources(recs, 0.5, seed=42, fold=2)} != kept  # drawn per fold
    assert subsample_sources(recs, 1.0, seed=42, fold=1) == recs
    assert len({group_key(r) for r in subsample_sources(recs, 0.001, seed=42, fold=1)}) == 1
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(DataError, match="--train-fraction"):
            subsample_sources(recs, bad, seed=42, fold=1)
    with pytest.raises(DataError, match="--apply-to"):
        run_cv("configs/detector.demo.yaml", 5, Path("unused"), train_fraction=0.5, apply_to=Path("unused"))


def test_cv_rerun_refuses_another_train_fraction(tmp_path):
    from eval.detector_cv import check_train_fraction, run_cv
    from training.data.base import DataError

    (tmp_path / "fold-0").mkdir()
    (tmp_path / "fold-0" / "fold_metrics.json").write_text(json.dumps({"fold": 0, "train_fraction": 0.5}))
    check_train_fraction(0.5, tmp_path)  # the same fraction resumes
    with pytest.raises(DataError, match="trained with 0.5"):
        run_cv("configs/detector.demo.yaml", 5, tmp_path, train_fraction=0.25)
    (tmp_path / "fold-0" / "fold_metrics.json").write_text(json.dumps({"fold": 0}))  # before the option: all sources
    with pytest.raises(DataError, match="trained with 1.0"):
        check_train_fraction(0.5, tmp_path)
