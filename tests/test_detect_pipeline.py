"""HaluGate pipeline logic with scripted fake runners (tests/detect_helpers.py): actions, fail modes, headers,
windowing, JSON stability, severity and bad input. The real-model path is in test_detect_onnx.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from detect_helpers import FailingRunner, FakeDetector, FakeExplainer, FakeSentinel, fakes

from inference import explain
from inference.config import ConfigError, apply_overrides, from_dict
from inference.detect import HaluGate
from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.messages import InputError
from inference.result import SCHEMA, STAGES, spans_header
from inference.runners import Features
from inference.settings import InferenceSettings
from inference.spans import encode_detector_input
from inference.windowing import InputTooLongError

EIFFEL_CONTEXT = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."
EIFFEL_ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall."
EIFFEL_MESSAGES = [
    {"role": "user", "content": "When was the Eiffel Tower built, and how tall is it?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": EIFFEL_CONTEXT},
    {"role": "assistant", "content": EIFFEL_ANSWER},
]
FILLER = "The committee met on a quiet morning and talked about the weather and the garden. "


def settings(*overrides: str) -> InferenceSettings:
    return from_dict(InferenceSettings, apply_overrides({}, list(overrides)), "<test>")


def plugin_overrides(**config) -> list[str]:
    plugin = {"enabled": True, "use_nli": True, "hallucination_action": "header",
              "unverified_factual_action": "header", "include_hallucination_details": True, **config}
    return [(f"decisions=[{{name: fact_check, priority: 100, rules: {{operator: OR, conditions: "
            f"[{{type: fact_check, name: needs_fact_check}}]}}, plugins: [{{type: hallucination, "
            f"configuration: {json.dumps(plugin)}}}]}}]")]


@pytest.fixture
def make_gate(minilm_dir):
    def make(*overrides: str, **runners) -> HaluGate:
        parts = {**fakes(minilm_dir), **runners}
        return HaluGate(settings(*overrides), **parts)
    return make


# ---- the Eiffel case end to end ------------------------------------------------------------------------------

def test_eiffel_contradictions_spans_severity_and_headers(make_gate):
    r = make_gate().detect(EIFFEL_MESSAGES)
    assert r.status == "ok" and r.reason == ""
    assert r.fact_check_needed is True and r.fact_check_confidence > 0.9
    assert r.hallucination_detected is True
    assert [(s.text, s.start, s.end) for s in r.spans] == [("1950", 30, 34), ("500", 42, 45)]
    assert all(EIFFEL_ANSWER[s.start:s.end] == s.text for s in r.spans)
    assert {s.nli_label for s in r.spans} == {"contradiction"} and r.max_severity == 4
    assert all(s.severity == 4 and s.nli_confidence > 0.9 and "Contradicted" in s.explanation for s in r.spans)
    assert r.headers == {
        "x-vsr-fact-check-needed": "true",
        "x-vsr-hallucination-detected": "true",
        "x-vsr-hallucination-spans": "1950; 500",
        "x-vsr-nli-contradictions": "2",
        "x-vsr-max-severity": "4",
    }
    assert r.action == "header" and r.answer == EIFFEL_ANSWER and not r.blocked
    assert r.detector_windows == 1 and r.context_tokens > 0 and r.detector_context_coverage == 1.0


def test_the_result_names_the_threshold_the_score_was_held_against(make_gate):
    from inference.detector_stage import Calibration

    gate = make_gate()
    r = gate.detect(EIFFEL_MESSAGES)
    assert r.hallucination_threshold == gate.settings.hallucination_mitigation.hallucination_model.threshold
    assert r.to_dict()["hallucination_threshold"] == r.hallucination_threshold
    # a calibration's own threshold, and a task type's where it has one (a question makes the answer QA)
    gate.detector_calibration = Calibration(threshold=0.3, task_thresholds={"QA": 0.42})
    assert gate.detect(EIFFEL_MESSAGES).hallucination_threshold == 0.42
    gate.detector_calibration = Calibration(threshold=0.3, task_thresholds={"Summary": 0.11})
    assert gate.detect(EIFFEL_MESSAGES).hallucination_threshold == 0.3
    skipped = gate.detect(messages=[{"role": "user", "content": "Tell me a joke"},
                                    {"role": "assistant", "content": "No."}])
    assert skipped.status == "skipped" and skipped.hallucination_threshold is None


def test_faithful_answer_is_clean_with_detected_false_header(make_gate):
    r = make_gate().detect(context=EIFFEL_CONTEXT, question="How tall is it?", answer="It is 330 meters tall.")
    assert r.status == "ok" and r.hallucination_detected is False and r.spans == []
    assert r.headers == {"x-vsr-fact-check-needed": "true", "x-vsr-hallucination-detected": "false"}
    assert r.action == "none" and r.answer == "It is 330 meters tall."


# ---- actions -------------------------------------------------------------------------------------------------

def test_action_header(make_gate):
    r = make_gate(*plugin_overrides(hallucination_action="header")).detect(EIFFEL_MESSAGES)
    assert r.action == "header" and r.answer == EIFFEL_ANSWER and r.warning is None
    assert r.headers["x-vsr-hallucination-detected"] == "true"


def test_action_body_appends_a_warning_with_details(make_gate):
    r = make_gate(*plugin_overrides(hallucination_action="body")).detect(EIFFEL_MESSAGES)
    assert r.action == "body" and not r.blocked
    assert r.answer.startswith(EIFFEL_ANSWER + "\n\n---\n") and r.answer.endswith(r.warning)
    assert '"1950" (severity 4, contradiction' in r.warning
    terse = make_gate(*plugin_overrides(hallucination_action="body", include_hallucination_details=False))
    r2 = terse.detect(EIFFEL_MESSAGES)
    assert "1950" not in r2.warning and r2.answer.startswith(EIFFEL_ANSWER)


def test_action_block_really_withholds_the_answer(make_gate):
    r = make_gate(*plugin_overrides(hallucination_action="block", include_hallucination_details=False)).detect(
        EIFFEL_MESSAGES)
    assert r.action == "block" and r.blocked is True and r.answer is None
    assert "withheld" in r.warning and EIFFEL_ANSWER not in r.warning
    assert r.headers["x-vsr-hallucination-detected"] == "true"
    assert r.to_dict()["answer"] is None


def test_action_none_changes_nothing_and_sends_no_headers(make_gate):
    r = make_gate(*plugin_overrides(hallucination_action="none")).detect(EIFFEL_MESSAGES)
    assert r.hallucination_detected is True and r.spans  # still detected and reported in the result
    assert r.action == "none" and r.headers == {} and r.answer == EIFFEL_ANSWER and r.warning is None


@pytest.mark.parametrize("action, headers, suffix", [
    ("header", {"x-vsr-fact-check-needed": "true", "x-vsr-unverified-factual-response": "true",
                "x-vsr-verification-context-missing": "true"}, False),
    ("body", {"x-vsr-fact-check-needed": "true", "x-vsr-unverified-factual-response": "true",
              "x-vsr-verification-context-missing": "true"}, True),
    ("none", {}, False),
])
def test_unverified_factual_actions(make_gate, action, headers, suffix):
    gate = make_gate(*plugin_overrides(unverified_factual_action=action))
    r = gate.detect(messages=[{"role": "user", "content": "How tall is the Eiffel Tower?"},
                              {"role": "assistant", "content": "It is 500 meters tall."}])
    assert r.unverified_factual is True and r.status == "skipped" and r.reason == "no_context"
    assert r.hallucination_detected is None  # not checked: never reported as clean
    assert r.headers == headers
    assert (r.answer != "It is 500 meters tall.") is suffix and not r.blocked
    if suffix:
        assert "could not be verified" in r.answer


def test_unverified_action_block_is_rejected_by_config():
    with pytest.raises(ConfigError, match="unverified_factual_action"):
        settings(*plugin_overrides(unverified_factual_action="block"))


def test_sentinel_skips_non_factual_prompts_without_running_the_detector(make_gate, minilm_dir):
    detector = FakeDetector(minilm_dir)
    r = make_gate(detector=detector).detect(
        context="Some context.", question="Write a short poem about the sea.", answer="Waves of 1950 blue.")
    assert r.fact_check_needed is False and r.fact_check_confidence < 0.1
    assert r.status == "skipped" and r.reason == "no_fact_check_needed"
    assert r.hallucination_detected is None and r.headers == {} and detector.calls == []


def test_decisions_by_priority_and_context_condition(make_gate):
    overrides = [("decisions=[{name: low, priority: 1, rules: {conditions: [{type: always}]}, plugins: "
                 "[{type: hallucination, configuration: {hallucination_action: header}}]}, "
                 "{name: strict, priority: 50, rules: {operator: AND, conditions: [{type: fact_check, name: "
                 "needs_fact_check}, {type: context, name: present}]}, plugins: [{type: hallucination, "
                 "configuration: {hallucination_action: block}}]}]")]
    gate = make_gate(*overrides)
    r = gate.detect(EIFFEL_MESSAGES)
    assert r.decision == "strict" and r.blocked
    r = gate.detect(context=EIFFEL_CONTEXT, question="Write a poem.", answer="Built in 1950.")
    assert r.decision == "low" and r.action == "header" and r.hallucination_detected is True


# ---- fail-open / fail-closed -----------------------------------------------------------------------------------

def test_detector_failure_is_unavailable_never_clean_fail_open(make_gate, minilm_dir):
    broken = FailingRunner(minilm_dir, "token", DETECTOR_LABELS)
    r = make_gate("hallucination_mitigation.fail_mode=open", detector=broken).detect(EIFFEL_MESSAGES)
    assert r.status == "unavailable" and r.reason == "model_unavailable"
    assert r.hallucination_detected is None and r.spans == []
    assert r.errors[0]["stage"] == "detector" and "simulated model failure" in r.errors[0]["message"]
    assert not r.blocked and r.answer == EIFFEL_ANSWER
    assert r.headers["x-vsr-verification-status"] == "unavailable"
    assert "x-vsr-hallucination-detected" not in r.headers


def test_detector_failure_fail_closed_withholds_the_answer(make_gate, minilm_dir):
    broken = FailingRunner(minilm_dir, "token", DETECTOR_LABELS)
    r = make_gate("hallucination_mitigation.fail_mode=closed", detector=broken).detect(EIFFEL_MESSAGES)
    assert r.status == "unavailable" and r.blocked and r.answer is None and "fail_mode: closed" in r.warning


def test_model_that_fails_to_load_is_unavailable(minilm_dir, tmp_path):
    gate = HaluGate(settings(f"hallucination_mitigation.hallucination_model.model_id={tmp_path / 'missing'}",
                             "hallucination_mitigation.fail_mode=closed"),
                    sentinel=FakeSentinel(minilm_dir), explainer=FakeExplainer(minilm_dir))
    assert "detector" in gate.load_errors and "missing" in gate.load_errors["detector"]
    r = gate.detect(EIFFEL_MESSAGES)
    assert r.status == "unavailable" and r.hallucination_detected is None and r.blocked
    assert "not loaded" in r.errors[0]["message"]


def test_explainer_failure_keeps_detector_spans_but_says_unavailable(make_gate, minilm_dir):
    broken = FailingRunner(minilm_dir, "sequence", EXPLAINER_LABELS)
    r = make_gate(explainer=broken).detect(EIFFEL_MESSAGES)
    assert r.status == "unavailable" and r.hallucination_detected is True
    assert [s.text for s in r.spans] == ["1950", "500"] and all(s.nli_label is None for s in r.spans)
    assert r.errors[0]["stage"] == "explainer"


def test_sentinel_failure_verifies_anyway_and_says_unavailable(make_gate, minilm_dir):
    broken = FailingRunner(minilm_dir, "sequence", SENTINEL_LABELS)
    r = make_gate(sentinel=broken).detect(EIFFEL_MESSAGES)
    assert r.fact_check_needed is None and r.status == "unavailable"
    assert r.hallucination_detected is True and r.max_severity == 4  # the conservative side: still verified
    assert "x-vsr-fact-check-needed" not in r.headers


def test_wrong_label_map_is_a_load_error(minilm_dir):
    wrong = FakeExplainer(minilm_dir)
    wrong.labels = ["yes", "no", "maybe"]
    gate = HaluGate(settings(), sentinel=FakeSentinel(minilm_dir), detector=FakeDetector(minilm_dir),
                    explainer=wrong)
    assert "label 'entailment' not in its label map" in gate.load_errors["explainer"]


# ---- long contexts -------------------------------------------------------------------------------------------

def _long_context(filler_tokens_over: int, minilm_dir) -> str:
    from inference.runners import load_tokenizer_info

    tok = load_tokenizer_info(minilm_dir).tokenizer
    text = ""
    while len(tok.encode(text, add_special_tokens=False).ids) < filler_tokens_over:
        text += FILLER
    return text + "The tower was built in 1887."


def test_hallucination_after_token_512_is_found_by_windowing(make_gate, minilm_dir):
    context = _long_context(700, minilm_dir)
    question, answer = "When was the tower built?", "The tower was built in 1950."
    r = make_gate().detect(context=context, question=question, answer=answer)
    assert r.context_tokens > 700 and r.detector_windows >= 2
    assert [s.text for s in r.spans] == ["1950"] and r.spans[0].nli_label == "contradiction"

    # What the reference router did: keep the first 512 tokens and read the answer as clean.
    det = FakeDetector(minilm_dir)
    truncated = encode_detector_input(det.tokenizer, context, question, answer, max_length=512, task_type="QA")
    assert truncated.context_truncated
    probs = det.probabilities([Features(truncated.input_ids, truncated.token_type_ids)])[0][truncated.answer_slice, 1]
    assert probs.max() < 0.5


def test_short_and_windowed_runs_agree_on_short_inputs(make_gate):
    whole = make_gate().detect(EIFFEL_MESSAGES)
    windowed = make_gate("hallucination_mitigation.hallucination_model.max_length=56",
                         "hallucination_mitigation.hallucination_model.window_overlap=4",
                         "hallucination_mitigation.hallucination_model.max_windows=0",  # every window: the plan
                         ).detect(EIFFEL_MESSAGES)
    assert whole.detector_windows == 1 and windowed.detector_windows > 1
    assert [s.to_dict() for s in windowed.spans] == [s.to_dict() for s in whole.spans]


def test_context_over_the_hard_limit_is_refused(make_gate, minilm_dir):
    gate = make_gate("hallucination_mitigation.hallucination_model.max_context_tokens=300")
    with pytest.raises(InputTooLongError, match=r"over the hard limit of 300 .*max_context_tokens"):
        gate.detect(context=_long_context(400, minilm_dir), question="When?", answer="In 1950.")


def test_answer_too_long_for_a_window_is_refused_not_truncated(make_gate):
    gate = make_gate("hallucination_mitigation.hallucination_model.max_length=32")
    with pytest.raises(InputTooLongError, match="answer is never truncated"):
        gate.detect(context="c", question="q?", answer="word " * 40)


def test_window_aggregation_max_vs_min():
    from inference.detector_stage import aggregate as aggregate_windows

    a, b = np.array([0.9, 0.1]), np.array([0.2, 0.3])
    assert aggregate_windows([a, b], "max").tolist() == [0.9, 0.3]
    assert aggregate_windows([a, b], "min").tolist() == [0.2, 0.1]


# ---- severity and NLI ----------------------------------------------------------------------------------------

def test_low_nli_confidence_lowers_severity(make_gate, minilm_dir):
    # margin 1.0: contradiction 0.58, over the verdict rule's 0.5 (a label must be more likely than not) and under 0.7
    r = make_gate(explainer=FakeExplainer(minilm_dir, margin=1.0)).detect(EIFFEL_MESSAGES)
    assert all(s.nli_label == "contradiction" and s.nli_confidence < 0.7 and s.severity == 3 for s in r.spans)


def test_confidently_entailed_spans_are_dropped(make_gate):
    gate = make_gate("hallucination_mitigation.hallucination_model.threshold=0.0",
                     "hallucination_mitigation.hallucination_model.min_span_confidence=0.0")
    r = gate.detect(context="The tower stands in Paris.", question="Where?", answer="The tower stands in Paris.")
    assert r.status == "ok" and r.spans == [] and r.hallucination_detected is False
    keep = make_gate("hallucination_mitigation.hallucination_model.threshold=0.0",
                     "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
                     "hallucination_mitigation.hallucination_model.enable_nli_filtering=false")
    r = keep.detect(context="The tower stands in Paris.", question="Where?", answer="The tower stands in Paris.")
    assert r.spans and {s.nli_label for s in r.spans} == {"entailment"} and r.max_severity == 1


def test_use_nli_off_reports_detector_spans_unexplained(make_gate):
    r = make_gate(*plugin_overrides(use_nli=False)).detect(EIFFEL_MESSAGES)
    assert [s.text for s in r.spans] == ["1950", "500"]
    assert all(s.nli_label is None and s.severity == 2 and "use_nli is off" in s.explanation for s in r.spans)


def test_severity_rules():
    kw = {"entailment_threshold": 0.75, "low_confidence": 0.7}
    assert explain.severity("contradiction", 0.9, **kw) == 4
    assert explain.severity("contradiction", 0.6, **kw) == 3
    assert explain.severity("neutral", 0.9, **kw) == 2
    assert explain.severity("neutral", 0.5, **kw) == 1
    assert explain.severity("entailment", 0.8, **kw) is None
    assert explain.severity("entailment", 0.72, **kw) == 1
    assert explain.severity("entailment", 0.5, **kw) == 1
    assert explain.severity(None, None, **kw) == 2


def test_hypothesis_widening():
    text = "Paris is nice. The tower was built in 1950, but it is 500 meters tall; locals love it! Bye"
    s = text.index("1950")
    a, b = explain.widen(text, s, s + 4, "sentence")
    assert text[a:b] == "The tower was built in 1950, but it is 500 meters tall; locals love it!"
    a, b = explain.widen(text, s, s + 4, "clause")
    assert text[a:b] == "The tower was built in 1950"
    s2 = text.index("500")
    a, b = explain.widen(text, s2, s2 + 3, "clause")
    assert text[a:b] == "but it is 500 meters tall"
    assert explain.widen(text, s, s + 4, "span") == (s, s + 4)
    assert text[slice(*explain.widen(text, len(text) - 3, len(text), "sentence"))] == "Bye"


def test_combine_nli_over_premise_windows():
    labels = EXPLAINER_LABELS
    assert explain.combine_nli([np.array([0.1, 0.8, 0.1]), np.array([0.7, 0.2, 0.1])], labels) == ("entailment", 0.7)
    assert explain.combine_nli([np.array([0.1, 0.8, 0.1]), np.array([0.1, 0.1, 0.8])], labels)[0] == "contradiction"
    label, conf = explain.combine_nli([np.array([0.1, 0.8, 0.1]), np.array([0.2, 0.6, 0.2])], labels)
    assert label == "neutral" and conf == pytest.approx(0.6)


# ---- JSON and headers ----------------------------------------------------------------------------------------

EXPECTED_KEYS = ["schema", "status", "reason", "fact_check_needed", "fact_check_confidence",
                 "hallucination_detected", "hallucination_score", "hallucination_threshold", "unverified_factual", "max_severity", "spans", "action", "blocked",
                 "answer", "warning", "headers", "decision", "errors", "context_tokens", "detector_windows",
                 "detector_context_coverage", "timings_ms", "context_truncated_for_nli"]
SPAN_KEYS = ["start", "end", "text", "confidence", "nli_label", "nli_confidence", "severity", "explanation",
             "evidence", "premise_coverage", "ungrounded"]


def test_json_is_stable_in_keys_order_and_types(make_gate):
    gate = make_gate()
    results = [gate.detect(EIFFEL_MESSAGES),
               gate.detect(messages=[{"role": "user", "content": "Tell me a joke"},
                                     {"role": "assistant", "content": "No."}])]
    for r in results:
        d = json.loads(r.to_json())
        assert list(d) == EXPECTED_KEYS and d["schema"] == SCHEMA
        assert list(d["timings_ms"]) == list(STAGES) and all(isinstance(v, float) for v in d["timings_ms"].values())
        assert isinstance(d["max_severity"], int) and isinstance(d["blocked"], bool)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in d["headers"].items())
        for span in d["spans"]:
            assert list(span) == SPAN_KEYS
            assert isinstance(span["start"], int) and isinstance(span["confidence"], float)
            assert isinstance(span["severity"], int)
    d1, d2 = results[0].to_dict(), gate.detect(EIFFEL_MESSAGES).to_dict()
    d1.pop("timings_ms"), d2.pop("timings_ms")
    assert json.dumps(d1) == json.dumps(d2)  # same input, byte-identical JSON apart from timings


def test_spans_header_joins_and_escapes():
    from inference.result import Span

    spans = [Span(0, 4, "1950", 0.9), Span(5, 20, "a;b\nc é", 0.9)]
    assert spans_header(spans) == "1950; a%3Bb c %C3%A9"
    assert len(spans_header([Span(0, 1, "x" * 5000, 0.9)])) == 1024


# ---- bad input -----------------------------------------------------------------------------------------------

def test_empty_answer_is_a_documented_skip_not_a_crash(make_gate):
    r = make_gate().detect(context=EIFFEL_CONTEXT, question="When?", answer="   ")
    assert r.status == "skipped" and r.reason == "empty_answer" and r.spans == []
    assert r.answer == "   " and not r.blocked


def test_empty_context_is_unverified_not_clean(make_gate):
    for context in ("", [], ["  ", ""]):
        r = make_gate().detect(context=context, question="How tall is the tower?", answer="It is 500 m.")
        assert r.unverified_factual is True and r.hallucination_detected is None and r.reason == "no_context"


def test_non_string_content_and_missing_fields_are_clear_errors(make_gate):
    gate = make_gate()
    with pytest.raises(InputError, match=r"messages\[1\]\.content: expected a string or a list"):
        gate.detect(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": 12}])
    with pytest.raises(InputError, match="answer: expected a string, got int"):
        gate.detect(context="c", answer=5)
    with pytest.raises(InputError, match="answer: required"):
        gate.detect(context="c")
    with pytest.raises(InputError, match="either messages or answer"):
        gate.detect(EIFFEL_MESSAGES, answer="x")


def test_bad_item_in_a_batch_fails_before_any_model_runs(make_gate, minilm_dir):
    detector = FakeDetector(minilm_dir)
    gate = make_gate(detector=detector)
    with pytest.raises(InputError, match=r"inputs\[1\]\.context\[0\]: expected a string"):
        gate.detect_batch([{"messages": EIFFEL_MESSAGES}, {"context": [None], "answer": "a"}])
    assert detector.calls == []
    with pytest.raises(InputError, match="expected a list of inputs"):
        gate.detect_batch({"answer": "a"})


# ---- batching -----------------------------------------------------------------------------------------------

def test_detect_batch_is_batched_and_equals_single_calls(make_gate, minilm_dir):
    detector = FakeDetector(minilm_dir, batch_size=4)
    gate = make_gate(detector=detector)
    inputs = [{"messages": EIFFEL_MESSAGES},
              {"context": EIFFEL_CONTEXT, "question": "How tall?", "answer": "It is 330 meters tall."},
              {"context": EIFFEL_CONTEXT + " " + FILLER * 3, "question": "Where?", "answer": "Built in 1887 in Rome."},
              {"context": "Short.", "question": "And?", "answer": "Nothing in 12."},
              {"context": EIFFEL_CONTEXT, "question": "Write a poem.", "answer": "no"}]
    batch = gate.detect_batch(inputs)
    assert len(detector.calls) == 1 and detector.calls[0][0] == 4  # 4 checked inputs, one padded call
    singles = [gate.detect(**({"messages": x["messages"]} if "messages" in x else x)) for x in inputs]
    for b, s in zip(batch, singles):
        bd, sd = b.to_dict(), s.to_dict()
        bd.pop("timings_ms"), sd.pop("timings_ms")
        assert bd == sd


def test_runner_length_bucketing(minilm_dir):
    det = FakeDetector(minilm_dir, batch_size=2)
    lengths = [5, 50, 7, 48, 6]
    assert det.batches(lengths) == [[1, 3], [2, 4], [0]]  # longest first, padded per batch
    det.max_batch_tokens = 60
    assert det.batches(lengths) == [[1], [3], [2, 4], [0]]  # 2 x 50 padded tokens > 60
    feats = [Features([101] + [1000] * (n - 2) + [102], [0] * n) for n in lengths]
    out = det.logits(feats)
    assert [o.shape[0] for o in out] == lengths
    with pytest.raises(ValueError, match="exceed the model's 512 positions"):
        det.logits([Features([1] * 600, [0] * 600)])


def test_disabled_mitigation_skips_everything(make_gate, minilm_dir):
    detector = FakeDetector(minilm_dir)
    r = make_gate("hallucination_mitigation.enabled=false", detector=detector).detect(EIFFEL_MESSAGES)
    assert (r.status, r.reason, r.hallucination_detected, r.headers) == ("skipped", "disabled", None, {})
    assert r.answer == EIFFEL_ANSWER and detector.calls == []
