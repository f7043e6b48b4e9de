"""The ASGI app (Starlette): HaluGate in front of an OpenAI-compatible server, plus direct detection.

    POST /v1/chat/completions   forwarded upstream; the answer is checked and the decision's action applied
    POST /v1/detect             {context, question, answer} | {messages[, answer][, documents]} | a list of them
    GET  /healthz               alive
    GET  /readyz                models loaded and a warm-up inference done (503 until then, or with the reason)
    GET  /metrics               Prometheus text
    GET  /openapi.json          this service's OpenAPI 3.1 description (inference.serve.openapi)
    *    /v1/{path}             anything else under /v1 (e.g. /v1/models) is forwarded as it is

The detection result travels as x-vsr-* headers (plus x-halugate-status, and x-halugate-blocked when the
answer was withheld), and for the `body` and `block` actions also as a `halugate` field of the JSON. A stream
passes through as it comes and ends with one extra chunk per checked choice (`choices: []`, `halugate: {...}`,
`halugate_index`) before `[DONE]`; headers cannot follow a started body, so when an answer may be blocked
(an action `block`, or fail_mode closed) the stream is buffered, checked, and then sent with its headers.
Modules: app (this: state, /v1/detect, probes, metrics, routing), proxy (the chat completions flow), upstream
(headers, failure mapping, SSE), batching, metrics, errors, config; __main__ is the CLI. See docs/serve.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import time
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inference.actions import apply_actions
from inference.messages import DetectInput, InputError, parse_input
from inference.result import Result
from inference.serve import upstream as up
from inference.serve.batching import DetectTimeout, MicroBatcher, Overloaded, detect_each
from inference.serve.config import ServeSettings
from inference.serve.errors import HTTPError, bad_request, worst
from inference.serve.metrics import CONTENT_TYPE, Metrics
from inference.serve.openapi import openapi_schema
from inference.serve.proxy import ChatProxy
from inference.serve.upstream import JSONResponse
from inference.windowing import InputTooLongError

log = logging.getLogger("halugate.serve")

WARMUP = {"context": "The Eiffel Tower was built from 1887 to 1889. It is 330 meters tall.",
          "question": "When was the Eiffel Tower built?", "answer": "It was built in 1950 and is 500 meters tall."}


class Service(ChatProxy):
    """State of one running service: the gate, the batcher, the upstream client, readiness and metrics."""

    def __init__(self, gate, cfg: ServeSettings, *, auth_tokens: list[str] | None = None,
                 upstream_api_key: str | None = None):
        self.gate, self.cfg = gate, cfg
        m = gate.settings.hallucination_mitigation
        self.fail_mode = m.fail_mode
        self.may_block = m.fail_mode == "closed" or any(
            (d.plugin() is not None and d.plugin().hallucination_action == "block") for d in gate.settings.decisions)
        self.metrics = Metrics()
        self.metrics.observe_models(getattr(gate, "runners", None))  # CPU + precision decisions in /metrics
        self.batcher = MicroBatcher(lambda items: detect_each(gate, items),
                                    max_batch=cfg.max_batch if cfg.batching else 1,
                                    max_wait_ms=cfg.max_wait_ms if cfg.batching else 0.0,
                                    max_queue=cfg.max_queue, on_batch=self.metrics.observe_batch)
        self.tokens = cfg.auth_tokens() if auth_tokens is None else list(auth_tokens)
        self.api_key = upstream_api_key if upstream_api_key is not None else cfg.upstream_api_key()
        self.client: httpx.AsyncClient | None = None
        self.ready = False
        self.ready_error: str | None = None
        self._warmup: asyncio.Task | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.batcher.start()
        if self.cfg.upstream:
            self.client = httpx.AsyncClient(
                base_url=self.cfg.upstream.rstrip("/") + "/", trust_env=False,
                timeout=httpx.Timeout(self.cfg.upstream_timeout_s or None,
                                      connect=self.cfg.upstream_connect_timeout_s or None),
                limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256,
                                    keepalive_expiry=2.0))  # under uvicorn's 5 s: no reuse-while-closing race
        self._warmup = asyncio.create_task(self._warm_up(), name="halugate-warmup")

    async def stop(self) -> None:
        if self._warmup is not None and not self._warmup.done():
            self._warmup.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warmup
        await self.batcher.stop()
        if self.client is not None:
            await self.client.aclose()

    async def _warm_up(self) -> None:
        try:
            out = (await self.batcher.run_in_worker(detect_each, self.gate, [parse_input(WARMUP)]))[0]
        except Exception as exc:  # noqa: BLE001
            out = exc
        if isinstance(out, Exception):
            self.ready_error = f"warm-up failed: {type(out).__name__}: {out}"
        elif self.gate.load_errors:
            self.ready_error = "models not loaded: " + "; ".join(f"{k}: {v}" for k, v in self.gate.load_errors.items())
        elif out.status == "unavailable":
            self.ready_error = "warm-up unavailable: " + "; ".join(e["message"] for e in out.errors)
        else:
            self.ready = True
        if self.ready_error:
            log.warning("not ready: %s", self.ready_error)

    # ---- request plumbing --------------------------------------------------------------------------------------

    def authorize(self, request: Request) -> bool:
        """Checks the service token when auth is on. True when the caller's Authorization header carried it
        (it is then not forwarded upstream)."""
        if not self.tokens:
            return False
        key = request.headers.get("x-halugate-api-key")
        consumed = key is None
        if key is None:
            scheme, _, key = request.headers.get("authorization", "").partition(" ")
            key = key.strip() if scheme.lower() == "bearer" else ""
        if not key or not any(hmac.compare_digest(key.encode(), t.encode()) for t in self.tokens):
            raise HTTPError(401, up.error_body("missing or invalid service token (Authorization: Bearer ... or "
                                               "x-halugate-api-key)", "authentication_error", 401,
                                               "authorization"),
                            {"www-authenticate": "Bearer"})
        return consumed

    async def read_body(self, request: Request) -> bytes:
        limit = self.cfg.max_body_bytes
        declared = request.headers.get("content-length")
        too_large = HTTPError(413, up.error_body(f"body: over {limit} bytes (serve.max_body_bytes)",
                                                 "request_too_large", 413, "body"))
        if declared is not None:
            try:
                if int(declared) > limit:
                    raise too_large
            except ValueError:
                raise bad_request("content-length: not a number") from None
        parts, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            parts.append(chunk)
        return b"".join(parts)

    @staticmethod
    def parse_json(raw: bytes) -> Any:
        if not raw.strip():
            raise bad_request("body: empty; expected a JSON object")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"body: invalid JSON ({exc})") from None
        except RecursionError:
            raise bad_request("body: JSON nested deeper than the parser allows") from None

    def overloaded(self) -> HTTPError:
        self.metrics.rejected.inc()
        return HTTPError(503, up.error_body("detection queue full; retry later", "overloaded", 503),
                         {"retry-after": str(self.cfg.retry_after_s)})

    def upstream_failed(self, failure: up.UpstreamFailure) -> HTTPError:
        self.metrics.upstream_errors.labels(failure.kind).inc()
        log.warning("upstream failure: %s", failure.message)
        return HTTPError(failure.status, failure.body())

    def pass_error(self, resp: httpx.Response, body: bytes) -> Response:
        """An upstream error answer, passed through with its status and body."""
        self.metrics.upstream_errors.labels(f"status_{resp.status_code // 100}xx").inc()
        return Response(body, status_code=resp.status_code, headers=up.response_headers(resp.headers),
                        media_type=resp.headers.get("content-type"))

    def upstream_headers(self, request: Request, consumed: bool) -> dict[str, str]:
        has_auth = "authorization" in request.headers and not consumed
        return up.request_headers(request.headers, drop_authorization=consumed,
                                  api_key=None if has_auth else self.api_key)

    def require_upstream(self) -> httpx.AsyncClient:
        if self.client is None:
            raise HTTPError(503, up.error_body("no upstream configured (--upstream / serve.upstream); only "
                                               "/v1/detect is served", "no_upstream", 503))
        return self.client

    # ---- detection ---------------------------------------------------------------------------------------------

    def unavailable(self, answer: str, exc: BaseException) -> Result:
        """A detection that could not run (timeout, refused input, crash): unavailable, fail_mode applied."""
        stage = "context" if isinstance(exc, (InputError, InputTooLongError)) else "service"
        r = Result(status="unavailable", reason="model_unavailable",
                   errors=[{"stage": stage, "message": f"{type(exc).__name__}: {exc}"}])
        return apply_actions(r, answer, None, self.fail_mode)

    async def detect_answers(self, base: DetectInput, answers: dict[int, str | None],
                             overload: str = "raise") -> dict[int, Result]:
        """Check each choice's answer (None: a tool call, nothing to check) against the request's context."""
        keys = [i for i, a in answers.items() if a is not None]
        if not keys:
            return {}
        inputs = [DetectInput(answer=answers[i], context=base.context, question=base.question) for i in keys]
        try:
            outs = await self.batcher.submit(inputs, timeout=self.cfg.detect_timeout_s)
        except Overloaded as exc:
            if overload == "raise":
                raise self.overloaded() from None
            self.metrics.rejected.inc()
            outs = [exc] * len(inputs)
        except DetectTimeout as exc:
            outs = [exc] * len(inputs)
        results = {}
        for i, item, out in zip(keys, inputs, outs):
            result = self.unavailable(item.answer, out) if isinstance(out, BaseException) else out
            self.metrics.observe_result(result)
            results[i] = result
        return results

    @staticmethod
    def result_headers(results: dict[int, Result]) -> dict[str, str]:
        r = worst(results)
        if r is None:
            return {}
        headers = {**r.headers, "x-halugate-status": r.status}
        if r.blocked:
            headers["x-halugate-blocked"] = "true"
        return headers

    # ---- endpoints ---------------------------------------------------------------------------------------------

    async def detect(self, request: Request) -> Response:
        self.authorize(request)
        payload = self.parse_json(await self.read_body(request))
        single = isinstance(payload, dict)
        if not single and not (isinstance(payload, list) and payload):
            raise bad_request("body: expected an object ({context, question, answer} or {messages[, answer]}) or "
                              "a non-empty list of them")
        items = [payload] if single else payload
        inputs = []
        for i, item in enumerate(items):
            where = "" if single else f"[{i}]"
            pre = f"{where}." if where else ""
            if isinstance(item, dict) and item.get("messages") is not None and item.get("answer") is not None:
                if not isinstance(item["messages"], list):
                    raise bad_request(f"{pre}messages: expected a list of message objects")
                if not isinstance(item["answer"], str):
                    raise bad_request(f"{pre}answer: expected a string, got {type(item['answer']).__name__}")
                answer = item["answer"]
                item = {k: v for k, v in item.items() if k != "answer"}
                item["messages"] = [*item["messages"], {"role": "assistant", "content": answer}]
            try:
                inputs.append(parse_input(item, where))
            except InputError as exc:
                raise bad_request(str(exc)) from None
        try:
            outs = await self.batcher.submit(inputs, timeout=self.cfg.detect_timeout_s)
        except Overloaded:
            raise self.overloaded() from None
        except DetectTimeout as exc:
            outs = [exc] * len(inputs)
        results = []
        for i, (item, out) in enumerate(zip(inputs, outs)):
            if isinstance(out, (InputError, InputTooLongError)):
                message = re.sub(r"^inputs\[\d+\]", f"[{i}]" if not single else "input", str(out))
                raise bad_request(message, "input_too_long" if isinstance(out, InputTooLongError) else
                                  "invalid_request_error")
            result = self.unavailable(item.answer, out) if isinstance(out, BaseException) else out
            self.metrics.observe_result(result)
            results.append(result)
        if single:
            return JSONResponse(results[0].to_dict(), headers=self.result_headers({0: results[0]}))
        return JSONResponse([r.to_dict() for r in results], headers=self.result_headers(dict(enumerate(results))))

    async def forward(self, request: Request) -> Response:
        """Any other /v1 route, passed through unchanged (no detection)."""
        consumed = self.authorize(request)
        client = self.require_upstream()
        raw = await self.read_body(request)
        req = client.build_request(request.method, request.path_params["path"], params=request.query_params,
                                   content=raw, headers=self.upstream_headers(request, consumed))
        try:
            resp = await client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise self.upstream_failed(up.failure_from(exc)) from None

        async def body():
            try:
                async for chunk in resp.aiter_bytes():
                    yield chunk
            except httpx.HTTPError as exc:
                self.metrics.upstream_errors.labels(up.failure_from(exc).kind).inc()
            finally:
                await resp.aclose()

        return StreamingResponse(body(), status_code=resp.status_code, headers=up.response_headers(resp.headers),
                                 media_type=resp.headers.get("content-type"))

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_schema())

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        if self.ready:
            return JSONResponse({"ready": True, "batching": self.cfg.batching, "upstream": bool(self.client)})
        return JSONResponse({"ready": False, "reason": self.ready_error or "warming up",
                             "load_errors": dict(self.gate.load_errors)}, status_code=503)

    async def metrics_text(self, request: Request) -> Response:
        self.authorize(request)
        self.metrics.queue_depth.set(self.batcher.depth)
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    # ---- routing -----------------------------------------------------------------------------------------------

    def endpoint(self, route: str, handler):
        metrics = self.metrics

        async def run(request: Request) -> Response:
            t0 = time.perf_counter()
            metrics.in_flight.inc()
            try:
                response = await handler(request)
            except HTTPError as exc:
                response = JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)
            except Exception:
                log.exception("%s failed", route)
                response = JSONResponse(up.error_body("internal error", "internal_error", 500), status_code=500)

            def done() -> None:
                metrics.in_flight.dec()
                metrics.requests.labels(route, str(response.status_code)).inc()
                metrics.request_seconds.labels(route).observe(time.perf_counter() - t0)

            if isinstance(response, StreamingResponse):
                inner = response.body_iterator

                async def counted():
                    try:
                        async for part in inner:
                            yield part
                    finally:
                        done()

                response.body_iterator = counted()
            else:
                done()
            return response

        return run

    def routes(self) -> list[Route]:
        e = self.endpoint
        return [
            Route("/v1/chat/completions", e("chat_completions", self.chat), methods=["POST"]),
            Route("/v1/detect", e("detect", self.detect), methods=["POST"]),
            Route("/healthz", e("healthz", self.healthz), methods=["GET"]),
            Route("/readyz", e("readyz", self.readyz), methods=["GET"]),
            Route("/metrics", e("metrics", self.metrics_text), methods=["GET"]),
            Route("/openapi.json", e("openapi", self.openapi), methods=["GET"]),
            Route("/v1/{path:path}", e("forward", self.forward),
                  methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ]


def create_app(gate, cfg: ServeSettings | None = None, **kwargs) -> Starlette:
    """The ASGI app for a HaluGate (`inference.detect.HaluGate`, runners may be injected)."""
    service = Service(gate, cfg or ServeSettings(), **kwargs)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # no route (404) or a method the route does not take (405): the same JSON error as every other answer
        param = "method" if exc.status_code == 405 else "path"
        return JSONResponse(up.error_body(f"{param}: {exc.detail} ({request.method} {request.url.path})",
                                          "invalid_request_error", exc.status_code, param),
                            status_code=exc.status_code, headers=exc.headers)

    app = Starlette(routes=service.routes(), lifespan=lifespan,
                    exception_handlers={StarletteHTTPException: http_error})
    app.state.service = service
    return app
