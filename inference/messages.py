"""What is checked: (context documents, question, answer), from OpenAI-style chat messages or explicit fields.

From `messages` (OpenAI chat format):
- the answer is the last assistant message's text; a conversation without one is an error (pass `answer=`);
- the question is the last user message before that answer (the Sentinel reads it);
- the context is every tool / function result before the answer (roles `tool`, `function`, `ipython`), plus
  retrieved documents attached to any message as `documents` / `context` (a string, or a list of strings or
  `{"text": ...}` / `{"content": ...}` objects), plus content parts of type `document` / `tool_result`;
- content may be a string or a list of parts (`{"type": "text", "text": ...}`); image / audio parts carry no text
  to verify and are skipped; anything else is an error naming the message and field.

Every text must be valid Unicode: a lone surrogate (JSON can carry one, `"\\ud800"`) is an InputError naming the
field and the position. A text is blank when it has no visible character (only whitespace, control and format
characters such as zero-width spaces, or combining marks with no base): a blank document is dropped, a blank
answer is `skipped` / `empty_answer` (inference.detect), never checked and never "clean".
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from inference.spans import TASK_TYPES, normalize_task_type

TOOL_ROLES = ("tool", "function", "ipython")
KNOWN_ROLES = ("system", "developer", "user", "assistant", *TOOL_ROLES)
TEXT_PARTS = ("text", "input_text", "output_text")
DOCUMENT_PARTS = ("document", "tool_result", "search_result")
NON_TEXT_PARTS = ("image_url", "input_image", "image", "input_audio", "audio", "file", "input_file", "refusal")
DOCUMENT_KEYS = ("documents", "context")


class InputError(ValueError):
    """The input to check is malformed; the message names the field (e.g. `messages[2].content`)."""


# Unicode categories with nothing to read: separators (Z*), controls (Cc), format characters such as zero-width
# spaces, joiners, direction marks and the BOM (Cf), surrogates (Cs), and combining marks (M*) with no base.
_INVISIBLE = ("Z", "Cc", "Cf", "Cs", "M")


def blank(text: str) -> bool:
    """True when `text` has no visible character (see the module docstring): nothing there to verify."""
    if not text.strip():
        return True
    if text.isprintable() and any(c.isalnum() for c in text):
        return False  # the common case, without a per-character category lookup
    return all(unicodedata.category(c).startswith(_INVISIBLE) for c in text)


def check_text(value: str, where: str) -> str:
    """`value` when it is valid Unicode (encodable as UTF-8); else InputError naming the field and position."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: not valid Unicode text (lone surrogate {value[exc.start]!r} at character "
                         f"{exc.start})") from None
    return value


@dataclass
class DetectInput:
    """One (context, question, answer) triple, validated."""

    answer: str
    context: list[str] = field(default_factory=list)
    question: str | None = None
    task_type: str | None = None  # QA / Summary / Data2txt (the Detector's template); None: inferred

    @property
    def has_context(self) -> bool:
        return any(not blank(doc) for doc in self.context)


MAX_PART_DEPTH = 16  # content parts inside content parts: deeper is refused (no real client nests them)


def _text_of(value: Any, where: str, depth: int = 0) -> str:
    """Text of a message content: a string, None, or a list of parts."""
    if depth > MAX_PART_DEPTH:
        raise InputError(f"{where}: content parts nested deeper than {MAX_PART_DEPTH} levels")
    if value is None:
        return ""
    if isinstance(value, str):
        return check_text(value, where)
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            pw = f"{where}[{i}]"
            if isinstance(part, str):
                texts.append(check_text(part, pw))
                continue
            if not isinstance(part, dict):
                raise InputError(f"{pw}: expected a content part object or a string, got {type(part).__name__}")
            kind = part.get("type", "text")
            if kind in TEXT_PARTS or kind in DOCUMENT_PARTS:
                inner = part.get("text", part.get("content"))
                texts.append(_text_of(inner, f"{pw}.{'text' if 'text' in part else 'content'}", depth + 1))
            elif kind in NON_TEXT_PARTS:
                continue
            else:
                raise InputError(f"{pw}.type: unsupported content part {kind!r} "
                                 f"(text parts: {', '.join(TEXT_PARTS + DOCUMENT_PARTS)})")
        return "\n".join(t for t in texts if t)
    raise InputError(f"{where}: expected a string or a list of content parts, got {type(value).__name__}")


