"""inference.spans: the one Detector input format, label alignment, truncation and span reconstruction."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inference.labels import IGNORE_INDEX
from inference.spans import (
    CONTEXT_PREFIX,
    QUESTION_PREFIX,
    AnswerTooLongError,
    SpecialTokens,
    check_spans,
    context_windows,
    encode_detector_input,
    plan_window_starts,
    plan_windows,
    token_labels,
    token_probs_to_spans,
    tokenize_segment,
)


@pytest.fixture(scope="module")
def hf_tok(minilm_dir):
    from training.models import load_tokenizer

    return load_tokenizer(minilm_dir)


@pytest.fixture(scope="module")
def raw_tok(minilm_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(minilm_dir) / "tokenizer.json"))


@pytest.fixture(scope="module")
def bpe_tok():
    """A tiny byte-level BPE (ModernBERT/GPT style: offsets of 'Ġword' tokens include the leading space)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[CLS]", "[SEP]", "[PAD]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = ["The capital of France is Paris and it is big.", "Paris is the capital city of France.",
            "The tower is tall and was built in Paris."] * 20
    tok.train_from_iterator(text, trainer)
    return tok


def _tokens(tok, enc):
    return [tok.convert_ids_to_tokens(i) if hasattr(tok, "convert_ids_to_tokens") else tok.id_to_token(i)
            for i in enc.input_ids]


def _answer_labels(tok, enc):
    toks = _tokens(tok, enc)
    return [(toks[i], enc.labels[i]) for i in range(enc.answer_slice.start, enc.answer_slice.stop)]


# ---- layout -----------------------------------------------------------------------------------------------

def test_layout_is_cls_context_sep_question_sep_answer_sep(hf_tok):
    ctx, q, ans = "Paris is the capital of France.", "What is the capital?", "It is Paris."
    enc = encode_detector_input(hf_tok, ctx, q, ans, max_length=128, task_type="QA")
    cls, sep = hf_tok.cls_token_id, hf_tok.sep_token_id
    prefix = tokenize_segment(hf_tok, CONTEXT_PREFIX["QA"])[0]
    expected = ([cls] + prefix + tokenize_segment(hf_tok, ctx)[0] + [sep]
                + tokenize_segment(hf_tok, QUESTION_PREFIX["QA"] + q)[0] + [sep]
                + tokenize_segment(hf_tok, ans)[0] + [sep])
    assert enc.input_ids == expected
    assert enc.attention_mask == [1] * len(expected)
    assert enc.input_ids[enc.answer_start - 1] == sep and enc.input_ids[-1] == sep
    assert enc.token_type_ids == [0] * enc.answer_start + [1] * (len(expected) - enc.answer_start)
    assert not enc.context_truncated and enc.labels is None

    no_q = encode_detector_input(hf_tok, ctx, None, ans, max_length=128, task_type="Summary")
    assert no_q.input_ids.count(sep) == 2  # [CLS] prefix context [SEP] answer [SEP]
    assert no_q.input_ids[1:1 + len(tokenize_segment(hf_tok, CONTEXT_PREFIX["Summary"])[0])] == \
        tokenize_segment(hf_tok, CONTEXT_PREFIX["Summary"])[0]
    assert encode_detector_input(hf_tok, ctx, "", ans, 128).input_ids.count(sep) == 2
    unknown = encode_detector_input(hf_tok, ctx, None, ans, 128, task_type="something else")
    assert unknown.input_ids == [cls] + tokenize_segment(hf_tok, ctx)[0] + [sep] + tokenize_segment(hf_tok, ans)[0] + [sep]


def test_structured_context_is_compact_json(hf_tok):
    data = {"name": "Café Ü", "hours": {"Monday": "8-14"}}
    a = encode_detector_input(hf_tok, data, None, "Open Mondays.", 128, task_type="data2txt")
    b = encode_detector_input(hf_tok, json.dumps(data, ensure_ascii=False), None, "Open Mondays.", 128,
                              task_type="Data2txt")
    assert a.input_ids == b.input_ids and a.task_type == "Data2txt"


