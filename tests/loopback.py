"""Loopback HTTP emulators for tests and benchmarks: real servers on 127.0.0.1, in a thread.

- `GeminiEmulator`: the Gemini REST `models/{model}:generateContent` endpoint (Developer API and Vertex
  paths, any API version), for the real google-genai client via `http_options.base_url`.
- `OpenAIEmulator`: an OpenAI-compatible `/v1/chat/completions` (+ `/v1/models`) endpoint.

Both answer from a script: a list of replies consumed in order (shared by all clients, thread-safe) or a
callable `fn(request) -> str | Reply` (e.g. keyed on the prompt). A `str` is a successful text answer; a
`Reply` can carry a status code, an error body, headers and a delay. Every request is logged in
`server.requests` (method, path, headers, JSON body, prompt, arrival time). `latency` delays every reply.

    with OpenAIEmulator(["4", Reply.rate_limited(retry_after=2), "Paris"], latency=0.01) as server:
        backend = make_backend("openai", model="m", base_url=server.url + "/v1")
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict
    body: Any
    prompt: str | None
    time: float


@dataclass
class Reply:
    """A scripted reply. `text` set: a success in the emulator's format; else `status` with `body`."""

    text: str | None = None
    status: int = 200
    body: Any = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0

    # -- Gemini-style errors (google.rpc.Status JSON), also accepted by the OpenAI emulator -------------
    @classmethod
    def rate_limited(cls, retry_delay: str | None = None, *, retry_after: float | None = None) -> Reply:
        """429 RESOURCE_EXHAUSTED; `retry_delay` ("7s") goes in RetryInfo, `retry_after` in the header."""
        details: list = [{
            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}],
        }]
        if retry_delay is not None:
            details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay})
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        body = {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                          "status": "RESOURCE_EXHAUSTED", "details": details}}
        return cls(status=429, body=body, headers=headers)

    @classmethod
    def server_error(cls, code: int = 500) -> Reply:
        status = {500: "INTERNAL", 503: "UNAVAILABLE", 502: "BAD_GATEWAY", 504: "DEADLINE_EXCEEDED"}.get(code, "ERROR")
        return cls(status=code, body={"error": {"code": code, "message": f"scripted {code}", "status": status}})

    @classmethod
    def error(cls, code: int, message: str = "scripted error") -> Reply:
        return cls(status=code, body={"error": {"code": code, "message": message, "status": "ERROR"}})

    @classmethod
    def slow(cls, text: str, delay: float) -> Reply:
        return cls(text=text, delay=delay)


Script = Iterable[str | Reply] | Callable[[Request], str | Reply] | None