def _documents_of(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [check_text(value, where)]
    if isinstance(value, dict):
        return [_text_of(value.get("text", value.get("content")), where)]
    if isinstance(value, list):
        docs = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                docs.append(check_text(item, f"{where}[{i}]"))
            elif isinstance(item, dict) and ("text" in item or "content" in item):
                key = "text" if "text" in item else "content"
                docs.append(_text_of(item[key], f"{where}[{i}].{key}"))
            else:
                raise InputError(f"{where}[{i}]: expected a string or an object with text, "
                                 f"got {type(item).__name__}")
        return docs
    raise InputError(f"{where}: expected a string or a list of documents, got {type(value).__name__}")


def _document_parts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [_text_of(p.get("text", p.get("content")), "document")
            for p in content if isinstance(p, dict) and p.get("type") in DOCUMENT_PARTS]


def _checked(data: DetectInput, where: str) -> DetectInput:
    """A DetectInput built by a caller (not parsed here): its texts checked the same way."""
    pre = f"{where}." if where else ""
    if not isinstance(data.answer, str):
        raise InputError(f"{pre}answer: expected a string, got {type(data.answer).__name__}")
    check_text(data.answer, f"{pre}answer")
    if data.question is not None:
        check_text(data.question, f"{pre}question")
    for i, doc in enumerate(data.context):
        if not isinstance(doc, str):
            raise InputError(f"{pre}context[{i}]: expected a string, got {type(doc).__name__}")
        check_text(doc, f"{pre}context[{i}]")
    return data


def from_messages(messages: Any, documents: Any = None, where: str = "messages") -> DetectInput:
    """Parse OpenAI-style chat messages (see the module docstring for what becomes what)."""
    if not isinstance(messages, list):
        raise InputError(f"{where}: expected a list of message objects, got {type(messages).__name__}")
    if not messages:
        raise InputError(f"{where}: empty conversation; it needs at least the assistant answer to check")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InputError(f"{where}[{i}]: expected a message object, got {type(msg).__name__}")
        role = msg.get("role")
        if not isinstance(role, str):
            raise InputError(f"{where}[{i}].role: missing or not a string")
        if role not in KNOWN_ROLES:
            raise InputError(f"{where}[{i}].role: unknown role {role!r} (known: {', '.join(KNOWN_ROLES)})")

    answer_at = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if answer_at is None:
        raise InputError(f"{where}: no assistant message; the last assistant message is the answer to check "
                         "(append the model's reply, or pass answer=... with context/question)")
    later_tools = [i for i, m in enumerate(messages) if i > answer_at and m["role"] in TOOL_ROLES]
    if later_tools:
        raise InputError(f"{where}[{later_tools[0]}]: a tool result comes after the last assistant message, so "
                         "the final answer is missing; append the assistant's reply to the tool results")
    answer_msg = messages[answer_at]
    answer = _text_of(answer_msg.get("content"), f"{where}[{answer_at}].content")
    if blank(answer) and answer_msg.get("tool_calls"):
        raise InputError(f"{where}[{answer_at}]: the last assistant message only calls tools; "
                         "the answer to check is missing (append the assistant's final reply)")

    context: list[str] = []
    question: str | None = None
    for i, msg in enumerate(messages[:answer_at]):
        role = msg["role"]
        text = _text_of(msg.get("content"), f"{where}[{i}].content")
        if role in TOOL_ROLES:
            context.append(text)
        else:
            context.extend(_document_parts(msg.get("content")))
        for key in DOCUMENT_KEYS:
            if key in msg:
                context.extend(_documents_of(msg[key], f"{where}[{i}].{key}"))
        if role == "user":
            question = text
    for key in DOCUMENT_KEYS:
        if key in answer_msg:
            context.extend(_documents_of(answer_msg[key], f"{where}[{answer_at}].{key}"))
    context.extend(_documents_of(documents, where.removesuffix("messages") + "documents"))
    return DetectInput(answer=answer, context=[c for c in context if not blank(c)], question=question)


def from_fields(context: Any = None, question: Any = None, answer: Any = None, where: str = "",
                task_type: Any = None) -> DetectInput:
    """Explicit inputs: context (a string or a list of strings), question (optional), answer (required)."""
    prefix = f"{where}." if where else ""
    if answer is None:
        raise InputError(f"{prefix}answer: required (the text to check), or pass messages=[...]")
    if not isinstance(answer, str):
        raise InputError(f"{prefix}answer: expected a string, got {type(answer).__name__}")
    check_text(answer, f"{prefix}answer")
    if question is not None and not isinstance(question, str):
        raise InputError(f"{prefix}question: expected a string or null, got {type(question).__name__}")
    if question is not None:
        check_text(question, f"{prefix}question")
    if context is None:
        docs: list[str] = []
    elif isinstance(context, str):
        docs = [check_text(context, f"{prefix}context")]
    elif isinstance(context, (list, tuple)):
        docs = []
        for i, doc in enumerate(context):
            if not isinstance(doc, str):
                raise InputError(f"{prefix}context[{i}]: expected a string, got {type(doc).__name__}")
            docs.append(check_text(doc, f"{prefix}context[{i}]"))
    else:
        raise InputError(f"{prefix}context: expected a string or a list of strings, got {type(context).__name__}")
    task = None
    if task_type is not None:
        task = normalize_task_type(task_type) if isinstance(task_type, str) else None
        if task is None:
            raise InputError(f"{prefix}task_type: expected one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    return DetectInput(answer=answer, context=[d for d in docs if not blank(d)],
                       question=question if question and not blank(question) else None, task_type=task)


def parse_input(item: Any, where: str = "input") -> DetectInput:
    """A DetectInput, or a mapping with `messages` (and optional `documents`) or `context`/`question`/`answer`."""
    if isinstance(item, DetectInput):
        return _checked(item, where)
    pre = f"{where}." if where else ""
    if not isinstance(item, dict):
        raise InputError(f"{where or 'input'}: expected an object with messages or context/question/answer, "
                         f"got {type(item).__name__}")
    allowed = {"messages", "documents", "context", "question", "answer", "task_type", "id"}
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise InputError(f"{pre}{unknown[0]}: unknown field (known: {', '.join(sorted(allowed))})")
    if "messages" in item:
        clash = [k for k in ("context", "question", "answer") if item.get(k) is not None]
        if clash:
            raise InputError(f"{where or 'input'}: give either messages or {clash[0]}, not both")
        return from_messages(item["messages"], item.get("documents"), f"{pre}messages")
    if item.get("documents") is not None:
        raise InputError(f"{pre}documents: only used with messages; pass context=[...] instead")
    return from_fields(item.get("context"), item.get("question"), item.get("answer"), where, item.get("task_type"))
