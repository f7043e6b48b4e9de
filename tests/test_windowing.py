"""Window selection by overlap with the answer (max_windows) and the Detector window plan in the runtime."""

from itertools import pairwise

import pytest

from inference.spans import context_windows
from inference.windowing import InputTooLongError, detector_windows, rank_windows, select_windows


@pytest.fixture(scope="module")
def hf_tok(minilm_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir)


def _context() -> str:
    filler = " ".join(f"filler{i} sentence about nothing in particular." for i in range(120))
    return f"{filler} The Eiffel Tower was built from 1887 to 1889 in Paris. {filler}"


ANSWER = "The Eiffel Tower was built in 1950 in Paris."


def test_rank_windows_puts_the_evidence_window_first(hf_tok):
    ctx = _context()
    wins = context_windows(hf_tok, ctx, "When was it built?", ANSWER, max_length=96, overlap=8)
    assert len(wins) > 5
    best = wins[rank_windows(wins, ctx, ANSWER)[0]]
    assert "Eiffel Tower was built" in ctx[best.context_char_range[0]:best.context_char_range[1]]


def test_select_windows_keeps_the_best_in_document_order(hf_tok):
    ctx = _context()
    wins = context_windows(hf_tok, ctx, "When was it built?", ANSWER, max_length=96, overlap=8)
    assert select_windows(wins, ctx, ANSWER, 0) is wins  # 0: every window
    assert select_windows(wins, ctx, ANSWER, len(wins)) is wins
    kept = select_windows(wins, ctx, ANSWER, 2)
    starts = [w.context_token_range[0] for w in kept]
    assert len(kept) == 2 and starts == sorted(starts)
    texts = [ctx[w.context_char_range[0]:w.context_char_range[1]] for w in kept]
    assert any("Eiffel Tower was built" in t for t in texts)


def test_detector_windows_applies_max_windows_and_limits(hf_tok):
    ctx = _context()
    every = detector_windows(hf_tok, ctx, None, ANSWER, max_length=96, overlap=8, max_context_tokens=10_000,
                             task_type="QA")
    few = detector_windows(hf_tok, ctx, None, ANSWER, max_length=96, overlap=8, max_context_tokens=10_000,
                           task_type="QA", max_windows=3)
    assert len(every) > 3 and len(few) == 3
    with pytest.raises(InputTooLongError, match="max_context_tokens"):
        detector_windows(hf_tok, ctx, None, ANSWER, max_length=96, overlap=8, max_context_tokens=100,
                         task_type="QA", max_windows=3)


def test_max_windows_applies_under_min_aggregation_and_under_max_when_asked(minilm_dir):
    from detect_helpers import fakes

    from inference.config import apply_overrides, from_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    def gate(aggregation, under=None):
        data = apply_overrides({}, ["hallucination_mitigation.hallucination_model.max_length=96",
                                    "hallucination_mitigation.hallucination_model.max_windows=2",
                                    *([f"hallucination_mitigation.hallucination_model.max_windows_under={under}"]
                                      if under else []),
                                    f"hallucination_mitigation.hallucination_model.window_aggregation={aggregation}"])
        return HaluGate(from_dict(InferenceSettings, data, "<test>"), **fakes(minilm_dir))

    x = {"context": _context(), "question": "When was it built?", "answer": ANSWER}
    assert gate("min").detect(**x).detector_windows == 2
    # by default (max_windows_under: any) the budget bounds the work under max as well, same windows as under min
    budgeted = gate("max").detect(**x)
    assert budgeted.detector_windows == 2 and budgeted.detector_context_coverage < 1.0
    assert gate("min", "min").detect(**x).detector_windows == 2
    assert gate("max", "min").detect(**x).detector_windows > 2  # min only: max reads every window


def test_max_positions_leaves_out_the_padding_offset_of_roberta_style_models():
    """mpnet / RoBERTa count pad_token_id + 1 unusable positions in max_position_embeddings (514 for 512 tokens):
    windows planned at 514 crashed the first mpnet Detector's calibration with an embedding IndexError."""
    from inference.runners import max_positions

    assert max_positions({"model_type": "mpnet", "max_position_embeddings": 514, "pad_token_id": 1}) == 512
    assert max_positions({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}) == 512
    assert max_positions({"model_type": "bert", "max_position_embeddings": 512, "pad_token_id": 0}) == 512
    assert max_positions({"model_type": "modernbert", "max_position_embeddings": 8192}) == 8192
    assert max_positions({}) == 512


