"""Generated inputs (hypothesis) against the library: input parsing, HaluGate.detect / detect_batch, spans,
evidence, headers and determinism, on any Unicode (combining marks, emoji ZWJ sequences, RTL, zero-width and
control characters, NUL, lone surrogates as JSON delivers them), empty / whitespace / huge fields, wrong types
and OpenAI message shapes (string content, content parts, null content with tool_calls, unknown roles).

The properties:
- every input gives a Result or raises the documented error (InputError / InputTooLongError) whose message
  starts with the input's path (`inputs[0]...`); nothing else escapes;
- an answer that cannot be scored (blank: only whitespace, control, format or combining characters) is never
  "no hallucination": `skipped` / `empty_answer`, hallucination_detected null, no x-vsr-hallucination-detected
  header; an answer over the limits raises InputTooLongError; hallucination_detected is false only for a
  checked, visible answer;
- every span: 0 <= start < end <= len(answer) and answer[start:end] == text (Python string indices); every
  evidence: context[start:end] == text in the context the stack checked;
- header values are visible ASCII, at most 1024 characters (no CR / LF / NUL / non-Latin-1 can reach a header);
- the same input gives the same result alone and inside a batch of other inputs.

Most properties run on the scripted fake runners (tests/detect_helpers.py: the real MiniLM tokenizer and the
real pipeline, deterministic verdicts); `test_real_onnx_stack_*` runs tiny random BERTs exported to ONNX by
training.export on ONNX Runtime. Examples per property: HALUGATE_PROPERTY_EXAMPLES (default 1000); the
`slow` long run (HALUGATE_LONG_RUNS=1) 10,000. Each test prints how many inputs it tried and what came of
them (run with -s).
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from detect_helpers import fakes

from inference.config import apply_overrides, from_dict
from inference.detect import HaluGate
from inference.messages import KNOWN_ROLES, InputError, blank, parse_input
from inference.result import HEADER_DETECTED, MAX_SPANS_HEADER_CHARS, Result
from inference.settings import InferenceSettings
from inference.windowing import InputTooLongError, join_documents

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("HALUGATE_PROPERTY_EXAMPLES", "1000"))
CI = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
SLOW = settings(CI, max_examples=10_000)

# ---- strategies ------------------------------------------------------------------------------------------------

SNIPPETS = [
    "The tower is 330 meters tall.", "It was built in 1950", " 500 ", "1889", "Paris", "?", ";", "%", "%41",
    "e\u0301", "\u0301\u0302", "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\U0001F44D\U0001F3FD",
    "\u202e", "\u200f\u05e9\u05dc\u05d5\u05dd 42", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0663",
    "\u200b", "\u200c\u200d", "\ufeff", "\u00ad", "\x00", "\x07\x1b[31m", "\r\nSet-Cookie: x=1", "\n\n", "\t",
    "\u2028", "\u3000", "\u00a0", "\ud800", "\udfff", "\ud83d", "\U0010FFFF", "\ufffd", "\u4e2d\u6587 12",
    "\u0130stanbul", "\u1e9e", "\ufb01", "\u2460", "\u00bd", "1e9", "-3.5", "\\", '"', "<script>",
]
# any code point, lone surrogates included (JSON can carry "\ud800"; json.loads gives a str with it)
ANY_CHAR = st.characters(codec=None, exclude_categories=())
TEXT = st.lists(st.one_of(st.sampled_from(SNIPPETS), st.text(ANY_CHAR, max_size=8)), max_size=12).map("".join)
# the same without lone surrogates: text that parses
VALID = st.lists(st.one_of(st.sampled_from([s for s in SNIPPETS if not any(0xD800 <= ord(c) <= 0xDFFF for c in s)]),
                           st.text(st.characters(codec="utf-8"), max_size=8)), max_size=12).map("".join)
BLANK = st.lists(st.sampled_from(["", " ", "\t", "\n", "\r\n", "\u200b", "\u200c", "\u200d", "\ufeff", "\x00",
                                  "\x07", "\u00a0", "\u3000", "\u2028", "\u0301", "\u202e", "\u00ad"]),
                 max_size=10).map("".join)
HUGE = st.builds(lambda piece, n: piece * n, st.sampled_from(["word ", "500 m ", "\u4e2d", "e\u0301 ", "\x00"]),
                 st.integers(3_000, 60_000))
FIELD_TEXT = st.sampled_from([VALID] * 5 + [TEXT, BLANK, HUGE]).flatmap(lambda strategy: strategy)
JSON_VALUE = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | TEXT,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                          max_leaves=8)
WRONG = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.lists(JSON_VALUE, max_size=3),
                  st.dictionaries(st.text(max_size=5), JSON_VALUE, max_size=3))


def weighted(good, bad, odds: int = 6):
    """`good` about `odds` times as often as `bad` (sampled_from, not integers: hypothesis favours the ends of an
    integer range, which would make `bad` the common case)."""
    return st.sampled_from([good] * odds + [bad]).flatmap(lambda strategy: strategy)


def rarely(odds: int):
    """True about once in `odds + 1` draws."""
    return st.sampled_from([False] * odds + [True])


PART_GOOD = st.one_of(
    FIELD_TEXT,
    st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text", "output_text"]), "text": FIELD_TEXT}),
    st.fixed_dictionaries({"text": FIELD_TEXT}),
    st.fixed_dictionaries({"type": st.sampled_from(["document", "tool_result", "search_result"]),
                           "content": st.one_of(FIELD_TEXT, st.lists(FIELD_TEXT, max_size=2))}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "input_audio", "refusal"]),
                           "image_url": st.just({"url": "data:,"})}),
)
PART_BAD = st.one_of(
    st.fixed_dictionaries({"type": st.one_of(st.sampled_from(["video", "", "TEXT"]), WRONG), "text": TEXT}),
    WRONG)
PART = weighted(PART_GOOD, PART_BAD)
CONTENT_GOOD = weighted(FIELD_TEXT, st.one_of(st.none(), st.lists(PART_GOOD, max_size=3)), 2)
CONTENT = weighted(CONTENT_GOOD, st.one_of(st.lists(PART, max_size=4), WRONG))
TOOL_CALLS = st.just([{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}])
DOCUMENTS_GOOD = st.one_of(FIELD_TEXT, st.fixed_dictionaries({"text": FIELD_TEXT}),
                           st.lists(st.one_of(FIELD_TEXT, st.fixed_dictionaries({"text": FIELD_TEXT}),
                                              st.fixed_dictionaries({"content": CONTENT_GOOD})), max_size=3))
DOCUMENTS = weighted(DOCUMENTS_GOOD, WRONG)
ROLE = weighted(st.sampled_from(KNOWN_ROLES), st.one_of(st.sampled_from(["robot", "", "Assistant", "model"]), WRONG))


@st.composite
def message(draw, role):
    msg = {"role": draw(role)}
    msg["content"] = draw(CONTENT)
    if msg["role"] == "assistant" and draw(rarely(3)):
        msg["content"], msg["tool_calls"] = draw(st.sampled_from([None, "", " "])), draw(TOOL_CALLS)
    if draw(rarely(6)):
        msg[draw(st.sampled_from(["documents", "context"]))] = draw(DOCUMENTS)
    if draw(rarely(30)):
        del msg["role"]
    if draw(rarely(30)):
        del msg["content"]
    return msg


@st.composite
def conversation(draw):
    """Chats shaped like real ones (system, user, a tool call and its results, the final assistant answer), and
    now and then any list of messages at all."""
    if draw(rarely(5)):
        return draw(st.lists(message(ROLE), max_size=6))
    msgs = []
    if draw(st.booleans()):
        msgs.append(draw(message(st.sampled_from(["system", "developer"]))))
    msgs.append(draw(message(weighted(st.just("user"), ROLE, 10))))
    if draw(st.booleans()):
        msgs.append({"role": "assistant", "content": None, "tool_calls": draw(TOOL_CALLS)})
        msgs.extend(draw(st.lists(message(st.sampled_from(["tool", "function", "ipython"])), min_size=1,
                                  max_size=2)))
    if not draw(rarely(8)):
        msgs.append(draw(message(st.just("assistant"))))
    return msgs


FIELDS = st.fixed_dictionaries({"answer": weighted(FIELD_TEXT, WRONG)}, optional={
    "context": weighted(st.one_of(FIELD_TEXT, st.lists(FIELD_TEXT, max_size=3)), WRONG),
    "question": weighted(st.one_of(FIELD_TEXT, st.none()), WRONG),
    "task_type": st.one_of(st.sampled_from(["QA", "summary", "Data2txt", "bogus"]), WRONG),
    "id": JSON_VALUE,
})
MESSAGES = st.builds(lambda msgs, docs: {"messages": msgs, **({"documents": docs} if docs is not None else {})},
                     weighted(conversation(), WRONG, 12), st.one_of(st.none(), st.none(), DOCUMENTS))
RANDOM_OBJECT = st.dictionaries(st.sampled_from(["answer", "context", "messages", "documents", "question",
                                                 "task_type", "id", "extra"]), JSON_VALUE, max_size=4)
ANY_INPUT = st.sampled_from([FIELDS] * 3 + [MESSAGES] * 4 + [JSON_VALUE, RANDOM_OBJECT]).flatmap(lambda x: x)
# inputs that parse: explicit fields with text everywhere
GOOD = st.fixed_dictionaries({"context": st.one_of(VALID, st.lists(VALID, max_size=3)),
                              "question": st.one_of(st.none(), VALID), "answer": VALID})

# ---- gates -----------------------------------------------------------------------------------------------------

PLUGIN = {"enabled": True, "use_nli": True, "hallucination_action": "header", "unverified_factual_action": "header",
          "include_hallucination_details": True}
HEADERS = [(f"decisions=[{{name: fact_check, priority: 100, rules: {{operator: OR, conditions: "
            f"[{{type: fact_check, name: needs_fact_check}}]}}, plugins: [{{type: hallucination, "
            f"configuration: {json.dumps(PLUGIN)}}}]}}]")]
SMALL = ["hallucination_mitigation.hallucination_model.max_length=96",
         "hallucination_mitigation.hallucination_model.max_context_tokens=2000"]


@pytest.fixture(scope="module")
def gate(minilm_dir):
    return HaluGate(from_dict(InferenceSettings, apply_overrides({}, HEADERS + SMALL), "<test>"), **fakes(minilm_dir))


@pytest.fixture(scope="module")
def onnx_gate(tiny_exports):
    dirs = tiny_exports
    # every threshold at 0: the random tiny models then flag every answer token, so spans cover all the text
    low = ["hallucination_mitigation.hallucination_model.threshold=0.0",
           "hallucination_mitigation.hallucination_model.min_span_confidence=0.0",
           "hallucination_mitigation.fact_check_model.threshold=0.0"]
    gate = HaluGate.from_dirs(detector=dirs["detector"], sentinel=dirs["sentinel"], explainer=dirs["explainer"],
                              overrides=[*HEADERS, *SMALL, *low])
    assert gate.load_errors == {}
    return gate


# ---- checks ----------------------------------------------------------------------------------------------------

def outcome(gate, item, where="inputs[0]") -> Result | Exception:
    """The result, or the documented error (checked to name the input); anything else fails the test."""
    try:
        return gate.detect_batch([item])[0]
    except (InputError, InputTooLongError) as exc:
        assert str(exc).startswith(where), f"error does not name the field: {exc}"
        return exc


def check_result(gate, item, r: Result) -> None:
    data = parse_input(item)
    answer = data.answer
    # unscorable answers are never "no hallucination"
    if blank(answer):
        assert (r.status, r.reason) == ("skipped", "empty_answer"), (answer, r.status, r.reason)
    if r.hallucination_detected is False:
        assert r.status == "ok" and not blank(answer) and not r.spans and r.hallucination_score is not None
    if r.status != "ok":
        assert r.reason, "a result that is not ok says why"
        assert r.hallucination_detected is not False
    if HEADER_DETECTED in r.headers:
        assert r.headers[HEADER_DETECTED] == "true" or (r.status == "ok" and not blank(answer))
    # spans index the answer, evidence the context, in Python string indices
    context = join_documents(gate.context_documents(data.context))
    for s in r.spans:
        assert 0 <= s.start < s.end <= len(answer) and answer[s.start:s.end] == s.text, (answer, s)
        if s.evidence is not None:
            e = s.evidence
            assert 0 <= e.start <= e.end <= len(context) and context[e.start:e.end] == e.text, (context, e)
    # headers: visible ASCII only, bounded
    for name, value in r.headers.items():
        assert value.isascii() and value.isprintable() and value == value.strip(), (name, value)
        assert len(value) <= MAX_SPANS_HEADER_CHARS
    # the JSON form: stable keys, and serialisable (json.dumps escapes what UTF-8 cannot carry)
    d = r.to_dict()
    assert list(d) == list(Result().to_dict())
    json.loads(json.dumps(d))


def comparable(r: Result) -> dict:
    d = r.to_dict()
    d.pop("timings_ms")
    return d


def run_property(gate, strategy, counts: Counter, name: str, profile=CI) -> None:
    @profile
    @given(item=strategy)
    def prop(item):
        out = outcome(gate, item)
        counts["inputs"] += 1
        if isinstance(out, Exception):
            counts[type(out).__name__] += 1
        else:
            counts[f"{out.status}/{out.reason or 'checked'}"] += 1
            check_result(gate, item, out)

    prop()
    print(f"\n{name}: {counts['inputs']} generated inputs, crashes 0, outcomes "
          f"{dict(sorted((k, v) for k, v in counts.items() if k != 'inputs'))}")


# ---- properties ------------------------------------------------------------------------------------------------

def test_any_input_gives_a_result_or_the_documented_error(gate):
    counts = Counter()
    run_property(gate, ANY_INPUT, counts, "any input (fields, messages, JSON values)")
    assert counts["inputs"] >= min(EXAMPLES, 1000) * 0.9
    assert counts["InputError"] and sum(v for k, v in counts.items() if "/" in k)  # both outcomes were reached


def test_parsable_inputs_with_any_unicode_keep_span_and_evidence_offsets(gate):
    counts = Counter()
    run_property(gate, GOOD, counts, "well-formed fields, any Unicode")
    assert counts["ok/checked"] > 0


def test_unscorable_answers_are_never_no_hallucination(gate):
    counts = Counter()
    strategy = st.fixed_dictionaries({"context": VALID, "question": st.one_of(st.none(), VALID), "answer": BLANK})

    @CI
    @given(item=strategy)
    def prop(item):
        r = gate.detect_batch([item])[0]
        counts["inputs"] += 1
        assert (r.status, r.reason, r.hallucination_detected) == ("skipped", "empty_answer", None), item
        assert HEADER_DETECTED not in r.headers and not r.spans
        counts[r.status] += 1

    prop()

    @settings(CI, max_examples=max(10, EXAMPLES // 20))
    @given(piece=st.sampled_from(["word ", "500 m ", "\u4e2d", "e\u0301 "]), n=st.integers(400, 5000))
    def too_long(piece, n):
        counts["inputs"] += 1
        with pytest.raises(InputTooLongError, match=r"^inputs\[0\]"):
            gate.detect_batch([{"context": "The tower is 330 m tall.", "answer": piece * n}])
        counts["InputTooLongError"] += 1

    too_long()
    print(f"\nunscorable answers: {counts['inputs']} generated inputs, {dict(counts)}, wrong 'no hallucination' 0")


def test_a_result_is_the_same_alone_and_inside_a_batch(gate):
    counts = Counter()

    @CI
    @given(items=st.lists(GOOD, min_size=2, max_size=5), pick=st.integers(0, 4))
    def prop(items, pick):
        pick %= len(items)
        counts["inputs"] += len(items)
        try:
            batch = gate.detect_batch(items)
        except InputTooLongError:
            return
        alone = gate.detect_batch([items[pick]])[0]
        assert comparable(batch[pick]) == comparable(alone)
        assert comparable(gate.detect_batch([items[pick]])[0]) == comparable(alone)  # and again

    prop()
    print(f"\ndeterminism (alone vs in a batch): {counts['inputs']} generated inputs, differences 0")


def test_real_onnx_stack_keeps_offsets_on_any_unicode(onnx_gate):
    counts = Counter()
    run_property(onnx_gate, GOOD, counts, "real ONNX stack (tiny exported models), any Unicode")
    assert counts["ok/checked"] > 0


def test_real_onnx_stack_is_the_same_alone_and_in_a_batch(onnx_gate):
    counts = Counter()

    @settings(CI, max_examples=max(10, EXAMPLES // 5))
    @given(items=st.lists(GOOD, min_size=2, max_size=4), pick=st.integers(0, 3))
    def prop(items, pick):
        pick %= len(items)
        counts["inputs"] += len(items)
        try:
            batch = onnx_gate.detect_batch(items)
        except InputTooLongError:
            return
        alone = onnx_gate.detect_batch([items[pick]])[0]
        b, a = batch[pick], alone
        assert (b.status, b.reason, b.hallucination_detected) == (a.status, a.reason, a.hallucination_detected)
        assert [(s.start, s.end, s.text) for s in b.spans] == [(s.start, s.end, s.text) for s in a.spans]
        if a.hallucination_score is not None:
            assert b.hallucination_score == pytest.approx(a.hallucination_score, abs=1e-4)

    prop()
    print(f"\nreal ONNX determinism: {counts['inputs']} generated inputs, differences 0")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("HALUGATE_LONG_RUNS") != "1", reason="the long run: HALUGATE_LONG_RUNS=1")
def test_any_input_long_run(gate):
    counts = Counter()
    run_property(gate, ANY_INPUT, counts, "any input, long run", profile=SLOW)
    counts = Counter()
    run_property(gate, GOOD, counts, "well-formed fields, long run", profile=SLOW)


# ---- regressions: each input that broke a property, kept as its own test ------------------------------------------

def test_lone_surrogate_ud800_answer_is_an_input_error_naming_the_field(gate):
    """Found by the any-input property: "\\ud800" (valid JSON) reached the tokenizer and raised TypeError."""
    raw = json.loads('{"context": "It is 330 m.", "answer": "It is \\ud800 500 m."}')
    with pytest.raises(InputError, match=r"^inputs\[0\]\.answer: not valid Unicode text \(lone surrogate"):
        gate.detect_batch([raw])
    with pytest.raises(InputError, match=r"^messages\[0\]\.content\[0\]: not valid Unicode"):
        gate.detect([{"role": "user", "content": ["\udfff"]}, {"role": "assistant", "content": "x"}])


@pytest.mark.parametrize("answer", ["\u200b", "\x00", "\ufeff\u00a0 \u3000", "\u0301", "\u202e\u200d"])
def test_invisible_answers_zero_width_nul_bom_marks_are_skipped_not_clean(gate, answer):
    """Found by the unscorable-answer property: answers with no visible character were checked and came back
    "no hallucination" (x-vsr-hallucination-detected: false)."""
    r = gate.detect(context="The tower is 330 m tall.", question="How tall?", answer=answer)
    assert (r.status, r.reason, r.hallucination_detected) == ("skipped", "empty_answer", None)
    assert HEADER_DETECTED not in r.headers


def test_empty_answer_has_no_verdict_not_false(gate):
    """An empty answer was `skipped` with hallucination_detected false: a "no hallucination" without a check
    (the reference system's semantic-router#2679); it is null now, as the result schema documents."""
    r = gate.detect(context="The tower is 330 m tall.", question="How tall?", answer="")
    assert r.hallucination_detected is None and HEADER_DETECTED not in r.headers


def test_documents_error_inputs0_documents_names_the_input(gate):
    """Found by the any-input property: a bad `documents` beside messages was reported as `documents[0]`,
    without the input's path."""
    with pytest.raises(InputError, match=r"^inputs\[1\]\.documents\[0\]: expected a string"):
        gate.detect_batch([{"answer": "ok"}, {"messages": [{"role": "assistant", "content": "x"}], "documents": [3]}])


def test_spans_header_nul_crlf_set_cookie_and_non_latin1_are_percent_encoded():
    """A span text with NUL went into the header as a raw NUL (backslashreplace keeps ASCII controls), which
    breaks the response; non-ASCII was written as ambiguous backslash escapes."""
    from inference.result import Span, header_text, spans_header

    text = "a\x00b\r\nSet-Cookie: x=1; é\u202e\U0001F600 100%"
    value = spans_header([Span(0, len(text), text, 0.9)])
    assert value == "a%00b Set-Cookie: x=1%3B %C3%A9%E2%80%AE%F0%9F%98%80 100%25"
    assert header_text("500 meters") == "500 meters"  # plain ASCII is unchanged
    from urllib.parse import unquote

    assert unquote(value) == " ".join(text.split())


def test_long_spans_header_is_cut_with_a_marker_never_inside_an_escape():
    from inference.result import HEADER_SPANS, HEADER_SPANS_TRUNCATED, Result, Span, detection_headers

    for pad in range(3):
        spans = [Span(0, 1, "x" * pad + "é" * 600, 0.9), Span(0, 1, "tail", 0.9)]
        r = Result(hallucination_detected=True, spans=spans)
        h = detection_headers(r, True, False)
        value = h[HEADER_SPANS]
        assert len(value) <= MAX_SPANS_HEADER_CHARS and value.endswith("...")
        assert h[HEADER_SPANS_TRUNCATED] == "true"
        body = value[:-3]
        assert not body.endswith("%") and body[-2:-1] != "%"  # no escape cut in half


def test_content_parts_nested_17_deep_are_an_input_error_not_a_recursion_error(gate):
    """Content parts inside content parts were followed without a bound: deep enough nesting (about 450 levels
    through the service) raised RecursionError (a 500); past MAX_PART_DEPTH levels it is an InputError now."""
    from inference.messages import MAX_PART_DEPTH

    def nested(depth):
        content = "How tall is it?"
        for _ in range(depth):
            content = [{"type": "text", "text": content}]
        return [{"role": "user", "content": content}, {"role": "assistant", "content": "It is 500 m."}]

    assert gate.detect(nested(MAX_PART_DEPTH)).status in ("ok", "skipped")
    with pytest.raises(InputError, match=r"^messages\[0\]\.content(\[0\]\.text)+: content parts nested deeper"):
        gate.detect(nested(MAX_PART_DEPTH + 1))
    with pytest.raises(InputError, match="nested deeper"):
        gate.detect(nested(5000))
