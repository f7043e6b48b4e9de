"""Structured context (a JSON object or array: a database row, a tool result) as plain "key: value" lines.

Why: a small encoder reads `{"attributes": {"OutdoorSeating": false, "WiFi": null}}` as word pieces of
identifiers and punctuation, while the answer it checks says "offers outdoor seating and free WiFi". As lines,
`Outdoor Seating: no` puts the answer's words and the value side by side, a field without a value is left out
(the data does not state it, so an answer that asserts it is unsupported), and the context is ~30% shorter in
tokens (RAGTruth's Data2txt rows: median 716 -> 514 MiniLM tokens), so it needs fewer Detector windows.

A Detector trained on one rendering must see the same one at run time: `training.detector` records its choice in
`detector.json` (`structured_context`), and the runtime follows it (docs/detector.md, "Other options").
"""

from __future__ import annotations

import json
import re
from typing import Any

STYLES = ("json", "text")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def key_words(key: str) -> str:
    """`OutdoorSeating` -> `Outdoor Seating`, `business_stars` -> `business stars`; other keys unchanged."""
    if "_" in key or re.search(r"[a-z][A-Z]", key):
        parts = _CAMEL.findall(key.replace("_", " "))
        return " ".join(parts) if parts else key
    return key


def _empty(value: Any) -> bool:
    return value is None or value in ("", "None", "null") or value == [] or value == {}


def _scalar(value: Any) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def _flat(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def structured_lines(data: Any, indent: str = "") -> list[str]:
    """The lines of one JSON value (see the module docstring); empty fields are left out."""
    lines: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if _empty(value):
                continue
            name = key_words(str(key))
            if _flat(value):
                lines.append(f"{indent}{name}: {_scalar(value)}")
            elif isinstance(value, dict) and all(_flat(v) for v in value.values()):
                inner = ", ".join(f"{key_words(str(k))} {_scalar(v)}" for k, v in value.items() if not _empty(v))
                if inner:
                    lines.append(f"{indent}{name}: {inner}")
            elif isinstance(value, list) and all(_flat(v) for v in value):
                lines.append(f"{indent}{name}: {', '.join(_scalar(v) for v in value if not _empty(v))}")
            else:
                body = structured_lines(value, indent + "  ")
                if body:
                    lines.append(f"{indent}{name}:")
                    lines.extend(body)
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and all(_flat(v) for v in item.values()):
                fields = "; ".join(f"{key_words(str(k))}: {_scalar(v)}" for k, v in item.items() if not _empty(v))
                if fields:
                    lines.append(f"{indent}- {fields}")
            elif _flat(item):
                if not _empty(item):
                    lines.append(f"{indent}- {_scalar(item)}")
            else:
                lines.extend(structured_lines(item, indent + "  "))
    elif not _empty(data):
        lines.append(f"{indent}{_scalar(data)}")
    return lines


def render_structured(data: Any, style: str = "json") -> str:
    """A dict / list as the Detector reads it: compact JSON (`json`, what RAGTruth-trained models saw) or
    "key: value" lines (`text`)."""
    if style not in STYLES:
        raise ValueError(f"structured_context: one of {', '.join(STYLES)}, got {style!r}")
    if style == "json":
        return json.dumps(data, ensure_ascii=False)
    return "\n".join(structured_lines(data))


def as_structured_text(document: str) -> str | None:
    """The `text` rendering of a document that is one JSON object or array, else None (prose stays prose)."""
    stripped = document.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    return render_structured(data, "text") if isinstance(data, (dict, list)) else None