# ---- packed windows (window_fill / training_windows "packed") -------------------------------------------------

def _scattered_context() -> str:
    filler = [f"Filler{i} sentence about nothing in particular at all." for i in range(60)]
    filler[10] = "The Eiffel Tower was built from 1887 to 1889."
    filler[45] = "The tower is 330 meters tall and stands in Paris."
    return " ".join(filler)


PACK_ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall. It stands in Paris."


def test_pack_context_ranges_gathers_the_evidence_of_every_answer_sentence_in_document_order(hf_tok):
    from inference.spans import context_units, pack_context_ranges, tokenize_segment

    ctx = _scattered_context()
    _, offsets = tokenize_segment(hf_tok, ctx)
    units = context_units(ctx, offsets)
    assert units[0][0] == 0 and units[-1][1] == len(offsets)
    assert all(a < b for a, b in units) and all(u[1] == v[0] for u, v in pairwise(units))
    ranges = pack_context_ranges(ctx, offsets, PACK_ANSWER, budget=40)
    text = " ".join(ctx[offsets[a][0]:offsets[b - 1][1]] for a, b in ranges)
    assert "built from 1887 to 1889" in text and "330 meters tall" in text  # 35 and 15 sentences apart
    assert sum(b - a for a, b in ranges) <= 40
    assert ranges == sorted(ranges) and all(u[1] < v[0] for u, v in pairwise(ranges))  # merged, ordered


def test_packed_window_holds_the_answer_unchanged_and_is_the_plain_window_when_the_context_fits(hf_tok):
    ctx = _scattered_context()
    packed = context_windows(hf_tok, ctx, None, PACK_ANSWER, max_length=96, fill="packed")
    plain = context_windows(hf_tok, ctx, None, PACK_ANSWER, max_length=96)
    assert len(packed) == 1 and len(plain) > 1
    w = packed[0]
    assert len(w.input_ids) <= 96 and w.context_truncated
    assert w.answer_offsets == plain[0].answer_offsets
    assert w.input_ids[w.answer_slice] == plain[0].input_ids[plain[0].answer_slice]
    assert len(w.meta["context_char_ranges"]) > 1
    short = "The Eiffel Tower was built from 1887 to 1889."
    assert context_windows(hf_tok, short, None, PACK_ANSWER, max_length=96, fill="packed")[0].input_ids == \
        context_windows(hf_tok, short, None, PACK_ANSWER, max_length=96)[0].input_ids


def test_packed_training_example_masks_less_than_the_best_contiguous_window(hf_tok):
    from training.data.records import SpanRecord
    from training.detector import training_example

    ctx = _scattered_context()
    # the best contiguous window holds the first sentence's evidence; the second's lies 35 sentences later
    answer = "The Eiffel Tower was built from 1887 to 1889. It is 500 meters tall and stands in Paris."
    spans = [{"start": answer.index("500"), "end": answer.index("500") + 3, "label": "x"}]
    rec = SpanRecord(id="r", source="t", context=ctx, question=None, answer=answer, spans=spans,
                     task_type="Summary")
    _, masked_contiguous = training_example(hf_tok, rec, 96, 8, "answer_overlap")
    packed, masked_packed = training_example(hf_tok, rec, 96, 8, "packed")
    assert masked_contiguous > 0 and masked_packed == 0
    assert packed.labels[packed.answer_slice] == [int(x) for x in packed.labels[packed.answer_slice]]
    assert 1 in packed.labels[packed.answer_slice]  # the hallucinated label is kept


