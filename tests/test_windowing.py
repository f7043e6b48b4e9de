"""Window selection by overlap with the answer (max_windows) and the Detector window plan in the runtime."""

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


def test_max_windows_applies_only_under_min_aggregation(minilm_dir):
    from detect_helpers import fakes

    from inference.config import apply_overrides, from_dict
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    def gate(aggregation):
        data = apply_overrides({}, ["hallucination_mitigation.hallucination_model.max_length=96",
                                    "hallucination_mitigation.hallucination_model.max_windows=2",
                                    f"hallucination_mitigation.hallucination_model.window_aggregation={aggregation}"])
        return HaluGate(from_dict(InferenceSettings, data, "<test>"), **fakes(minilm_dir))

    x = {"context": _context(), "question": "When was it built?", "answer": ANSWER}
    assert gate("min").detect(**x).detector_windows == 2
    assert gate("max").detect(**x).detector_windows > 2  # max: a dropped window could have lost a flag


def test_max_positions_leaves_out_the_padding_offset_of_roberta_style_models():
    """mpnet / RoBERTa count pad_token_id + 1 unusable positions in max_position_embeddings (514 for 512 tokens):
    windows planned at 514 crashed the first mpnet Detector's calibration with an embedding IndexError."""
    from inference.runners import max_positions

    assert max_positions({"model_type": "mpnet", "max_position_embeddings": 514, "pad_token_id": 1}) == 512
    assert max_positions({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}) == 512
    assert max_positions({"model_type": "bert", "max_position_embeddings": 512, "pad_token_id": 0}) == 512
    assert max_positions({"model_type": "modernbert", "max_position_embeddings": 8192}) == 8192
    assert max_positions({}) == 512
