"""Schema-driven fuzzing of inference.serve: schemathesis generates requests from the service's own
`/openapi.json` (valid ones, and ones that break the schema) and sends them to the real server (uvicorn on a
free loopback port) in front of a loopback upstream that always answers. Checks on every response: no 5xx,
the status is one the description lists, the body and the declared headers match their schemas, a request
that breaks the schema is refused with a 4xx, and every 4xx is an OpenAI-style JSON error naming the field
(`error.param`). The models are the scripted fake runners (tests/detect_helpers.py).

Examples per operation and mode: HALUGATE_SCHEMA_EXAMPLES (default 40 in CI; the `slow` long run,
HALUGATE_LONG_RUNS=1, 300)."""

from __future__ import annotations

import json
import os
from collections import Counter

import httpx
import pytest
from detect_helpers import fakes
from serve_upstream import UvicornThread, start_service
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from inference.config import from_dict
from inference.detect import HaluGate
from inference.result import Result
from inference.serve import ServeSettings, create_app
from inference.serve.openapi import SCHEMAS, openapi_schema
from inference.settings import InferenceSettings

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

def header_settings() -> InferenceSettings:
    """Every fact-seeking answer is checked, verdicts go out as x-vsr-* headers."""
    return from_dict(InferenceSettings, {"decisions": [{
        "name": "fact_check", "priority": 100,
        "rules": {"operator": "OR", "conditions": [{"type": "fact_check", "name": "needs_fact_check"}]},
        "plugins": [{"type": "hallucination", "configuration": {"hallucination_action": "header",
                                                                "unverified_factual_action": "header"}}]}]})


ANSWER = "The Eiffel Tower was built in 1950 and is 500 meters tall.\r\nSet-Cookie: x=1"


async def _chat(request: Request) -> Response:
    """Any chat request gets the same answer (JSON, or a stream when asked): the upstream never fails here, so
    every 5xx would be the service's own."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        body = {}
    if isinstance(body, dict) and body.get("stream") is True:
        async def events():
            for piece in (ANSWER[:20], ANSWER[20:]):
                yield f"data: {json.dumps({'id': 'c', 'choices': [{'index': 0, 'delta': {'content': piece}}]})}\n\n"
            yield ('data: {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
                   "data: [DONE]\n\n")
        return StreamingResponse(events(), media_type="text/event-stream")
    return JSONResponse({"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def server(minilm_dir):
    upstream = UvicornThread(Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])).start()
    gate = HaluGate(header_settings(), **fakes(minilm_dir))
    app = create_app(gate, ServeSettings(upstream=upstream.url + "/v1", max_body_bytes=262_144), auth_tokens=[])
    service = start_service(app)
    yield service.url
    service.stop()
    upstream.stop()


def _error_names_the_field(ctx, response, case) -> None:
    """Every 4xx: an OpenAI-style JSON error whose `param` names the field and whose message starts with it."""
    if not 400 <= response.status_code < 500:
        return
    body = json.loads(response.content)
    error = body["error"]
    assert isinstance(error["param"], str) and error["param"], f"4xx without error.param: {body}"
    assert error["message"].startswith(error["param"]), f"message does not name {error['param']!r}: {body}"


def _headers_are_safe(ctx, response, case) -> None:
    """No header value the service set carries a control or non-ASCII character, or is over 1024 characters."""
    for name, values in response.headers.items():  # schemathesis: name -> list of values
        for value in values:
            if name.lower().startswith(("x-vsr-", "x-halugate-")):
                assert value.isascii() and value.isprintable() and len(value) <= 1024, (name, value)
    assert "set-cookie" not in {name.lower() for name in response.headers}


def _run(base: str, examples: int) -> dict:
    from hypothesis import HealthCheck, given, settings
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi import checks as oa

    checks = [oa.status_code_conformance, oa.content_type_conformance, oa.response_schema_conformance,
              oa.response_headers_conformance, oa.negative_data_rejection, _error_names_the_field,
              _headers_are_safe]
    from schemathesis.checks import not_a_server_error

    checks.insert(0, not_a_server_error)
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    stats: dict = {"operations": 0, "requests": 0, "by_status": Counter()}
    for result in schema.get_all_operations():
        operation = result.ok()
        stats["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode == GenerationMode.NEGATIVE and operation.method.upper() == "GET":
                continue  # no parameters, no body: nothing to break
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            def check(case):
                response = case.call(base_url=base, timeout=30)
                stats["requests"] += 1
                stats["by_status"][response.status_code] += 1
                case.validate_response(response, checks=checks)

            check()
    return stats


def _report(stats: dict) -> None:
    print(f"\nschemathesis: {stats['operations']} operations, {stats['requests']} requests, by status "
          f"{dict(sorted(stats['by_status'].items()))}, 5xx {sum(n for s, n in stats['by_status'].items() if s >= 500)}")


def test_openapi_describes_every_result_field():
    """The Result schema lists exactly the keys Result.to_dict() writes (a new key must be described)."""
    assert set(SCHEMAS["Result"]["properties"]) == set(Result().to_dict())
    assert set(SCHEMAS["Result"]["required"]) == set(Result().to_dict())
    paths = openapi_schema()["paths"]
    assert {"/v1/detect", "/v1/chat/completions", "/healthz", "/readyz", "/metrics"} <= set(paths)


def test_openapi_is_served_and_unknown_routes_are_json_errors(server):
    r = httpx.get(server + "/openapi.json")
    assert r.status_code == 200 and r.json()["openapi"].startswith("3.1")
    r = httpx.get(server + "/nowhere")
    assert r.status_code == 404 and r.json()["error"]["param"] == "path"
    r = httpx.delete(server + "/healthz")
    assert r.status_code == 405 and r.json()["error"]["param"] == "method"


def test_schemathesis_finds_no_5xx_and_no_schema_violation(server):
    stats = _run(server, int(os.environ.get("HALUGATE_SCHEMA_EXAMPLES", "40")))
    _report(stats)
    assert stats["operations"] == 5 and stats["requests"] > 0
    assert not any(s >= 500 for s in stats["by_status"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("HALUGATE_LONG_RUNS") != "1", reason="the long run: HALUGATE_LONG_RUNS=1")
def test_schemathesis_long_run(server):
    stats = _run(server, 300)
    _report(stats)
    assert not any(s >= 500 for s in stats["by_status"])
