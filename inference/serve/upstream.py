"""The upstream side of the proxy: which headers travel, how upstream failures map to statuses, and the
server-sent-events stream of `/chat/completions` (parsed without changing what passes through).

Failure mapping (never a 200): an upstream status >= 400 passes through with its body; a timeout is 504;
a refused connection, a truncated body or stream, or a 200 that is not the expected JSON is 502.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import starlette.responses

# Not forwarded in either direction: hop-by-hop, or rewritten by the proxy (length / encoding of a new body).
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "content-encoding", "accept-encoding",
})
# upstream response headers the proxy never passes on (it sets its own content type, date and server)
_NOT_PASSED = HOP_BY_HOP | {"content-type", "date", "server"}
SERVICE_HEADERS = frozenset({"x-halugate-api-key"})


def request_headers(headers, *, drop_authorization: bool = False, api_key: str | None = None) -> dict[str, str]:
    """The caller's headers for the upstream (its Authorization included, unless it was the service's own
    token: then `api_key`, when configured, is sent instead). The body is asked for uncompressed."""
    out = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP | SERVICE_HEADERS}
    if drop_authorization:
        out = {k: v for k, v in out.items() if k.lower() != "authorization"}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    out["accept-encoding"] = "identity"
    return out


def response_headers(headers) -> dict[str, str]:
    """The upstream's response headers for the caller (this server sets its own type, date and server). From
    httpx's raw bytes, decoded as ISO-8859-1 so that they go out byte for byte as they came (httpx decodes UTF-8
    values to text that Starlette could not encode again); repeated names are joined with ", "."""
    raw = getattr(headers, "raw", None)
    items = ([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw] if raw is not None
             else list(headers.items()))
    out: dict[str, str] = {}
    for k, v in items:
        key = k.lower()
        if key in _NOT_PASSED or any(c in v for c in "\r\n\0"):
            continue
        out[key] = f"{out[key]}, {v}" if key in out else v
    return out


def error_body(message: str, kind: str, code: int | str | None = None, param: str | None = None) -> dict:
    """OpenAI's error shape, so that OpenAI clients raise a readable error."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class UpstreamFailure(Exception):
    """No usable upstream answer: `status` for the caller, `kind` for the metrics."""

    status: int
    kind: str
    message: str

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        return error_body(self.message, "upstream_error", self.status)


def failure_from(exc: Exception) -> UpstreamFailure:
    if isinstance(exc, UpstreamFailure):
        return exc
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamFailure(504, "timeout", f"upstream timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return UpstreamFailure(502, "connect", "upstream unreachable (connection failed)")
    return UpstreamFailure(502, "protocol", f"upstream response broken ({type(exc).__name__}: {exc})")


# ---- server-sent events ----------------------------------------------------------------------------------------

@dataclass
class Event:
    raw: bytes                  # the event as received (line breaks normalised), without its blank line
    data: str | None            # the joined data lines; None for comment-only events
    payload: Any = None         # data parsed as JSON (None for [DONE] or non-JSON)

    @property
    def done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"

    def encode(self) -> bytes:
        return self.raw + b"\n\n"


class SSEParser:
    """Bytes in, complete events out (CRLF / CR / LF line breaks; events end at a blank line)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, chunk: bytes) -> list[Event]:
        self.buf += chunk
        keep = b""
        if self.buf.endswith(b"\r"):  # maybe half of a CRLF
            self.buf, keep = self.buf[:-1], b"\r"
        self.buf = self.buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *complete, rest = self.buf.split(b"\n\n")
        self.buf = rest + keep
        return [parse_event(raw) for raw in complete if raw.strip()]

    @property
    def leftover(self) -> bytes:
        return self.buf.strip()


def parse_event(raw: bytes) -> Event:
    data_lines = []
    for line in raw.decode("utf-8", "replace").split("\n"):
        if line.startswith("data:"):
            value = line[5:]
            data_lines.append(value.removeprefix(" "))
    data = "\n".join(data_lines) if data_lines else None
    payload = None
    if data is not None and data.strip() != "[DONE]":
        try:
            payload = json.loads(data)
        except ValueError:
            payload = None
    return Event(raw, data, payload)


def json_bytes(payload: Any) -> bytes:
    """UTF-8 JSON; text that is not valid Unicode (a lone surrogate, e.g. from an upstream's "\\ud800") goes out
    escaped as it came in, instead of failing the response."""
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("utf-8")


class JSONResponse(starlette.responses.JSONResponse):
    """Starlette's JSONResponse rendered by `json_bytes` (what an upstream sent never makes a response fail)."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def sse(payload: Any) -> bytes:
    return b"data: " + json_bytes(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


@dataclass
class StreamState:
    """What a chat-completion stream said so far: text and tool calls per choice, finish reasons, ids."""

    content: dict[int, list[str]] = field(default_factory=dict)
    tool_calls: set[int] = field(default_factory=set)
    finished: dict[int, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    error: Any = None

    def add(self, event: Event) -> None:
        if event.done:
            self.done = True
            return
        p = event.payload
        if not isinstance(p, dict):
            return
        if p.get("error"):
            self.error = p["error"]
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in p and key not in self.meta:
                self.meta[key] = p[key]
        for choice in p.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            i = int(choice.get("index", 0) or 0)
            delta = choice.get("delta") or {}
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str):
                self.content.setdefault(i, []).append(text)
            if isinstance(delta, dict) and delta.get("tool_calls"):
                self.tool_calls.add(i)
            if choice.get("finish_reason"):
                self.finished[i] = choice["finish_reason"]

    @property
    def complete(self) -> bool:
        """[DONE] seen, or every choice finished (some servers omit [DONE])."""
        indexes = set(self.content) | self.tool_calls
        return self.done or (bool(self.finished) and indexes <= set(self.finished))

    def answers(self) -> dict[int, str | None]:
        """Per choice: its text, or None when it only called tools (nothing to check)."""
        out: dict[int, str | None] = {}
        for i in sorted(set(self.content) | self.tool_calls | set(self.finished)):
            text = "".join(self.content.get(i, []))
            out[i] = None if (i in self.tool_calls and not text.strip()) else text
        return out

    def chunk(self, choices: list, **extra) -> dict:
        base = {"id": self.meta.get("id", "chatcmpl-halugate"), "object": "chat.completion.chunk",
                "created": self.meta.get("created", 0), "model": self.meta.get("model", "")}
        if "system_fingerprint" in self.meta:
            base["system_fingerprint"] = self.meta["system_fingerprint"]
        return {**base, "choices": choices, **extra}


def has_finish(event: Event) -> bool:
    p = event.payload
    return isinstance(p, dict) and any(isinstance(c, dict) and c.get("finish_reason")
                                       for c in p.get("choices") or [])


def without_choices(event: Event, drop: set[int]) -> bytes | None:
    """The event with the choices in `drop` removed (re-encoded); None when nothing is left of it."""
    p = event.payload
    if not drop or not isinstance(p, dict) or not p.get("choices"):
        return event.encode()
    kept = [c for c in p["choices"] if int(c.get("index", 0) or 0) not in drop]
    if not kept:
        return None
    return sse({**p, "choices": kept})