def test_raw_tokenizer_and_hf_tokenizer_encode_identically(hf_tok, raw_tok, minilm_dir):
    # MiniLM's tokenizer.json carries truncation=128 and padding=128: they must not leak into the format.
    assert raw_tok.truncation is not None and raw_tok.padding is not None
    ctx = "The Eiffel Tower, in Paris, is 330 metres tall. " * 40
    spans = [{"start": 13, "end": 23, "text": "330 metres"}]
    ans = "The tower is 330 metres tall and was built in 1889."
    a = encode_detector_input(hf_tok, ctx, "How tall?", ans, 256, task_type="QA", spans=spans)
    b = encode_detector_input(raw_tok, ctx, "How tall?", ans, 256, task_type="QA", spans=spans)
    assert a.input_ids == b.input_ids and a.labels == b.labels and a.answer_offsets == b.answer_offsets
    assert a.token_type_ids == b.token_type_ids and len(a) == 256
    assert SpecialTokens.from_tokenizer(raw_tok) == SpecialTokens.from_tokenizer(hf_tok)
    assert raw_tok.truncation["max_length"] == 128 and raw_tok.padding["length"] == 128  # restored
    assert hf_tok("x " * 300, truncation=True, max_length=16)["input_ids"].__len__() == 16  # HF still works


# ---- labels -----------------------------------------------------------------------------------------------

def test_labels_spans_at_start_and_end_of_answer(hf_tok):
    ans = "Berlin is the capital of France according to records from 1850"
    assert ans.index("1850") == len(ans) - 4
    spans = [{"start": 0, "end": 6, "text": "Berlin"}, {"start": len(ans) - 4, "end": len(ans), "text": "1850"}]
    enc = encode_detector_input(hf_tok, "Paris is the capital of France.", "Capital?", ans, 128, "QA", spans)
    got = _answer_labels(hf_tok, enc)
    assert got[0] == ("berlin", 1) and got[-1] == ("1850", 1)
    assert all(lab == 0 for _, lab in got[1:-1])
    assert all(lab == IGNORE_INDEX for lab in enc.labels[:enc.answer_start])  # context, question, specials
    assert enc.labels[-1] == IGNORE_INDEX  # final [SEP]
    assert len(enc.labels) == len(enc.input_ids)


def test_labels_adjacent_spans_and_partial_word_overlap(hf_tok):
    ans = "The Eiffel Tower opened in 1889 in Paris."
    # adjacent spans "opened" + " in 1889" and a span covering only part of "Paris" (subword overlap counts)
    spans = [{"start": 17, "end": 23}, {"start": 23, "end": 31}, {"start": 35, "end": 37}]
    enc = encode_detector_input(hf_tok, "ctx", None, ans, 64, spans=spans)
    got = {t: lab for t, lab in _answer_labels(hf_tok, enc)}
    assert got["opened"] == 1 and got["in"] in (0, 1) and got["1889"] == 1 and got["paris"] == 1
    labels = [lab for _, lab in _answer_labels(hf_tok, enc)]
    toks = [t for t, _ in _answer_labels(hf_tok, enc)]
    assert labels[toks.index("opened"):toks.index("1889") + 1] == [1, 1, 1]
    assert labels[toks.index("the")] == 0 and labels[toks.index("tower")] == 0 and labels[-1] == 0  # "."


def test_labels_unicode_offsets(hf_tok, raw_tok):
    ans = "Café Zürich 😀 opened in 東京 in 2001."
    z, t = ans.index("Zürich"), ans.index("東京")
    spans = [{"start": z, "end": z + 6, "text": "Zürich"}, {"start": t, "end": t + 2, "text": "東京"}]
    for tok in (hf_tok, raw_tok):
        enc = encode_detector_input(tok, "Das Café liegt in Bern.", None, ans, 64, spans=spans)
        for (s, e), lab in zip(enc.answer_offsets, enc.labels[enc.answer_slice]):
            inside = any(s < sp["end"] and e > sp["start"] for sp in spans)
            assert lab == int(inside), (ans[s:e], lab)
        flagged = [ans[s:e] for (s, e), lab in zip(enc.answer_offsets, enc.labels[enc.answer_slice]) if lab]
        assert flagged == ["Zürich", "東", "京"]  # char offsets, not bytes: 😀 before 東京 does not shift them


