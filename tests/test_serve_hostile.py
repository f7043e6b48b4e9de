"""Hostile text through the real service (uvicorn on loopback, a loopback upstream): header injection by an
answer, lone surrogates from the caller and from the upstream, non-Latin-1 upstream headers. The Detector flags
every answer token here, so the whole answer - CR, LF and all - becomes span text on its way to the headers."""

from __future__ import annotations

import json
import socket

import httpx
import numpy as np
import pytest
from detect_helpers import FakeDetector, fakes
from serve_upstream import UvicornThread, start_service
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inference.config import from_dict
from inference.detect import HaluGate
from inference.result import HEADER_SPANS, HEADER_SPANS_TRUNCATED, MAX_SPANS_HEADER_CHARS
from inference.serve import ServeSettings, create_app
from inference.settings import InferenceSettings

CONTEXT = "The Eiffel Tower was built from 1887 to 1889. It is 330 meters tall."
INJECT = "It was built in 1950.\r\nSet-Cookie: session=evil\r\nX-Injected: 1\r\n\r\n<html>"
REQUEST = [{"role": "user", "content": "How tall is the tower?"}, {"role": "tool", "content": CONTEXT}]


class FlagEverything(FakeDetector):
    """Every answer token hallucinated: the span texts are the answer itself."""

    def row(self, ids, mask, types):
        out = np.tile(np.array([4.0, -4.0], dtype=np.float32), (len(ids), 1))
        out[np.asarray(types) == 1] = [-4.0, 4.0]
        return out


def _settings() -> InferenceSettings:
    return from_dict(InferenceSettings, {"decisions": [{
        "name": "fact_check", "priority": 100,
        "rules": {"operator": "OR", "conditions": [{"type": "fact_check", "name": "needs_fact_check"}]},
        "plugins": [{"type": "hallucination", "configuration": {"hallucination_action": "header"}}]}]})


def _answer_for(body: dict) -> str:
    prompt = body["messages"][0]["content"] if body.get("messages") else ""
    return {"long?": "é 1950 " * 120}.get(prompt, INJECT)


async def _chat(request: Request) -> Response:
    body = json.loads(await request.body())
    prompt = body["messages"][0].get("content")
    if prompt == "surrogate":  # valid JSON that decodes to a lone surrogate
        raw = (b'{"id": "c", "choices": [{"index": 0, "message": {"role": "assistant", '
               b'"content": "It is \\ud800 500 m."}, "finish_reason": "stop"}]}')
        return Response(raw, media_type="application/json")
    answer = _answer_for(body)
    if body.get("stream"):
        async def events():
            for piece in (answer[:10], answer[10:]):
                yield "data: " + json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": piece}}]}) + "\n\n"
            yield 'data: {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
        return StreamingResponse(events(), media_type="text/event-stream")
    response = Response(json.dumps({"id": "c", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": answer}, "finish_reason": "stop"}]}), media_type="application/json")
    response.raw_headers.append((b"x-upstream-note", "café ☕".encode()))  # UTF-8 bytes, not Latin-1
    return response


@pytest.fixture(scope="module")
def base(minilm_dir):
    upstream = UvicornThread(Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])).start()
    gate = HaluGate(_settings(), **{**fakes(minilm_dir), "detector": FlagEverything(minilm_dir)})
    app = create_app(gate, ServeSettings(upstream=upstream.url + "/v1"), auth_tokens=[])
    server = start_service(app)
    yield server.url
    server.stop()
    upstream.stop()


def _raw_head(base: str, body: dict, path: str = "/v1/chat/completions") -> bytes:
    """The response head as bytes off the socket (no client library in between to tidy it)."""
    host, port = base.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                     f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode() + payload)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


def test_answer_with_crlf_set_cookie_cannot_inject_a_header(base):
    head = _raw_head(base, {"model": "m", "messages": REQUEST})
    lines = head.split(b"\r\n")
    names = [line.split(b":", 1)[0].lower() for line in lines[1:]]
    assert lines[0].startswith(b"HTTP/1.1 200")
    assert b"set-cookie" not in names and b"x-injected" not in names
    assert not any(line.startswith(b"<html>") or not line for line in lines)  # no header block ended early
    spans = [line for line in lines if line.lower().startswith(HEADER_SPANS.encode() + b":")]
    assert len(spans) == 1 and all(32 <= c < 127 for c in spans[0])
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": REQUEST})
    assert "set-cookie" not in r.headers and "x-injected" not in r.headers
    assert "Set-Cookie: session=evil; X-Injected: 1; <html>" in r.headers[HEADER_SPANS]  # text, in one value
    assert r.json()["choices"][0]["message"]["content"] == INJECT  # the body is the upstream's, untouched
    # the same answer through /v1/detect
    r = httpx.post(base + "/v1/detect", json={"context": CONTEXT, "question": "How tall?", "answer": INJECT})
    assert r.status_code == 200 and "set-cookie" not in r.headers and "x-injected" not in r.headers
    assert r.headers[HEADER_SPANS] == r.json()["headers"][HEADER_SPANS]


def test_long_non_ascii_spans_are_cut_and_flagged(base):
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": [
        {"role": "user", "content": "long?"}, REQUEST[1]]})
    value = r.headers[HEADER_SPANS]
    assert len(value) <= MAX_SPANS_HEADER_CHARS and value.endswith("...") and value.isascii()
    assert r.headers[HEADER_SPANS_TRUNCATED] == "true" and "%C3%A9" in value


def test_lone_surrogate_from_the_caller_is_400_naming_the_field(base):
    body = b'{"model": "m", "messages": [{"role": "user", "content": "How tall \\ud800?"}]}'
    r = httpx.post(base + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content"
    r = httpx.post(base + "/v1/detect", content=b'{"context": "c", "answer": "\\udfff"}',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "answer"


def test_lone_surrogate_from_the_upstream_is_unavailable_not_a_500(base):
    """The upstream's "\\ud800" made the JSON response fail to encode (a 500 before json_bytes)."""
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": [
        {"role": "user", "content": "surrogate"}, REQUEST[1]]})
    assert r.status_code == 200 and r.headers["x-vsr-verification-status"] == "unavailable"
    assert json.loads(r.content)["choices"][0]["message"]["content"] == "It is \ud800 500 m."  # escaped, as sent


def test_utf8_upstream_header_passes_byte_for_byte_not_a_500(base):
    """httpx decodes a UTF-8 header value to text that Starlette cannot encode as Latin-1 (a 500 before)."""
    head = _raw_head(base, {"model": "m", "messages": REQUEST})
    assert head.startswith(b"HTTP/1.1 200") and "x-upstream-note: café ☕".encode() in head


def test_stream_with_injection_keeps_headers_clean(base):
    with httpx.stream("POST", base + "/v1/chat/completions",
                      json={"model": "m", "messages": REQUEST, "stream": True}) as r:
        text = r.read().decode()
    assert r.status_code == 200 and "set-cookie" not in r.headers
    final = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {") and "halugate" in line]
    assert final and "Set-Cookie" in final[0]["halugate"]["headers"][HEADER_SPANS]


@pytest.mark.parametrize("path", ["/v1/detect", "/v1/chat/completions"])
def test_json_nested_100000_deep_is_400_not_a_500(base, path):
    """`[` x 100,000 (200 KB, under max_body_bytes): json.loads raised RecursionError, which became a 500."""
    r = httpx.post(base + path, content=b"[" * 100_000 + b"]" * 100_000, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    assert r.json()["error"]["message"] == "body: JSON nested deeper than the parser allows"
