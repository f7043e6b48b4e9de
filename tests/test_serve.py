"""inference.serve end to end: the real server (uvicorn, free loopback port) in front of a loopback fake upstream,
called with the official `openai` client and with httpx. The models are the scripted fake runners of
tests/detect_helpers.py (real tokenizer, deterministic verdicts): numbers in the answer that the context lacks
are hallucinated and contradicted, a prompt with "?" is fact-seeking."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from detect_helpers import FailingRunner, FakeDetector, fakes
from serve_upstream import EIFFEL_ANSWER, FakeUpstream, UvicornThread, start_service

from inference.actions import (
    BLOCK_MESSAGE,
    HALLUCINATION_WARNING,
    UNAVAILABLE_BLOCK_MESSAGE,
    UNVERIFIED_WARNING,
)
from inference.config import from_dict
from inference.detect import HaluGate
from inference.labels import DETECTOR_LABELS
from inference.serve import ServeSettings, create_app
from inference.settings import InferenceSettings

REPO = Path(__file__).resolve().parents[1]
EIFFEL = json.loads((REPO / "examples" / "eiffel_messages.json").read_text())
REQUEST = EIFFEL[:3]          # question, tool call, tool result: the upstream supplies the answer
NO_CONTEXT = [{"role": "user", "content": "How tall is the Eiffel Tower?"}]


def settings(action="header", unverified="header", fail_mode="open") -> InferenceSettings:
    return from_dict(InferenceSettings, {
        "hallucination_mitigation": {"fail_mode": fail_mode},
        "decisions": [{"name": "fact_check", "priority": 100,
                       "rules": {"operator": "OR", "conditions": [{"type": "fact_check", "name": "needs_fact_check"}]},
                       "plugins": [{"type": "hallucination", "configuration": {
                           "hallucination_action": action, "unverified_factual_action": unverified}}]}]})


class BlockingDetector(FakeDetector):
    """Holds each model call until released (once `armed`), so a test can fill the queue deterministically."""

    def __init__(self, tokenizer_dir):
        super().__init__(tokenizer_dir)
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def _run_batch(self, ids, mask, types):
        if self.armed:
            self.entered.set()
            assert self.release.wait(30)
        return super()._run_batch(ids, mask, types)


@pytest.fixture(scope="module")
def upstream():
    fake = FakeUpstream(answers={"Write a poem": "Roses are red."})
    with UvicornThread(fake.app) as server:
        fake.url = server.url + "/v1"
        yield fake


@pytest.fixture
def serve(upstream, minilm_dir):
    """serve(action=..., fail_mode=..., runners=..., **ServeSettings) -> (base_url, app.state.service)."""
    started = []

    def start(action="header", unverified="header", fail_mode="open", runners=None, gate=None, auth=None,
              **cfg):
        if gate is None:
            gate = HaluGate(settings(action, unverified, fail_mode), **{**fakes(minilm_dir), **(runners or {})})
        cfg.setdefault("upstream", upstream.url)
        api_key = cfg.pop("upstream_api_key", None)
        app = create_app(gate, ServeSettings(**cfg), auth_tokens=auth or [], upstream_api_key=api_key)
        server = start_service(app)  # returns once the warm-up is done
        started.append(server)
        return server.url, app.state.service

    yield start
    for server in started:
        server.stop()


def client(base, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=kw.pop("api_key", "sk-caller"), max_retries=0, **kw)


def stream_parts(stream) -> tuple[str, list, list]:
    """(content, finish reasons, halugate results) of an openai stream."""
    content, finishes, results = [], [], []
    for chunk in stream:
        extra = chunk.model_extra or {}
        if extra.get("halugate"):
            results.append(extra["halugate"])
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    return "".join(content), finishes, results


# ---- the proxy -------------------------------------------------------------------------------------------------

def test_eiffel_headers_and_unchanged_answer(serve, upstream):
    base, _ = serve()
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=REQUEST)
    h = raw.headers
    assert h["x-vsr-fact-check-needed"] == "true"
    assert h["x-vsr-hallucination-detected"] == "true"
    assert h["x-vsr-hallucination-spans"] == "1950; 500"
    assert h["x-vsr-nli-contradictions"] == "2" and h["x-vsr-max-severity"] == "4"
    assert h["x-halugate-status"] == "ok" and "x-halugate-blocked" not in h
    completion = raw.parse()
    assert completion.choices[0].message.content == EIFFEL_ANSWER  # header action: the body is untouched
    assert "halugate" not in (completion.model_extra or {})
    # the caller's Authorization went upstream as it was
    assert upstream.requests[-1]["headers"]["authorization"] == "Bearer sk-caller"


def test_body_action_annotates_the_json(serve):
    base, _ = serve(action="body")
    completion = client(base).chat.completions.create(model="m", messages=REQUEST)
    content = completion.choices[0].message.content
    assert content.startswith(EIFFEL_ANSWER + "\n\n---\n" + HALLUCINATION_WARNING)
    assert '"1950"' in content  # include_hallucination_details
    result = completion.model_extra["halugate"]
    assert result["schema"] == "halugate.detect/v1" and result["action"] == "body"
    assert [s["text"] for s in result["spans"]] == ["1950", "500"]
    assert all(s["nli_label"] == "contradiction" for s in result["spans"])
    assert completion.choices[0].model_extra["halugate"] == result


def test_block_withholds_the_answer(serve):
    base, _ = serve(action="block")
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=REQUEST)
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter"
    assert choice.message.content.startswith(BLOCK_MESSAGE) and "1950 and" not in choice.message.content
    assert raw.headers["x-halugate-blocked"] == "true" and raw.headers["x-vsr-hallucination-detected"] == "true"
    assert completion.model_extra["halugate"]["blocked"] is True


def test_block_buffers_the_stream(serve):
    base, _ = serve(action="block")
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=REQUEST, stream=True)
    assert raw.headers["x-halugate-stream"] == "buffered"
    assert raw.headers["x-halugate-blocked"] == "true"  # buffered: the headers come before the body
    content, finishes, results = stream_parts(raw.parse())
    assert content.startswith(BLOCK_MESSAGE) and "1950" not in content.split("\n")[0]
    assert "built in 1950" not in content  # no chunk of the withheld answer went out
    assert finishes == ["content_filter"]
    assert len(results) == 1 and results[0]["blocked"] is True


def test_stream_passes_through_and_ends_with_the_result(serve):
    base, _ = serve()
    raw = client(base).chat.completions.with_raw_response.create(
        model="m", messages=REQUEST, stream=True, stream_options={"include_usage": True})
    assert raw.headers["x-halugate-stream"] == "passthrough"
    assert "x-vsr-hallucination-detected" not in raw.headers  # headers cannot follow a started body
    content, finishes, results = stream_parts(raw.parse())
    assert content == EIFFEL_ANSWER and finishes == ["stop"]
    assert len(results) == 1
    assert results[0]["headers"]["x-vsr-hallucination-detected"] == "true"
    assert [s["text"] for s in results[0]["spans"]] == ["1950", "500"]


def test_stream_body_action_appends_the_warning(serve):
    base, _ = serve(action="body")
    content, finishes, results = stream_parts(client(base).chat.completions.create(
        model="m", messages=REQUEST, stream=True))
    assert content == results[0]["answer"]
    assert content.startswith(EIFFEL_ANSWER + "\n\n---\n" + HALLUCINATION_WARNING)
    assert finishes == ["stop"]


def test_unverified_factual(serve):
    base, _ = serve(unverified="body")
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=NO_CONTEXT)
    assert raw.headers["x-vsr-unverified-factual-response"] == "true"
    assert raw.headers["x-vsr-verification-context-missing"] == "true"
    assert "x-vsr-hallucination-detected" not in raw.headers  # nothing to check against: never "clean"
    completion = raw.parse()
    assert completion.choices[0].message.content.endswith(UNVERIFIED_WARNING)
    result = completion.model_extra["halugate"]
    assert result["unverified_factual"] is True and result["hallucination_detected"] is None


def test_not_fact_seeking_passes_unchecked(serve):
    base, _ = serve(action="block")
    raw = client(base).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "Write a poem"}])
    assert raw.parse().choices[0].message.content == "Roses are red."
    assert raw.headers["x-halugate-status"] == "skipped" and "x-vsr-hallucination-detected" not in raw.headers


@pytest.mark.parametrize("fail_mode", ["open", "closed"])
def test_unavailable_detector(serve, minilm_dir, fail_mode):
    broken = FailingRunner(minilm_dir, "token", DETECTOR_LABELS)
    base, _ = serve(fail_mode=fail_mode, runners={"detector": broken})
    ready = httpx.get(base + "/readyz")
    assert ready.status_code == 503 and "simulated model failure" in ready.json()["reason"]
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=REQUEST)
    completion = raw.parse()
    assert raw.headers["x-vsr-verification-status"] == "unavailable"
    assert raw.headers["x-halugate-status"] == "unavailable"
    assert "x-vsr-hallucination-detected" not in raw.headers  # never a silent "clean"
    if fail_mode == "open":
        assert completion.choices[0].message.content == EIFFEL_ANSWER
    else:
        assert completion.choices[0].message.content == UNAVAILABLE_BLOCK_MESSAGE
        assert completion.choices[0].finish_reason == "content_filter"
        assert raw.headers["x-halugate-blocked"] == "true"
    content, _, results = stream_parts(client(base).chat.completions.create(model="m", messages=REQUEST,
                                                                             stream=True))
    assert results[0]["status"] == "unavailable" and results[0]["errors"][0]["stage"] == "detector"
    assert content == (EIFFEL_ANSWER if fail_mode == "open" else UNAVAILABLE_BLOCK_MESSAGE)


def test_missing_model_file_is_unavailable_not_clean(serve, tmp_path):
    gate = HaluGate.from_dirs(detector=tmp_path / "no-such-model", overrides=[])
    base, _ = serve(gate=gate)
    ready = httpx.get(base + "/readyz")
    assert ready.status_code == 503 and "no-such-model" in json.dumps(ready.json())
    assert httpx.get(base + "/healthz").status_code == 200
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=REQUEST)
    assert raw.headers["x-vsr-verification-status"] == "unavailable"
    assert raw.parse().choices[0].message.content == EIFFEL_ANSWER  # fail_mode open (the default)


def test_tool_call_answers_pass_unchecked(serve):
    base, _ = serve(action="block")
    raw = client(base).chat.completions.with_raw_response.create(model="tools", messages=REQUEST)
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "search"
    assert "x-halugate-status" not in raw.headers


def test_n_choices_are_each_checked(serve):
    base, _ = serve(action="body")
    completion = client(base).chat.completions.create(model="m", messages=REQUEST, n=2)
    assert [c.model_extra["halugate"]["hallucination_detected"] for c in completion.choices] == [True, True]


def test_other_v1_routes_are_forwarded(serve):
    base, _ = serve()
    assert [m.id for m in client(base).models.list()] == ["loopback"]


# ---- upstream failures pass through with their status ------------------------------------------------------------

def test_upstream_errors_keep_their_status(serve, upstream):
    base, _ = serve(upstream_timeout_s=0.5)
    c = client(base)
    with pytest.raises(openai.InternalServerError) as err:
        c.chat.completions.create(model="fail-500", messages=REQUEST)
    assert err.value.status_code == 500 and "scripted 500" in str(err.value)
    with pytest.raises(openai.RateLimitError):
        c.chat.completions.create(model="fail-429", messages=REQUEST)
    with httpx.Client(base_url=base) as h:
        body = {"model": "slow-2", "messages": REQUEST}
        assert h.post("/v1/chat/completions", json=body).status_code == 504
        for model in ("truncate", "garbage"):
            r = h.post("/v1/chat/completions", json={"model": model, "messages": REQUEST})
            assert r.status_code == 502, (model, r.text)
        r = h.post("/v1/chat/completions", json={"model": "fail-503", "messages": REQUEST, "stream": True})
        assert r.status_code == 503 and r.json()["error"]["message"] == "scripted 503"
        r = h.post("/v1/chat/completions", json={"model": "truncate", "messages": REQUEST, "stream": True})
        assert r.status_code == 200 and '"upstream_error"' in r.text and "[DONE]" not in r.text
    with pytest.raises(openai.APIError, match="truncated"):
        stream_parts(c.chat.completions.create(model="truncate", messages=REQUEST, stream=True))
    metrics = httpx.get(base + "/metrics").text
    for kind in ("status_5xx", "status_4xx", "timeout", "protocol", "invalid_json"):
        assert f'halugate_upstream_errors_total{{kind="{kind}"}}' in metrics, kind


def test_buffered_stream_truncation_is_502(serve):
    base, _ = serve(action="block")
    r = httpx.post(base + "/v1/chat/completions", json={"model": "truncate", "messages": REQUEST, "stream": True})
    assert r.status_code == 502


def test_unreachable_upstream_is_502(serve):
    from serve_upstream import free_port

    base, _ = serve(upstream=f"http://127.0.0.1:{free_port()}/v1")
    r = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": REQUEST})
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]


# ---- request errors ----------------------------------------------------------------------------------------------

def test_bad_requests_are_400_naming_the_field(serve):
    base, _ = serve()
    cases = [
        (b"{not json", "body"),
        (json.dumps([1, 2]).encode(), "body"),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"model": "m", "messages": [{"role": "user", "content": "q?"}, {"role": "robot"}]}).encode(),
         "messages[1].role"),
        (json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "video", "x": 1}]}]}).encode(),
         "messages[0].content[0].type"),
        (json.dumps({"model": "m", "messages": REQUEST, "stream": "yes"}).encode(), "stream"),
    ]
    with httpx.Client(base_url=base) as h:
        for body, param in cases:
            r = h.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400, body
            assert r.json()["error"]["param"] == param, r.json()
        r = h.post("/v1/detect", json={"context": "c", "answer": 3})
        assert r.status_code == 400 and r.json()["error"]["message"] == "answer: expected a string, got int"
        r = h.post("/v1/detect", json=[{"answer": "a"}, {"messages": [{"role": "user", "content": 5}],
                                                            "answer": "a"}])
        assert r.status_code == 400 and r.json()["error"]["param"] == "[1].messages[0].content"
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\].role"):
        client(base).chat.completions.create(model="m", messages=[{"role": "robot", "content": "x"}])


def test_oversized_body_is_413(serve):
    base, _ = serve(max_body_bytes=2000)
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
    assert httpx.post(base + "/v1/chat/completions", json=big).status_code == 413
    assert httpx.post(base + "/v1/detect", json={"context": "x" * 5000, "answer": "a"}).status_code == 413
    assert httpx.post(base + "/v1/detect", json={"context": "c", "answer": "a"}).status_code == 200


def test_full_queue_is_503_with_retry_after(serve, minilm_dir):
    detector = BlockingDetector(minilm_dir)
    base, service = serve(runners={"detector": detector}, max_queue=1, max_batch=1)
    detector.armed = True
    item = {"context": "It is 330 meters tall.", "question": "How tall?", "answer": "It is 500 meters tall."}
    out = {}

    def call(name):
        out[name] = httpx.post(base + "/v1/detect", json=item, timeout=30)

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert detector.entered.wait(10)  # the first input is in the model
    second = threading.Thread(target=call, args=("second",))
    second.start()
    deadline = time.monotonic() + 10
    while service.batcher.depth < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    third = httpx.post(base + "/v1/detect", json=item)
    assert third.status_code == 503 and third.headers["retry-after"] == "1"
    chat = httpx.post(base + "/v1/chat/completions", json={"model": "m", "messages": REQUEST})
    assert chat.status_code == 503  # rejected before the upstream is called
    detector.release.set()
    first.join(10)
    second.join(10)
    assert out["first"].status_code == 200 and out["second"].status_code == 200
    assert out["second"].json()["hallucination_detected"] is True
    assert "halugate_rejected_total 2.0" in httpx.get(base + "/metrics").text


# ---- /v1/detect, batching, health, metrics, auth, shutdown ----------------------------------------------------------

def test_detect_endpoint_matches_the_library(serve, minilm_dir):
    base, service = serve()
    item = {"context": EIFFEL[2]["content"], "question": EIFFEL[0]["content"], "answer": EIFFEL[3]["content"]}
    r = httpx.post(base + "/v1/detect", json=item)
    assert r.status_code == 200 and r.headers["x-vsr-hallucination-detected"] == "true"
    got = r.json()
    want = json.loads(service.gate.detect(**item).to_json())
    for d in (got, want):
        d.pop("timings_ms")
    assert got == want
    # messages + answer, and a list of inputs
    r = httpx.post(base + "/v1/detect", json={"messages": REQUEST, "answer": EIFFEL[3]["content"]})
    assert r.json()["spans"] == want["spans"]
    r = httpx.post(base + "/v1/detect", json=[item, {"messages": EIFFEL}])
    assert [x["hallucination_detected"] for x in r.json()] == [True, True]


def test_concurrent_requests_share_batches(serve, minilm_dir):
    detector = BlockingDetector(minilm_dir)
    base, service = serve(runners={"detector": detector}, max_batch=16)
    detector.armed = True
    item = {"context": "It is 330 meters tall.", "question": "How tall?", "answer": "It is 500 meters tall."}

    async def burst():
        async with httpx.AsyncClient(base_url=base, timeout=30) as h:
            first = asyncio.create_task(h.post("/v1/detect", json=item))
            while not detector.entered.is_set():
                await asyncio.sleep(0.01)
            rest = [asyncio.create_task(h.post("/v1/detect", json=item)) for _ in range(7)]
            while service.batcher.depth < 7:
                await asyncio.sleep(0.01)
            detector.release.set()
            return await asyncio.gather(first, *rest)

    batches_before = service.batcher.batches
    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 8
    assert all(r.json()["hallucination_detected"] is True for r in responses)
    assert service.batcher.batches - batches_before == 2  # 1 + the 7 that waited, in one batch
    assert "halugate_batch_size_bucket" in httpx.get(base + "/metrics").text


def test_health_ready_and_metrics(serve):
    base, _ = serve()
    assert httpx.get(base + "/healthz").json() == {"status": "alive"}
    assert httpx.get(base + "/readyz").json()["ready"] is True
    client(base).chat.completions.create(model="m", messages=REQUEST)
    text = httpx.get(base + "/metrics").text
    assert 'halugate_requests_total{route="chat_completions",status="200"} 1.0' in text
    assert 'halugate_detections_total{action="header",status="ok"} 1.0' in text
    assert "halugate_hallucinations_total 1.0" in text and "halugate_spans_total 2.0" in text
    for stage in ("sentinel", "detector", "explainer", "total"):
        assert f'halugate_stage_seconds_count{{stage="{stage}"}}' in text


def test_bearer_auth(serve, upstream):
    base, _ = serve(auth=["svc-token"], upstream_api_key="sk-upstream")
    with pytest.raises(openai.AuthenticationError):
        client(base, api_key="wrong").chat.completions.create(model="m", messages=REQUEST)
    assert httpx.post(base + "/v1/detect", json={"answer": "a"}).status_code == 401
    assert httpx.get(base + "/healthz").status_code == 200
    # the service token in Authorization: consumed, the configured upstream key goes upstream instead
    client(base, api_key="svc-token").chat.completions.create(model="m", messages=REQUEST)
    assert upstream.requests[-1]["headers"]["authorization"] == "Bearer sk-upstream"
    # the service token in x-halugate-api-key: the caller's own Authorization passes through
    client(base, api_key="sk-own", default_headers={"x-halugate-api-key": "svc-token"}).chat.completions.create(
        model="m", messages=REQUEST)
    assert upstream.requests[-1]["headers"]["authorization"] == "Bearer sk-own"
    assert "x-halugate-api-key" not in upstream.requests[-1]["headers"]


def test_graceful_shutdown_finishes_in_flight_requests(upstream, minilm_dir):
    gate = HaluGate(settings(), **fakes(minilm_dir))
    app = create_app(gate, ServeSettings(upstream=upstream.url), auth_tokens=[])
    server = UvicornThread(app, timeout_graceful_shutdown=10).start()
    out = {}

    def call():
        out["r"] = httpx.post(server.url + "/v1/chat/completions", json={"model": "slow-1", "messages": REQUEST},
                              timeout=30)

    t = threading.Thread(target=call)
    t.start()
    deadline = time.monotonic() + 10
    while not any(r["body"]["model"] == "slow-1" for r in upstream.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    server.stop()  # what SIGTERM does: stop accepting, finish in-flight requests, then the lifespan shutdown
    t.join(10)
    assert out["r"].status_code == 200 and out["r"].headers["x-vsr-hallucination-detected"] == "true"
    assert not server.thread.is_alive()


def test_detection_timeout_is_unavailable(serve, minilm_dir):
    detector = BlockingDetector(minilm_dir)
    base, _ = serve(runners={"detector": detector}, detect_timeout_s=0.3, fail_mode="closed")
    detector.armed = True
    try:
        r = httpx.post(base + "/v1/detect", json={"context": "It is 330 m.", "question": "How tall?",
                                                  "answer": "It is 500 m."})
        result = r.json()
        assert r.status_code == 200 and result["status"] == "unavailable" and result["blocked"] is True
        assert result["errors"][0]["message"].startswith("DetectTimeout")
    finally:
        detector.release.set()


def test_too_long_input(serve, minilm_dir):
    s = settings()
    s.hallucination_mitigation.hallucination_model.max_context_tokens = 30
    base, _ = serve(gate=HaluGate(s, **fakes(minilm_dir)))
    long_context = "The tower is 330 meters tall. " * 20
    r = httpx.post(base + "/v1/detect", json=[{"context": "It is 330 m.", "answer": "It is 500 m."},
                                              {"context": long_context, "answer": "It is 500 m."}])
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("[1]: the context has")
    # through the proxy the answer already exists: verification is unavailable (fail_mode decides), never clean
    messages = [{"role": "user", "content": "How tall?"}, {"role": "tool", "content": long_context}]
    raw = client(base).chat.completions.with_raw_response.create(model="m", messages=messages)
    assert raw.headers["x-vsr-verification-status"] == "unavailable"
    assert raw.parse().choices[0].message.content == EIFFEL_ANSWER


def test_sse_parser_handles_split_crlf_events():
    from inference.serve.upstream import SSEParser, StreamState

    wire = (b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}\r\n\r\n'
            b': keep-alive\r\n\r\n'
            b'data: {"id": "x", "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}\r\n\r\n'
            b"data: [DONE]\r\n\r\n")
    parser, state, events = SSEParser(), StreamState(), []
    for i in range(len(wire)):  # one byte at a time: every split point
        events.extend(parser.feed(wire[i:i + 1]))
    for event in events:
        state.add(event)
    assert len(events) == 4 and events[1].data is None and events[3].done
    assert state.answers() == {0: "Hello"} and state.complete and state.meta["id"] == "x"
