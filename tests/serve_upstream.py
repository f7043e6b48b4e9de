"""A loopback OpenAI-compatible upstream for inference.serve's tests and benchmark, and a uvicorn-in-a-thread helper.

The upstream answers `POST /v1/chat/completions` (JSON or SSE stream, `n` choices, `stream_options.include_usage`)
and `GET /v1/models`. What it does is chosen per request by the `model` field, so one server covers every case:

    (anything else)   the answer: `answers[<substring of the last user message>]`, else `default_answer`
    fail-500 / fail-429 / fail-<code>   that status with an OpenAI error body (429 with Retry-After: 1)
    slow-<seconds>    the normal answer after that delay
    truncate          a body cut short (Content-Length larger than what is sent; a stream stops mid-answer)
    garbage           200 with a body that is not JSON
    tools             an assistant message that only calls a tool (content null)

    python -m tests.serve_upstream [--latency 0.0] [--answer TEXT]   # its own process; prints its URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

EIFFEL_ANSWER = "The Eiffel Tower was built in 1950 and is about 500 meters tall. It stands in Paris, France."


class Truncated(Response):
    """Declares more bytes than it sends, then closes the connection."""

    async def __call__(self, scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")]})
        await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-cut", "choices": [{"ind',
                    "more_body": False})


class FakeUpstream:
    def __init__(self, answers: dict[str, str] | None = None, default_answer: str = EIFFEL_ANSWER,
                 latency: float = 0.0):
        self.answers = answers or {}
        self.default_answer = default_answer
        self.latency = latency
        self.requests: list[dict] = []  # {"path", "headers", "body"}
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                     Route("/v1/models", self.models, methods=["GET"])])

    def answer_for(self, body: dict) -> str:
        users = [m.get("content") for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
        prompt = users[-1] if users and isinstance(users[-1], str) else ""
        for key, text in self.answers.items():
            if key in prompt:
                return text
        return self.default_answer

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "loopback", "object": "model", "owned_by": "tests"}]})

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append({"path": request.url.path, "headers": dict(request.headers), "body": body})
        model = str(body.get("model", ""))
        if self.latency:
            await asyncio.sleep(self.latency)
        if model.startswith("fail-"):
            code = int(model.split("-", 1)[1])
            headers = {"retry-after": "1"} if code == 429 else {}
            return JSONResponse({"error": {"message": f"scripted {code}", "type": "server_error", "code": code}},
                                status_code=code, headers=headers)
        if model.startswith("slow-"):
            await asyncio.sleep(float(model.split("-", 1)[1]))
        if model == "garbage":
            return Response(b"<html>not json</html>", media_type="application/json")
        stream = bool(body.get("stream"))
        if model == "truncate" and not stream:
            return Truncated()
        n = int(body.get("n") or 1)
        text = self.answer_for(body)
        created = int(time.time())
        ident = f"chatcmpl-{len(self.requests)}"
        if model == "tools":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}
            return JSONResponse({"id": ident, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
        if not stream:
            return JSONResponse({
                "id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                            for i in range(n)],
                "usage": {"prompt_tokens": 10, "completion_tokens": len(text.split()), "total_tokens": 0}})
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._sse(ident, created, model, text, n, usage, cut=model == "truncate"),
                                 media_type="text/event-stream")

    async def _sse(self, ident, created, model, text, n, usage, cut=False):
        def chunk(choices, **extra):
            data = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": choices, **extra}
            return f"data: {json.dumps(data)}\n\n".encode()

        words = text.split(" ")
        for i in range(n):
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for k, word in enumerate(words):
            if cut and k == len(words) // 2:
                return  # the stream stops mid-answer: no finish_reason, no [DONE]
            piece = word if k == 0 else " " + word
            for i in range(n):
                yield chunk([{"index": i, "delta": {"content": piece}, "finish_reason": None}])
        for i in range(n):
            yield chunk([{"index": i, "delta": {}, "finish_reason": "stop"}])
        if usage:
            yield chunk([], usage={"prompt_tokens": 10, "completion_tokens": len(words), "total_tokens": 0})
        yield b"data: [DONE]\n\n"


class UvicornThread:
    """A real uvicorn server on a free loopback port, in a daemon thread (signals stay with the main thread)."""

    def __init__(self, app, **config):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    access_log=False, lifespan="on", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout: float = 30.0) -> UvicornThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    @property
    def url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def start_service(app, timeout: float = 20.0) -> UvicornThread:
    """Start an inference.serve app on loopback and wait until its warm-up has finished (ready, or failed)."""
    server = UvicornThread(app).start()
    service = app.state.service
    deadline = time.monotonic() + timeout
    while not (service.ready or service.ready_error) and time.monotonic() < deadline:
        time.sleep(0.01)
    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--answer", default=EIFFEL_ANSWER)
    args = parser.parse_args(argv)
    server = UvicornThread(FakeUpstream(default_answer=args.answer, latency=args.latency).app).start()
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