def test_whitespace_never_counts_as_overlap_with_byte_level_bpe(bpe_tok):
    ans = "Paris is big."
    enc = encode_detector_input(bpe_tok, "The capital of France is Paris.", None, ans, 64,
                                spans=[{"start": 0, "end": 6, "text": "Paris "}])  # span ends with a space
    toks = _tokens(bpe_tok, enc)[enc.answer_slice]
    offsets = enc.answer_offsets
    i_is = next(i for i, tk in enumerate(toks) if tk.startswith("Ġ"))
    assert offsets[i_is][0] == 5  # the 'Ġis' token's raw offsets include the space at 5 ...
    labels = enc.labels[enc.answer_slice]
    assert labels[0] == 1 and labels[i_is] == 0  # ... yet only "Paris" is labelled


def test_token_labels_whitespace_only_tokens():
    ans = "A  B"
    assert token_labels(ans, [(0, 1), (1, 3), (3, 4)], [{"start": 0, "end": 4}]) == [1, 1, 1]
    assert token_labels(ans, [(0, 1), (1, 3), (3, 4)], [{"start": 3, "end": 4}]) == [0, 0, 1]


# ---- truncation -------------------------------------------------------------------------------------------

def test_only_the_context_is_cut(hf_tok):
    ctx = " ".join(f"word{i}" for i in range(600))
    q, ans = "Which words appear?", "Only word1 and word2 appear in the text, and nothing else is there."
    enc = encode_detector_input(hf_tok, ctx, q, ans, max_length=64, task_type="QA",
                                spans=[{"start": 5, "end": 10}])
    assert len(enc) == 64 and enc.context_truncated
    assert enc.input_ids[enc.answer_slice] == tokenize_segment(hf_tok, ans)[0]  # answer whole
    q_ids = tokenize_segment(hf_tok, QUESTION_PREFIX["QA"] + q)[0]
    assert enc.input_ids[enc.answer_start - 1 - len(q_ids) - 1:enc.answer_start - 1][1:] == q_ids
    start, end = enc.context_char_range
    assert start == 0 and 0 < end < len(ctx) and ctx[:end].endswith(ctx[:end].split()[-1])
    assert enc.context_token_range[1] < enc.context_tokens
    short = encode_detector_input(hf_tok, "tiny context", q, ans, 64, "QA")
    assert not short.context_truncated and short.context_char_range == (0, len("tiny context"))


def test_answer_too_long_is_an_error_not_a_cut(hf_tok):
    with pytest.raises(AnswerTooLongError) as err:
        encode_detector_input(hf_tok, "ctx", "q", "word " * 100, max_length=32)
    assert err.value.needed > 32


def test_context_windows_cover_the_context(hf_tok):
    ctx = " ".join(f"fact{i}" for i in range(300))
    ans = "fact1 and fact299 are both there."
    wins = context_windows(hf_tok, ctx, "q?", ans, max_length=64, overlap=8, task_type="QA")
    assert len(wins) > 2 and all(len(w) <= 64 for w in wins)
    assert wins[0].context_token_range[0] == 0 and wins[-1].context_token_range[1] == wins[0].context_tokens
    for a, b in itertools.pairwise(wins):
        assert a.context_token_range[1] - b.context_token_range[0] >= 8  # at least the overlap of 8 tokens
    budget = wins[0].context_token_range[1]
    assert all(w.context_token_range[1] - w.context_token_range[0] == budget for w in wins)  # all full
    assert all(w.answer_offsets == wins[0].answer_offsets for w in wins)
    assert all(w.input_ids[w.answer_slice] == wins[0].input_ids[wins[0].answer_slice] for w in wins)
    assert len(context_windows(hf_tok, "short", "q?", ans, max_length=64)) == 1


@pytest.mark.parametrize("n,budget,overlap,expected", [
    (100, 100, 32, 1), (101, 100, 0, 2), (200, 100, 0, 2), (201, 100, 0, 3), (4096, 430, 0, 10),
    (4096, 430, 32, 11), (4096, 430, 128, 14), (1000, 10, 9, 991)])
