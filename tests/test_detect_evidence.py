"""Evidence for every explained span: the context sentence or window the Explainer judged it against (text,
offsets, all three NLI probabilities), chosen by the Explainer's own scores, within the pair budget; and
`context_truncated_for_nli` / `premise_coverage` when the context is longer than what was read. Deterministic:
scripted fake runners (tests/detect_helpers.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from detect_helpers import FakeDetector, FakeExplainer, fakes

from inference import explain
from inference.config import apply_overrides, from_dict
from inference.detect import HaluGate
from inference.labels import EXPLAINER_LABELS
from inference.settings import InferenceSettings

EIFFEL_CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
EIFFEL_QUESTION = "When was the Eiffel Tower built, and how tall is it?"
EIFFEL_ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall."
FILLER = "The committee met on a quiet morning and talked about the weather and the garden. "


def gate(minilm_dir, *overrides: str, **runners) -> HaluGate:
    settings = from_dict(InferenceSettings, apply_overrides({}, list(overrides)), "<test>")
    return HaluGate(settings, **{**fakes(minilm_dir), **runners})


def test_eiffel_1950_is_explained_against_the_sentence_with_1887_1889(minilm_dir):
    r = gate(minilm_dir).detect(context=EIFFEL_CONTEXT, question=EIFFEL_QUESTION, answer=EIFFEL_ANSWER)
    d = json.loads(r.to_json())
    spans = {s["text"]: s for s in d["spans"]}
    assert set(spans) == {"1950", "500"}
    ev = spans["1950"]["evidence"]
    assert ev["text"] == "The Eiffel Tower was built 1887-1889." and ev["kind"] == "sentence"
    assert EIFFEL_CONTEXT[ev["start"]:ev["end"]] == ev["text"] and (ev["start"], ev["end"]) == (0, 37)
    probs = ev["probabilities"]
    assert list(probs) == list(EXPLAINER_LABELS) and sum(probs.values()) == pytest.approx(1.0, abs=1e-3)
    assert max(probs, key=probs.get) == "contradiction" == spans["1950"]["nli_label"]
    assert probs["contradiction"] == pytest.approx(spans["1950"]["nli_confidence"], abs=1e-4)
    assert 'contradicted by context [0:37]: "The Eiffel Tower was built 1887-1889."' in spans["1950"]["explanation"]
    # The other span of the same sentence is explained by the sentence about its own words (height).
    assert spans["500"]["evidence"]["text"] == "It is 330 meters tall and stands in Paris."
    # A short context is read whole.
    assert spans["1950"]["premise_coverage"] == 1.0 and d["context_truncated_for_nli"] is False


def test_the_explainers_scores_choose_the_premise_not_only_word_overlap(minilm_dir):
    # The sentence sharing the most words with the claim says nothing about the date; the one that contradicts
    # it shares fewer words. The Explainer's verdict picks the contradicting one.
    context = ("The Eiffel Tower in Paris was built for a fair and the tower was built of iron. "
               "Construction of the tower ran 1887-1889.")
    r = gate(minilm_dir).detect(context=context, question="When was it built?",
                                answer="The Eiffel Tower in Paris was built of iron in 1950.")
    span = next(s for s in r.spans if s.text == "1950")
    assert span.nli_label == "contradiction"
    assert span.evidence.text == "Construction of the tower ran 1887-1889." and span.evidence.kind == "sentence"
    assert context[span.evidence.start:span.evidence.end] == span.evidence.text


def _long_context(minilm_dir, tokens: int) -> str:
    from inference.runners import load_tokenizer_info

    tok = load_tokenizer_info(minilm_dir).tokenizer
    text = ""
    while len(tok.encode(text, add_special_tokens=False).ids) < tokens:
        text += FILLER
    return text + "The tower was built in 1887. " + FILLER * 3


def test_long_context_reports_what_was_read(minilm_dir):
    context = _long_context(minilm_dir, 1500)
    r = gate(minilm_dir, "hallucination_mitigation.nli_model.max_premise_windows=1").detect(
        context=context, question="When was the tower built?", answer="The tower was built in 1950.")
    span = next(s for s in r.spans if s.text == "1950")
    assert span.nli_label == "contradiction"
    assert span.evidence.text == "The tower was built in 1887." and span.evidence.kind == "sentence"
    assert context[span.evidence.start:span.evidence.end] == span.evidence.text
    assert 0.0 < span.premise_coverage < 0.6 and r.context_truncated_for_nli is True
    d = r.to_dict()
    assert d["context_truncated_for_nli"] is True and d["spans"][0]["premise_coverage"] < 0.6


def test_pair_budget_drops_sentences_first_then_windows(minilm_dir):
    context = _long_context(minilm_dir, 1500)
    explainer = FakeExplainer(minilm_dir)
    g = gate(minilm_dir, "hallucination_mitigation.nli_model.max_nli_pairs=1", explainer=explainer)
    r = g.detect(context=context, question="When was the tower built?", answer="The tower was built in 1950.")
    assert sum(rows for rows, _ in explainer.calls) == 1  # one pair: the best window only
    span = r.spans[0]
    assert span.evidence.kind == "window" and "1887" in span.evidence.text and span.nli_label == "contradiction"
    assert context[span.evidence.start:span.evidence.end] == span.evidence.text


def test_no_evidence_without_nli(minilm_dir):
    plugin = {"enabled": True, "use_nli": False, "hallucination_action": "header",
              "unverified_factual_action": "header", "include_hallucination_details": True}
    override = (f"decisions=[{{name: fact_check, priority: 100, rules: {{operator: OR, conditions: "
                f"[{{type: fact_check, name: needs_fact_check}}]}}, plugins: [{{type: hallucination, "
                f"configuration: {json.dumps(plugin)}}}]}}]")
    r = gate(minilm_dir, override).detect(context=EIFFEL_CONTEXT, question=EIFFEL_QUESTION, answer=EIFFEL_ANSWER)
    d = r.to_dict()
    assert d["spans"] and all(s["evidence"] is None and s["premise_coverage"] is None for s in d["spans"])
    assert d["context_truncated_for_nli"] is None


# ---- the pieces ------------------------------------------------------------------------------------------------

def test_decide_nli_returns_the_decisive_candidates():
    p = [np.array([0.1, 0.1, 0.8]), np.array([0.1, 0.8, 0.1]), np.array([0.05, 0.12, 0.83])]
    assert explain.decide_nli(p, EXPLAINER_LABELS) == ("contradiction", pytest.approx(0.83), [0, 2])
    assert explain.combine_nli(p, EXPLAINER_LABELS) == ("contradiction", pytest.approx(0.83))
    label, conf, idx = explain.decide_nli([np.array([0.2, 0.7, 0.1]), np.array([0.3, 0.5, 0.2])], EXPLAINER_LABELS)
    assert (label, idx) == ("neutral", [1]) and conf == pytest.approx(0.5)


def test_a_label_decides_only_when_more_likely_than_not():
    # A long passage about something else, read by a small NLI model: entailment is its argmax at 0.42. It must
    # not make the claim "supported" (the argmax rule did), nor a 0.41 contradiction make it contradicted.
    unreadable = np.array([0.42, 0.20, 0.38])
    assert explain.decide_nli([unreadable, np.array([0.03, 0.48, 0.49])], EXPLAINER_LABELS)[0] == "neutral"
    assert explain.decide_nli([unreadable, np.array([0.02, 0.40, 0.58])], EXPLAINER_LABELS) == (
        "contradiction", pytest.approx(0.58), [1])
    assert explain.decide_nli([np.array([0.5, 0.1, 0.4]), np.array([0.1, 0.1, 0.8])], EXPLAINER_LABELS)[0] == \
        "entailment"  # entailment first, as before; 0.5 decides
    assert explain.decide_nli([np.array([0.49, 0.02, 0.49])], EXPLAINER_LABELS)[0] == "neutral"


def test_premise_windows_are_premise_window_tokens_long(minilm_dir):
    from types import SimpleNamespace

    from tokenizers import Tokenizer

    from inference.settings import ExplainerSettings
    from inference.spans import tokenize_segment
    from inference.stages.explainer import premise_set, window_budget

    assert window_budget(230, 96) == 96 and window_budget(60, 96) == 60 and window_budget(230, 0) == 230
    runner = SimpleNamespace(tokenizer=Tokenizer.from_file(f"{minilm_dir}/tokenizer.json"), trained_length=256,
                             max_length=512)
    context = " ".join(f"Sentence number {i} says that the bridge in town {i} opened in {1800 + i}." for i in range(60))
    tok = runner.tokenizer

    def longest(window_tokens):
        nm = ExplainerSettings(model_id=str(minilm_dir), max_premise_windows=50, premise_window_tokens=window_tokens)
        ws = premise_set(runner, nm, context, "", "The bridge in town 7 opened in 1807.").windows
        return len(ws), max(len(tokenize_segment(tok, w.text)[0]) for w in ws)

    n_short, short = longest(96)
    n_full, full = longest(0)
    assert short <= 96 < full and n_short > n_full


def test_sentences_budget_and_coverage():
    text = "First one. Second one!\nThird one? "
    assert [text[a:b] for a, b in explain.context_sentences(text)] == ["First one.", "Second one!", "Third one?"]
    w = explain.Premise("abc", 0, 3, "window")
    sets = [explain.PremiseSet([w, w], [w, w]), explain.PremiseSet([w], [w])]
    assert explain.fit_budget(sets, 2, 2, 10) == (2, 2, True)
    assert explain.fit_budget(sets, 2, 2, 4) == (2, 0, True)
    assert explain.fit_budget(sets, 2, 2, 2) == (1, 0, False)
    # counterpart sentences are the last sentences dropped, before any window
    c = explain.Premise("c", 0, 1, "sentence", -1, ("1950",))
    sets = [explain.PremiseSet([w, w], [w, w], [c])]
    assert explain.fit_budget(sets, 2, 2, 5) == (2, 2, True)
    assert explain.fit_budget(sets, 2, 2, 3) == (2, 0, True)
    assert explain.fit_budget(sets, 2, 2, 2) == (2, 0, False)
    assert explain.coverage("ab cd", [explain.Premise("ab", 0, 2, "window")]) == 0.5


class FlagWords(FakeDetector):
    """Flags the answer tokens in `words`, whatever the context says (a Detector's false positive included)."""

    def __init__(self, tokenizer_dir, words):
        super().__init__(tokenizer_dir)
        self.words = set(words)

    def row(self, ids, mask, types):
        out = np.tile(np.array([4.0, -4.0], dtype=np.float32), (len(ids), 1))
        for pos in range(int(mask.sum())):
            if types[pos] == 1 and self._token(ids[pos]) in self.words:
                out[pos] = [-4.0, 4.0]
        return out


def test_a_span_a_sentence_entails_skips_its_windows_and_the_result_is_the_one_pass_result(minilm_dir, monkeypatch):
    from inference.stages.explainer import ExplainerStage

    context = _long_context(minilm_dir, 700) + "The tower stands in Paris and it is 330 meters tall."
    args = {"context": context, "question": "Where is the tower and when was it built?",
            "answer": "The tower stands in Paris. The tower was built in 1950."}

    def run(one_pass: bool):
        explainer = FakeExplainer(minilm_dir)
        g = gate(minilm_dir, explainer=explainer, detector=FlagWords(minilm_dir, {"paris", "1950"}))
        if one_pass:  # the reference: every candidate of every hypothesis read in one call
            monkeypatch.setattr(ExplainerStage, "score", staticmethod(
                lambda runner, pairs, jobs, hm, guarded=(): (runner.classify(pairs), set())))
        d = g.detect(**args).to_dict()
        monkeypatch.undo()
        d.pop("timings_ms")
        return d, sum(rows for rows, _ in explainer.calls)

    two, pairs_two = run(one_pass=False)
    one, pairs_one = run(one_pass=True)
    assert two == one
    assert [s["text"] for s in two["spans"]] == ["1950"]  # "Paris" is entailed by a sentence: dropped
    assert two["spans"][0]["nli_label"] == "contradiction"
    assert pairs_two < pairs_one  # the entailed hypothesis's windows were not read


class CredulousExplainer(FakeExplainer):
    """Calls every pair entailed: a small NLI model that misses number swaps. It is surest (0.995 against 0.91)
    on premises that mention Paris, whatever the hypothesis says."""

    def row(self, ids, mask, types):
        premise, _ = self._segments(ids, mask, types)
        logits = np.zeros(3, dtype=np.float32)
        logits[EXPLAINER_LABELS.index("entailment")] = 6.0 if "paris" in {self._token(t) for t in premise} else 3.0
        return logits


@pytest.mark.parametrize("keep", [True, False])
def test_an_ungrounded_span_is_never_dropped_as_entailed(minilm_dir, keep):
    g = gate(minilm_dir, f"hallucination_mitigation.hallucination_model.keep_ungrounded={str(keep).lower()}",
             explainer=CredulousExplainer(minilm_dir), detector=FlagWords(minilm_dir, {"1950", "500", "paris"}))
    answer = "The Eiffel Tower was built in 1950 and is 500 meters tall. It stands in Paris."
    r = g.detect(context=EIFFEL_CONTEXT, question=EIFFEL_QUESTION, answer=answer)
    if not keep:  # the NLI verdict alone decides: all three dropped as entailed
        assert r.spans == [] and r.hallucination_detected is False
        return
    spans = {s.text: s for s in r.spans}
    assert set(spans) == {"1950", "500"}  # "Paris" is in the context: the entailment verdict drops it
    assert spans["1950"].ungrounded == ["1950"] and spans["500"].ungrounded == ["500 meters"]
    for s in spans.values():
        assert s.nli_label == "entailment" and s.nli_confidence > 0.75  # the model's verdict, reported as it is
        assert s.severity == explain.SEVERITY["neutral"]
        assert s.explanation.startswith('Not in the context: "') and "overrules the Explainer's entailment" in s.explanation
    assert r.to_dict()["spans"][1]["ungrounded"] == ["500 meters"] and r.hallucination_detected is True
    # The evidence shown is the passage nearest each span's words (no passage supports an overruled span).
    assert spans["1950"].evidence.text == "The Eiffel Tower was built 1887-1889."
    assert spans["500"].evidence.text == "It is 330 meters tall and stands in Paris."


def test_ungrounded_terms_of_a_span():
    from inference.grounding import terms_within, unsupported_spans

    answer = "Built in 1,887 and 1950, it is 330 m tall, says Gustave Eiffel."
    terms = unsupported_spans(answer, "The tower was built 1887-1889 by Gustave Eiffel. It is 330 meters tall.")
    assert [t["text"] for t in terms] == ["1950"]  # 1,887 = 1887; 330 m = 330 meters; the names are there
    start = answer.index("1950")
    assert terms_within(terms, start - 4, start + 1) == ["1950"] and terms_within(terms, 0, start) == []


def test_without_filtering_every_candidate_is_read(minilm_dir):
    explainer = FakeExplainer(minilm_dir)
    g = gate(minilm_dir, "hallucination_mitigation.hallucination_model.enable_nli_filtering=false",
             explainer=explainer, detector=FlagWords(minilm_dir, {"paris"}))
    r = g.detect(context="The tower stands in Paris.", question="Where is it?", answer="The tower stands in Paris.")
    assert [s.nli_label for s in r.spans] == ["entailment"] and r.spans[0].severity == 1
    assert len(explainer.calls) == 1


def test_premise_windows_fit_the_length_the_explainer_was_trained_at(minilm_dir, tmp_path):
    from inference.runners import trained_length
    from inference.settings import ExplainerSettings
    from inference.stages.explainer import pair_tokens, premise_set

    (tmp_path / "config.yaml").write_text("run: {seed: 1}\nmodel: {base_model: offline:minilm, max_length: 128}\n")
    assert trained_length(tmp_path) == 128 and trained_length(tmp_path / "nowhere") is None
    runner = FakeExplainer(minilm_dir)
    assert runner.trained_length is None and pair_tokens(runner, ExplainerSettings().max_pair_tokens) == 512
    runner.trained_length = 128
    assert pair_tokens(runner, ExplainerSettings().max_pair_tokens) == 128
    assert pair_tokens(runner, 200) == 200  # the setting wins
    assert pair_tokens(runner, 4096) == 512  # never past the positions
    context = _long_context(minilm_dir, 1500)
    hyp, question = "The tower was built in 1950.", "When was the tower built?"
    for limit in (128, 256):
        runner.trained_length = limit
        filling = ExplainerSettings(premise_window_tokens=0, max_premise_windows=4)  # windows filling the pair
        windows = premise_set(runner, filling, context, question, hyp).windows
        longest = max(len(runner.tokenizer.encode(w.text + "\n" + question, hyp).ids) for w in windows)
        assert limit - 16 < longest <= limit  # the windows fill the trained length, and never pass it
    with pytest.raises(ValueError, match="max_pair_tokens"):
        ExplainerSettings(max_pair_tokens=-1).validate()


# ---- counterparts: what the context says instead of an ungrounded number --------------------------------------

TOOL_RESULT = ("The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was built from 1887 to 1889 as "
               "the entrance arch to the 1889 World's Fair. The tower is 330 meters tall.")


def test_counterpart_sentences_state_the_same_kind_of_quantity():
    hyp = "The Eiffel Tower was built in 1950 and is about 500 meters tall."
    found = explain.counterpart_sentences(TOOL_RESULT, hyp, ["1950", "500 meters"])
    by_term = {t: p.text for p in found for t in p.counterpart_of}
    assert by_term == {"1950": "It was built from 1887 to 1889 as the entrance arch to the 1889 World's Fair.",
                       "500 meters": "The tower is 330 meters tall."}  # a year for a year, meters for meters
    assert all(TOOL_RESULT[p.start:p.end] == p.text and p.kind == "sentence" for p in found)
    assert explain.counterpart_sentences(TOOL_RESULT, hyp, ["330 m"])[0].text == "The tower is 330 meters tall."
    assert explain.counterpart_sentences(TOOL_RESULT, "Built by Bob Smith.", ["Bob Smith"]) == []  # names: none
    assert explain.counterpart_sentences(TOOL_RESULT, hyp, ["12 kg"]) == []  # no weight in the context


def test_a_wrong_year_is_shown_beside_the_contexts_year_even_when_overlap_ranks_that_sentence_last(minilm_dir):
    # The year's sentence shares one word ("built") with the claim, fewer than the other two sentences, so the
    # two sentences ranked by overlap leave it out; as the counterpart of "1950" it is read and is the evidence.
    answer = "The Eiffel Tower was built in 1950 and is about 500 meters tall."
    r = gate(minilm_dir).detect(context=TOOL_RESULT, question="When was it built, how tall is it?", answer=answer)
    spans = {s.text: s for s in r.spans}
    assert spans["1950"].ungrounded == ["1950"]
    assert "1887 to 1889" in spans["1950"].evidence.text and spans["1950"].evidence.kind == "sentence"
    assert spans["500"].evidence.text == "The tower is 330 meters tall."
    assert TOOL_RESULT[spans["1950"].evidence.start:spans["1950"].evidence.end] == spans["1950"].evidence.text
