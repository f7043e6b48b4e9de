"""OpenAI-style messages and explicit inputs -> (context, question, answer), and the errors bad input gets."""

from __future__ import annotations

import pytest

from inference.messages import InputError, from_fields, from_messages, parse_input

EIFFEL_TOOL = "The Eiffel Tower was built 1887-1889. It is 330 meters tall and stands in Paris."


def test_tool_results_become_context_and_last_assistant_is_the_answer():
    msgs = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "When was the Eiffel Tower built?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": EIFFEL_TOOL},
        {"role": "function", "name": "weather", "content": [{"type": "text", "text": "Sunny in Paris."}]},
        {"role": "assistant", "content": "It was built in 1950."},
    ]
    x = from_messages(msgs)
    assert x.answer == "It was built in 1950."
    assert x.question == "When was the Eiffel Tower built?"
    assert x.context == [EIFFEL_TOOL, "Sunny in Paris."]
    assert x.has_context


def test_multiple_documents_from_message_fields_parts_and_argument():
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "Summarise the reports."},
                                     {"type": "document", "text": "Report A says 3 units."},
                                     {"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
         "documents": ["Report B says 4 units.", {"text": "Report C says 5 units."}]},
        {"role": "assistant", "content": "A: 3, B: 4, C: 5."},
    ]
    x = from_messages(msgs, documents=[{"content": "Report D."}])
    assert x.context == ["Report A says 3 units.", "Report B says 4 units.", "Report C says 5 units.", "Report D."]
    assert x.answer == "A: 3, B: 4, C: 5."


def test_question_is_last_user_message_before_the_answer():
    msgs = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "second?"}, {"role": "assistant", "content": "a2"}]
    x = from_messages(msgs)
    assert (x.question, x.answer, x.context) == ("second?", "a2", [])


@pytest.mark.parametrize("msgs, needle", [
    ([{"role": "user", "content": "hi"}], "no assistant message"),
    ([], "empty conversation"),
    ("not a list", "expected a list"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}],
     "only calls tools"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]},
      {"role": "tool", "content": "result"}], "final answer is missing"),
    ([{"role": "user", "content": 42}, {"role": "assistant", "content": "a"}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "text", "text": 7}]}, {"role": "assistant", "content": "a"}],
     "messages[0].content[0].text"),
    ([{"role": "user", "content": [{"type": "video"}]}, {"role": "assistant", "content": "a"}],
     "unsupported content part"),
    ([{"role": "robot", "content": "x"}, {"role": "assistant", "content": "a"}], "unknown role"),
    ([{"content": "x"}, {"role": "assistant", "content": "a"}], "messages[0].role"),
    (["hello", {"role": "assistant", "content": "a"}], "messages[0]: expected a message object"),
    ([{"role": "user", "content": "q", "documents": [3]}, {"role": "assistant", "content": "a"}],
     "messages[0].documents[0]"),
])
def test_malformed_messages_get_errors_naming_the_field(msgs, needle):
    with pytest.raises(InputError) as exc:
        from_messages(msgs)
    assert needle in str(exc.value)


def test_explicit_fields_and_their_errors():
    x = from_fields(context=["doc one", "  ", "doc two"], question="  ", answer="ans")
    assert x.context == ["doc one", "doc two"] and x.question is None
    assert from_fields(context="one doc", answer="a").context == ["one doc"]
    assert not from_fields(context="", answer="a").has_context
    for kwargs, needle in [
        ({"context": "c"}, "answer: required"),
        ({"context": "c", "answer": 3}, "answer: expected a string, got int"),
        ({"context": ["ok", 5], "answer": "a"}, "context[1]: expected a string, got int"),
        ({"context": {"a": 1}, "answer": "a"}, "context: expected a string or a list"),
        ({"context": "c", "question": ["q"], "answer": "a"}, "question: expected a string"),
    ]:
        with pytest.raises(InputError, match=None) as exc:
            from_fields(**kwargs)
        assert needle in str(exc.value)


def test_parse_input_dispatch_and_errors():
    assert parse_input({"messages": [{"role": "assistant", "content": "a"}]}).answer == "a"
    assert parse_input({"context": "c", "answer": "a"}).context == ["c"]
    with pytest.raises(InputError, match=r"inputs\[2\]\.colour: unknown field"):
        parse_input({"answer": "a", "colour": 1}, "inputs[2]")
    with pytest.raises(InputError, match="either messages or answer"):
        parse_input({"messages": [], "answer": "a"})
    with pytest.raises(InputError, match="expected an object"):
        parse_input(["a"], "inputs[0]")