def test_window_fill_auto_follows_the_plan_the_detector_was_trained_with(minilm_dir, tmp_path):
    import json

    from detect_helpers import make_run_dir

    from inference.config import apply_overrides, from_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    run = make_run_dir(tmp_path / "det", "token", ["SUPPORTED", "HALLUCINATED"], minilm_dir)

    def gate(fill=None):
        over = ["hallucination_mitigation.backend=torch", "hallucination_mitigation.hallucination_model.max_length=96",
                "hallucination_mitigation.hallucination_model.max_windows=0",  # the plan itself, every window
                f"hallucination_mitigation.hallucination_model.model_id={run}",
                "hallucination_mitigation.fact_check_model.model_id=", "hallucination_mitigation.nli_model.model_id="]
        if fill:
            over.append(f"hallucination_mitigation.hallucination_model.window_fill={fill}")
        return HaluGate(from_dict(InferenceSettings, apply_overrides({}, over), "<test>"))

    x = {"context": _scattered_context(), "question": "Tell me about the tower.", "answer": PACK_ANSWER}
    r = gate().detect(**x)
    assert gate().window_fill() == "even" and r.detector_windows > 1 and r.detector_context_coverage == 1.0
    (run / "detector.json").write_text(json.dumps({"window_fill": "packed"}))
    r = gate().detect(**x)
    assert gate().window_fill() == "packed" and r.detector_windows == 1 and 0 < r.detector_context_coverage < 1
    assert gate("even").window_fill() == "even"  # an explicit setting wins
    (run / "detector.json").write_text(json.dumps({"window_fill": "diagonal"}))
    assert "window_fill must be one of" in gate().load_errors["detector"]  # a bad plan is a load error


# ---- grounding signals against what the windows hold (inference.detector_stage.read_context) -----------------

def test_grounding_reads_only_the_kept_windows_when_max_windows_drops_some(hf_tok):
    from inference.detector_stage import read_context
    from inference.grounding import FEATURES, ContextIndex, grounding_features
    from inference.windowing import detector_windows

    far = " ".join(f"Unrelated{i} remark number {i + 2000} about other things." for i in range(80))
    context = "The Eiffel Tower was built from 1887 to 1889 in Paris. " + far
    answer = "The Eiffel Tower was built in 1887 and is 2050 meters tall."  # 2050 only in a far passage

    def windows(k):
        return detector_windows(hf_tok, context, None, answer, max_length=96, overlap=8, max_context_tokens=10_000,
                                task_type=None, max_windows=k)

    every = windows(0)
    assert len(every) > 4 and read_context(context, every) == context  # all read: the whole context, unchanged
    kept = windows(1)  # the window sharing the most words with the answer: the Eiffel sentence
    read = read_context(context, kept)
    assert "1887" in read and "2050" not in read and len(read) < len(context) / 4

    def unsupported_2050(text):
        feats = grounding_features(answer, text, None, kept[0].answer_offsets, ContextIndex(text))
        start = answer.index("2050")
        i = next(j for j, (s, e) in enumerate(kept[0].answer_offsets) if s <= start < e)
        return feats[i, FEATURES.index("number_unsupported")]

    # a number the Detector never read counts as unsupported, as it does when the context lacks it
    assert unsupported_2050(context) == 0.0 and unsupported_2050(read) == 1.0


def test_the_detector_stage_grounds_on_the_windows_it_read(minilm_dir, tmp_path):
    from detect_helpers import make_run_dir

    from inference.config import apply_overrides, from_dict
    from inference.detect import HaluGate
    from inference.grounding import FEATURES
    from inference.settings import InferenceSettings

    run = make_run_dir(tmp_path / "det", "token", ["SUPPORTED", "HALLUCINATED"], minilm_dir)
    far = " ".join(f"Unrelated{i} remark number {i + 2000} about other things." for i in range(80))
    x = {"context": "The Eiffel Tower was built from 1887 to 1889 in Paris. " + far,
         "answer": "The Eiffel Tower was built in 1887 and is 2050 meters tall."}

    def number_flag(max_windows):
        gate = HaluGate(from_dict(InferenceSettings, apply_overrides({}, [
            "hallucination_mitigation.backend=torch", f"hallucination_mitigation.hallucination_model.model_id={run}",
            "hallucination_mitigation.hallucination_model.max_length=96",
            "hallucination_mitigation.hallucination_model.window_aggregation=min",
            f"hallucination_mitigation.hallucination_model.max_windows={max_windows}",
            "hallucination_mitigation.fact_check_model.model_id=", "hallucination_mitigation.nli_model.model_id="]),
            "<test>"))
        gate.detector_signals = "all"  # no combiner here: the grounding signals are computed on request only
        scores = gate.score_tokens(gate.prepare([x]))[0]
        start = x["answer"].index("2050")
        i = next(j for j, (s, e) in enumerate(scores.answer_offsets) if s <= start < e)
        return scores.windows, scores.grounding[i, FEATURES.index("number_unsupported")]

    n_all, flag_all = number_flag(0)
    n_one, flag_one = number_flag(1)
    assert n_all > 4 and n_one == 1
    assert flag_all == 0.0 and flag_one == 1.0  # 2050 sits in a window the Detector did not read