def test_window_plan_is_the_fewest_cover(n, budget, overlap, expected):
    starts = plan_window_starts(n, budget, overlap)
    assert len(starts) == expected
    covered = [0] * n
    for s in starts:
        assert 0 <= s and s + min(budget, n) <= n
        for t in range(s, s + min(budget, n)):
            covered[t] += 1
    assert min(covered) >= 1  # every context token is seen by some window
    for a, b in itertools.pairwise(starts):
        assert a + budget - b >= overlap  # consecutive windows share at least `overlap` tokens
    if len(starts) > 1:  # one window fewer could not cover n tokens with that overlap
        k = len(starts) - 1
        assert k * budget - (k - 1) * min(overlap, budget - 1) < n


# ---- spans from probabilities -----------------------------------------------------------------------------

def test_token_probs_to_spans_merges_thresholds_and_snaps():
    ans = "The tower is 330 metres tall."
    offsets = [(0, 3), (4, 9), (10, 12), (13, 16), (17, 20), (20, 23), (24, 28), (28, 29)]  # me ##tres split
    probs = [0.1, 0.2, 0.3, 0.9, 0.8, 0.4, 0.2, 0.1]
    spans = token_probs_to_spans(ans, offsets, probs, threshold=0.5)
    assert [(s["start"], s["end"], s["text"]) for s in spans] == [(13, 23, "330 metres")]  # "##tres" snapped
    assert spans[0]["confidence"] == pytest.approx(0.85) and spans[0]["max_prob"] == pytest.approx(0.9)
    assert token_probs_to_spans(ans, offsets, probs, threshold=0.95) == []
    assert [s["text"] for s in token_probs_to_spans(ans, offsets, probs, threshold=0.25)] == ["is 330 metres"]
    # two separate spans; min_span_chars drops the short one
    probs2 = [0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1]
    assert [s["text"] for s in token_probs_to_spans(ans, offsets, probs2)] == ["The", "tall"]
    assert [s["text"] for s in token_probs_to_spans(ans, offsets, probs2, min_span_chars=4)] == ["tall"]
    assert all(ans[s["start"]:s["end"]] == s["text"] for s in spans)
    with pytest.raises(ValueError):
        token_probs_to_spans(ans, offsets, probs[:3])


def test_span_extension_grows_flagged_spans_over_likely_neighbours():
    ans = "The tower is 330 metres tall."
    offsets = [(0, 3), (4, 9), (10, 12), (13, 16), (17, 20), (20, 23), (24, 28), (28, 29)]
    probs = [0.1, 0.35, 0.3, 0.9, 0.2, 0.2, 0.3, 0.05]
    assert [s["text"] for s in token_probs_to_spans(ans, offsets, probs, threshold=0.5)] == ["330"]
    grown = token_probs_to_spans(ans, offsets, probs, threshold=0.5, extend_to=0.25)
    # "tower is" and the last word join the seed; "metres" (0.2) breaks the run, so "tall" stays out
    assert [s["text"] for s in grown] == ["tower is 330"]
    assert grown[0]["confidence"] == pytest.approx(0.9)  # the seed's, not diluted by the grown tokens
    assert grown[0]["max_prob"] == pytest.approx(0.9)
    # no seed, no span: a run of tokens between the two thresholds alone is never flagged
    assert token_probs_to_spans(ans, offsets, [0.3] * 8, threshold=0.5, extend_to=0.25) == []
    # a lower bound at or above the threshold changes nothing
    assert token_probs_to_spans(ans, offsets, probs, threshold=0.5, extend_to=0.5) == \
        token_probs_to_spans(ans, offsets, probs, threshold=0.5)