class LoopbackServer:
    """Base: threading HTTP/1.1 server with a scripted reply source and a request log."""

    def __init__(self, script: Script = None, *, latency: float = 0.0, default: Callable | None = None):
        self.latency = latency
        self.requests: list[Request] = []
        self.connections = 0  # TCP connections accepted (keep-alive reuse shows as fewer than requests)
        self._lock = threading.Lock()
        self._fn: Callable | None = None
        self._queue: collections.deque = collections.deque()
        self.default = default
        self.set_script(script)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -----------------------------------------------------------------------------
    def set_script(self, script: Script) -> None:
        with self._lock:
            self._fn = script if callable(script) else None
            self._queue = collections.deque([] if script is None or callable(script) else list(script))

    def push(self, *replies: str | Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def _next_reply(self, request: Request) -> str | Reply:
        if self._fn is not None:
            return self._fn(request)
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.default is not None:
            return self.default(request)
        return Reply.error(500, "loopback script exhausted")

    @property
    def prompts(self) -> list[str | None]:
        with self._lock:
            return [r.prompt for r in self.requests]

    # -- what subclasses implement -------------------------------------------------------------
    def route(self, method: str, path: str) -> str | None:
        """A route name for (method, path), or None for 404."""
        raise NotImplementedError

    def extract_prompt(self, route: str, body: Any) -> str | None:
        return None

    def success_body(self, route: str, request: Request, text: str) -> Any:
        raise NotImplementedError

    # -- serving -------------------------------------------------------------------------------
    def _handle(self, method: str, path: str, headers: dict, raw: bytes) -> tuple[int, dict, bytes]:
        route = self.route(method, path)
        if route is None:
            return 404, {}, json.dumps({"error": {"code": 404, "message": f"no route {method} {path}"}}).encode()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return 400, {}, b'{"error": {"code": 400, "message": "invalid JSON"}}'
        request = Request(method, path, headers, body, self.extract_prompt(route, body), time.monotonic())
        with self._lock:
            self.requests.append(request)
        reply = self._next_reply(request) if route != "static" else Reply(body=self.static_body(path))
        if isinstance(reply, str):
            reply = Reply(text=reply)
        delay = self.latency + reply.delay
        if delay > 0:
            time.sleep(delay)
        if reply.text is not None:
            payload = self.success_body(route, request, reply.text)
            status = 200
        else:
            payload, status = reply.body, reply.status
        return status, reply.headers, json.dumps(payload).encode()

    def static_body(self, path: str) -> Any:
        return {}

    def start(self) -> LoopbackServer:
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms ACK stalls

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, payload = emulator._handle(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw
                )
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: that is what a slow reply tests

            do_GET = do_POST = _serve

            def setup(self):
                super().setup()
                with emulator._lock:
                    emulator.connections += 1

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


_GEMINI_PATH = re.compile(
    r"^/(?P<version>v[^/]+)/(?:projects/[^/]+/locations/[^/]+/publishers/google/)?models/(?P<model>[^/:]+)"
    r":generateContent(?:\?.*)?$"
)


class GeminiEmulator(LoopbackServer):
    """`POST /{version}/models/{model}:generateContent` as the Gemini Developer API (or Vertex) answers it."""

    def route(self, method, path):
        return "generate" if method == "POST" and _GEMINI_PATH.match(path) else None

    def extract_prompt(self, route, body):
        parts = [p.get("text", "") for c in (body or {}).get("contents", []) for p in c.get("parts", [])]
        return "".join(parts)

    def success_body(self, route, request, text):
        model = _GEMINI_PATH.match(request.path).group("model")
        return {
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": len((request.prompt or "").split()),
                              "candidatesTokenCount": len(text.split()), "totalTokenCount": 0},
            "modelVersion": model,
        }


class OpenAIEmulator(LoopbackServer):
    """`POST .../chat/completions` and `GET .../models` as an OpenAI-compatible server answers them."""

    def route(self, method, path):
        path = path.split("?", 1)[0]
        if method == "POST" and path.endswith("/chat/completions"):
            return "chat"
        if method == "GET" and path.endswith("/models"):
            return "static"
        return None

    def static_body(self, path):
        return {"object": "list", "data": [{"id": "loopback", "object": "model", "owned_by": "tests"}]}

    def extract_prompt(self, route, body):
        messages = (body or {}).get("messages") or []
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        content = users[-1] if users else None
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content

    def success_body(self, route, request, text):
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": (request.body or {}).get("model", "loopback"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }


class FakeClock:
    """A manual clock for CallLimits: `sleep`/`asleep` advance it instead of waiting, and are recorded."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds

    async def asleep(self, seconds: float) -> None:
        import asyncio

        self.sleep(seconds)
        await asyncio.sleep(0)


def max_in_window(times: list[float], window: float = 60.0) -> int:
    """The largest number of events inside any half-open window [x, x + window)."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def serve_forever_cli(argv: list[str] | None = None) -> None:
    """`python -m tests.loopback gemini|openai --latency 0.1 --reply B`: a separate emulator process
    (benchmarks use it so the server does not share the client's GIL). Prints its URL, serves until killed."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["gemini", "openai"])
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--reply", default="B")
    args = parser.parse_args(argv)
    cls = GeminiEmulator if args.kind == "gemini" else OpenAIEmulator
    server = cls(default=lambda request: args.reply, latency=args.latency).start()
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    serve_forever_cli()