def test_gold_labels_round_trip_to_gold_spans(hf_tok):
    ans = "Gustave Eiffel built the tower in 1925 for the Olympic Games in Paris."
    y, og = ans.index("1925"), ans.index("Olympic Games")
    gold = [{"start": y, "end": y + 4}, {"start": og, "end": og + len("Olympic Games")}]
    enc = encode_detector_input(hf_tok, "ctx", None, ans, 128, spans=gold)
    probs = np.asarray(enc.labels[enc.answer_slice], dtype=float)
    spans = token_probs_to_spans(ans, enc.answer_offsets, probs)
    assert [(s["start"], s["end"]) for s in spans] == [(g["start"], g["end"]) for g in gold]


# ---- gold span hygiene ------------------------------------------------------------------------------------

def test_check_spans_reports_and_repairs():
    ans = "Paris is in Germany and has 3 million people."
    spans, problems = check_spans(ans, [{"start": 12, "end": 19, "text": "Germany"}])
    assert spans == [{"start": 12, "end": 19, "text": "Germany"}] and problems == []
    spans, problems = check_spans(ans, [{"start": 0, "end": 7, "text": "Germany"}])  # wrong offsets
    assert spans[0]["start"] == 12 and problems == ["span_relocated"]
    spans, problems = check_spans(ans, [{"text": "3 MILLION"}])  # text only, other case
    assert ans[spans[0]["start"]:spans[0]["end"]] == "3 million" and problems == ["span_located_by_text"]
    _, problems = check_spans(ans, [{"start": 40, "end": 90}])
    assert problems == ["span_outside_answer"]
    _, problems = check_spans(ans, [{"start": 0, "end": 5, "text": "London"}])
    assert problems == ["span_text_mismatch"]
    _, problems = check_spans(ans, [{"text": "London"}])
    assert problems == ["span_text_not_found"]
    _, problems = check_spans(ans, [{"label_type": "x"}])
    assert problems == ["span_missing_offsets"]
    spans, problems = check_spans(ans, [{"start": 12, "end": 19}, {"start": 16, "end": 27}, {"start": 0, "end": 5}])
    assert [(s["start"], s["end"]) for s in spans] == [(0, 5), (12, 27)] and problems == ["spans_overlap"]
    assert check_spans(ans, []) == ([], [])


def test_spans_module_does_not_import_torch():
    code = "import sys, inference.spans; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


@pytest.mark.parametrize("n,budget,overlap", [(100, 100, 32), (101, 100, 0), (512, 460, 32), (545, 460, 32),
                                              (2048, 460, 32), (4096, 430, 128), (1000, 10, 9), (921, 460, 0)])
def test_even_window_fill_keeps_the_count_and_the_cover_with_less_context(n, budget, overlap):
    full, even = plan_windows(n, budget, overlap, "full"), plan_windows(n, budget, overlap, "even")
    assert len(even) == len(full) == len(plan_window_starts(n, budget, overlap))
    assert even[0][0] == 0 and even[-1][1] == n
    sizes = {e - s for s, e in even}
    assert len(sizes) == 1 and max(sizes) <= min(budget, n)  # one size for all, never over the budget
    covered = [0] * n
    for s, e in even:
        for t in range(s, e):
            covered[t] += 1
    assert min(covered) >= 1
    for (_, a_end), (b_start, _) in itertools.pairwise(even):
        assert a_end - b_start >= min(overlap, budget - 1)
    assert sum(e - s for s, e in even) <= sum(e - s for s, e in full)
    if len(even) > 1:  # a window shorter by one token could not cover n with that count and overlap
        size, k, o = sizes.pop(), len(even), min(overlap, budget - 1)
        assert k * (size - 1) - (k - 1) * o < n


def test_even_window_fill_halves_two_window_contexts(hf_tok):
    ctx = " ".join(f"fact{i}" for i in range(300))
    ans = "fact1 and fact299 are both there."
    full = context_windows(hf_tok, ctx, "q?", ans, max_length=200, overlap=8)
    even = context_windows(hf_tok, ctx, "q?", ans, max_length=200, overlap=8, fill="even")
    assert len(full) == len(even) >= 2
    assert sum(len(w) for w in even) < sum(len(w) for w in full)
    assert all(w.answer_offsets == full[0].answer_offsets for w in even)
    with pytest.raises(ValueError, match="window fill"):
        context_windows(hf_tok, ctx, "q?", ans, max_length=200, overlap=8, fill="half")
