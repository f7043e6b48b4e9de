"""Backend layer: rate limiter windows, retry waits, concurrency cap, gemini credentials, openai endpoint."""

from __future__ import annotations

import asyncio
import random

import pytest

from eval.backends import (
    BackendConfigError,
    BackendError,
    CallLimits,
    ConcurrencyLimit,
    FatalBackendError,
    RateLimiter,
    RetryPolicy,
    find_retry_delay,
    gemini_client_kwargs,
    make_backend,
    parse_duration,
)
from tests.loopback import FakeClock, GeminiEmulator, OpenAIEmulator, Reply, max_in_window


@pytest.fixture
def gemini_env(monkeypatch):
    for var in ("GOOGLE_GENAI_USE_VERTEXAI", "GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")


def fake_limits(clock: FakeClock, **kwargs) -> CallLimits:
    return CallLimits.create(clock=clock, sleep=clock.sleep, asleep=clock.asleep, **kwargs)


# -- rate limiter --------------------------------------------------------------------------------------

def test_rate_limiter_sync_never_exceeds_rpm_in_any_window():
    clock = FakeClock()
    limiter = RateLimiter(5, clock=clock, sleep=clock.sleep)
    for i in range(23):
        limiter.acquire()
        clock.now += 0.7 * (i % 3)  # uneven arrivals between calls
    assert len(limiter.history) == 23
    assert max_in_window(limiter.history) == 5
    # the limiter only waits when it must: the first 5 go out immediately
    assert limiter.history[4] - limiter.history[0] < 60


def test_rate_limiter_async_tasks_share_one_window():
    clock = FakeClock()
    limiter = RateLimiter(4, clock=clock, sleep=clock.sleep, asleep=clock.asleep)

    async def main():
        await asyncio.gather(*(limiter.aacquire() for _ in range(17)))

    asyncio.run(main())
    assert len(limiter.history) == 17
    assert max_in_window(limiter.history) == 4
    assert max_in_window(limiter.history, window=60.0 - 1e-6) <= 4


def test_rate_limit_holds_for_backend_calls_sync_and_async(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, rpm_limit=3, concurrency=4, max_retries=2)
    with GeminiEmulator(default=lambda req: "ok") as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        for _ in range(5):
            assert backend.generate("q") == "ok"

        async def many():
            return await asyncio.gather(*(backend.agenerate("q") for _ in range(7)))

        assert asyncio.run(many()) == ["ok"] * 7
    assert len(server.requests) == 12 == len(limits.rate.history)
    assert max_in_window(limits.rate.history) == 3


def test_retries_count_against_the_rate_limit(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, rpm_limit=2, max_retries=3)
    with GeminiEmulator([Reply.server_error(500), Reply.server_error(503), "ok"]) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        assert backend.generate("q") == "ok"
    assert len(limits.rate.history) == 3 == len(server.requests)
    assert max_in_window(limits.rate.history) == 2


# -- retries -------------------------------------------------------------------------------------------

def test_parse_retry_delay_from_error_details():
    assert parse_duration("37s") == 37.0
    assert parse_duration("1.5s") == 1.5
    assert parse_duration({"seconds": 2, "nanos": 500_000_000}) == 2.5
    assert parse_duration("soon") is None
    body = Reply.rate_limited("13s").body
    assert find_retry_delay(body) == 13.0
    assert find_retry_delay([body]) == 13.0  # some endpoints wrap errors in a list
    assert find_retry_delay(Reply.rate_limited().body) is None


def test_429_waits_exactly_the_servers_retry_delay(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, max_retries=4)
    script = [Reply.rate_limited("7s"), Reply.rate_limited("1.5s"), Reply.rate_limited("0.25s"), "answer"]
    with GeminiEmulator(script) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        assert backend.generate("q") == "answer"
    assert limits.retry.waits == [7.0, 1.5, 0.25]
    assert clock.sleeps == [7.0, 1.5, 0.25]
    assert len(server.requests) == 4


def test_429_retry_delay_async_path(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, max_retries=2)
    with GeminiEmulator([Reply.rate_limited("3s"), "later"]) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        assert asyncio.run(backend.agenerate("q")) == "later"
    assert limits.retry.waits == [3.0]


def test_backoff_without_retry_info_is_exponential_jittered_and_capped(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, max_retries=8)
    limits.retry.rng = random.Random(0)
    script = [Reply.server_error(500), Reply.server_error(503), Reply.rate_limited()] + [Reply.server_error(503)] * 5
    with GeminiEmulator(script + ["finally"]) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        assert backend.generate("q") == "finally"
    waits = limits.retry.waits
    assert len(waits) == 8
    for k, wait in enumerate(waits):  # retry k+1: 2**k seconds x U(0.8, 1.2), at most 60
        assert min(60.0, 0.8 * 2**k) <= wait <= min(60.0, 1.2 * 2**k)
    assert waits[7] == 60.0  # 128 s x >= 0.8 is capped


def test_timeouts_are_retried(gemini_env):
    limits = CallLimits.create(max_retries=2, sleep=lambda s: None)
    with GeminiEmulator([Reply.slow("too late", 1.0), "in time"]) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits, timeout_s=0.25)
        assert backend.generate("q") == "in time"
    assert len(limits.retry.waits) == 1


def test_gives_up_after_max_retries(gemini_env):
    clock = FakeClock()
    limits = fake_limits(clock, max_retries=2)
    with GeminiEmulator([Reply.server_error(500)] * 5) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        with pytest.raises(BackendError, match="gave up after 3 attempts") as info:
            backend.generate("q")
    assert info.value.status == 500
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(gemini_env):
    limits = CallLimits.create(max_retries=5, sleep=lambda s: None)
    with GeminiEmulator([Reply.error(400, "bad request"), Reply.error(403, "denied")]) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)
        with pytest.raises(BackendError) as info:
            backend.generate("q")
        assert not isinstance(info.value, FatalBackendError) and info.value.status == 400
        with pytest.raises(FatalBackendError):
            backend.generate("q")
    assert len(server.requests) == 2 and limits.retry.waits == []


def test_retry_policy_rejects_negative_retries():
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


# -- concurrency ---------------------------------------------------------------------------------------

def test_concurrency_limit_caps_calls_in_flight(gemini_env):
    limits = CallLimits.create(concurrency=3)
    with GeminiEmulator(default=lambda req: "ok", latency=0.05) as server:
        backend = make_backend("gemini", base_url=server.url, limits=limits)

        async def many():
            return await asyncio.gather(*(backend.agenerate(f"q{i}") for i in range(12)))

        assert len(asyncio.run(many())) == 12
    assert limits.concurrency.peak == 3


def test_concurrency_limit_is_shared_by_threads_and_tasks():
    limit = ConcurrencyLimit(2)
    with limit:
        async def take():
            async with limit:
                return limit.in_flight

        assert asyncio.run(take()) == 2
    assert limit.in_flight == 0


# -- gemini credentials --------------------------------------------------------------------------------

def test_gemini_refuses_vertex_mode_with_an_api_key():
    env = {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_API_KEY": "k", "GOOGLE_CLOUD_PROJECT": "p",
           "GOOGLE_CLOUD_LOCATION": "us-central1"}
    with pytest.raises(BackendConfigError, match="GOOGLE_GENAI_USE_VERTEXAI is set and so is GOOGLE_API_KEY"):
        gemini_client_kwargs(env)


def test_gemini_credentials_resolution():
    assert gemini_client_kwargs({"GEMINI_API_KEY": "g"}) == {"api_key": "g"}
    assert gemini_client_kwargs({"GOOGLE_API_KEY": "a", "GEMINI_API_KEY": "g"}) == {"api_key": "a"}
    vertex = {"GOOGLE_GENAI_USE_VERTEXAI": "1", "GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "eu"}
    assert gemini_client_kwargs(vertex) == {"vertexai": True, "project": "p", "location": "eu"}
    with pytest.raises(BackendConfigError, match="GOOGLE_CLOUD_LOCATION"):
        gemini_client_kwargs({"GOOGLE_GENAI_USE_VERTEXAI": "1", "GOOGLE_CLOUD_PROJECT": "p"})
    with pytest.raises(BackendConfigError, match="no credentials"):
        gemini_client_kwargs({})


def test_gemini_request_carries_generation_config_and_base_url(gemini_env):
    with GeminiEmulator(["B) Paris"]) as server:
        backend = make_backend("gemini", model="gemini-test", base_url=server.url)
        assert backend.generate("Capital?", max_output_tokens=128, temperature=0.0, seed=1234,
                                thinking_budget=0) == "B) Paris"
    req = server.requests[0]
    assert req.path.endswith("/models/gemini-test:generateContent")
    assert req.headers.get("x-goog-api-key") == "test-key"
    assert req.prompt == "Capital?"
    config = req.body["generationConfig"]
    assert config["maxOutputTokens"] == 128 and config["seed"] == 1234 and config["temperature"] == 0.0
    # the SDK sends this field in proto-JSON snake or camel case depending on its version
    assert config["thinkingConfig"] in ({"thinkingBudget": 0}, {"thinking_budget": 0})


def test_unknown_backend_name():
    with pytest.raises(BackendConfigError, match="unknown backend"):
        make_backend("nope")


# -- openai-compatible ---------------------------------------------------------------------------------

def test_openai_backend_against_loopback_endpoint():
    clock = FakeClock()
    limits = fake_limits(clock, max_retries=3, rpm_limit=100)
    script = ["4", Reply.rate_limited(retry_after=2), Reply.server_error(503), "Paris", "async answer"]
    with OpenAIEmulator(script) as server:
        backend = make_backend("openai", model="served-model", base_url=server.url + "/v1", limits=limits,
                               api_key="sk-test")
        assert backend.generate("2+2?", seed=7) == "4"
        assert backend.generate("capital?", max_output_tokens=16) == "Paris"
        assert asyncio.run(backend.agenerate("again")) == "async answer"
        backend.close()
    first = server.requests[0]
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body == {"model": "served-model", "messages": [{"role": "user", "content": "2+2?"}],
                          "max_tokens": 128, "temperature": 0.0, "seed": 7}
    assert server.requests[1].body["max_tokens"] == 16
    assert limits.retry.waits[0] == 2.0  # Retry-After header honoured exactly
    assert len(limits.retry.waits) == 2 and len(server.requests) == 5


def test_openai_backend_errors():
    limits = CallLimits.create(max_retries=1, sleep=lambda s: None)
    with OpenAIEmulator([Reply.error(401, "bad key"), Reply(status=200, body={"unexpected": True})]) as server:
        backend = make_backend("openai", model="m", base_url=server.url + "/v1", limits=limits)
        with pytest.raises(FatalBackendError, match="401"):
            backend.generate("q")
        with pytest.raises(BackendError, match="unexpected response"):
            backend.generate("q")
    with pytest.raises(BackendConfigError, match="--model is required"):
        make_backend("openai", base_url="http://127.0.0.1:9/v1")


def test_local_backend_rejects_base_url():
    with pytest.raises(BackendConfigError, match="does not apply"):
        make_backend("local", base_url="http://127.0.0.1:1")


# -- one registry, one settings dataclass ------------------------------------------------------------

class EchoBackend:
    """A backend module's class, as the registry builds it: (model, limits=..., <its options>)."""

    name = "echo"

    def __init__(self, model=None, *, limits=None, base_url=None):
        self.model, self.limits, self.base_url = model or "echo-1", limits, base_url


def test_one_registration_adds_a_backend_everywhere(monkeypatch):
    import sys
    import types

    from eval.backends import registry
    from eval.claims.cli import parse_config as claims_config
    from eval.gemhall.cli import build_backends
    from eval.gemhall.cli import parse_config as gemhall_config
    from eval.halurate.cli import parse_config as halurate_config

    module = types.ModuleType("echo_backend_module")
    module.EchoBackend = EchoBackend
    monkeypatch.setitem(sys.modules, "echo_backend_module", module)
    registry.register_backend("echo", "echo_backend_module:EchoBackend", options=("base_url",), summary="test")
    try:
        _check_echo_everywhere(claims_config, build_backends, gemhall_config, halurate_config)
    finally:
        registry.REGISTRY.pop("echo")
    assert "echo" not in registry.backend_names()


def _check_echo_everywhere(claims_config, build_backends, gemhall_config, halurate_config):
    cfg = gemhall_config(["run", "--data", "x.csv", "--thresholds", "0.5", "--backend", "echo", "--base-url", "u",
                          "--threads", "2", "--concurrency", "3"])
    backend, _ = build_backends(cfg)
    assert isinstance(backend, EchoBackend) and backend.base_url == "u" and backend.model == "echo-1"
    assert backend.limits.concurrency.limit == 3  # threads dropped: echo does not take it
    assert halurate_config(["--backend", "echo"]).generation.build_backend().name == "echo"
    assert claims_config(["check", "--input", "x.jsonl", "--backend", "echo"]).build_backend().name == "echo"
    with pytest.raises(BackendConfigError, match="unknown backend 'nope'; choose one of gemini, openai, local, echo"):
        make_backend("nope")


def test_backend_settings_are_checked_the_same_in_every_tool(tmp_path):
    from eval.claims.cli import parse_config as claims_config
    from eval.gemhall.cli import parse_config as gemhall_config
    from eval.halurate.cli import parse_config as halurate_config
    from inference.config import ConfigError

    yaml_file = tmp_path / "g.yaml"
    yaml_file.write_text("thresholds: [0.5]\nbackend: nope\n")
    with pytest.raises(ConfigError, match=r"g.yaml: backend: unknown backend 'nope'"):
        gemhall_config(["run", "--data", "x.csv", "--config", str(yaml_file)])
    with pytest.raises(ConfigError, match="generation: rpm_limit: must be >= 1, got 0"):
        halurate_config(["--rpm-limit", "0"])
    with pytest.raises(ConfigError, match="timeout_s: must be > 0"):
        claims_config(["check", "--input", "x.jsonl", "--backend", "local", "--timeout-s", "0"])
    # the same defaults everywhere but where a tool needs its own: claims has no LLM unless asked
    g = gemhall_config(["run", "--data", "x.csv", "--thresholds", "0.5"])
    h = halurate_config([]).generation
    c = claims_config(["check", "--input", "x.jsonl", "--explainer", "e"])
    assert (g.backend, g.concurrency, g.max_retries) == (h.backend, h.concurrency, h.max_retries) == ("local", 8, 6)
    assert c.backend is None and c.concurrency == 8 and c.max_output_tokens == 1024
    assert h.thinking_budget is None and halurate_config(["--thinking-budget", "0"]).generation.thinking_budget == 0


def test_gemhall_loaders_raise_the_data_layers_error():
    from eval.gemhall import DataError as gemhall_error
    from training.data.base import DataError

    assert gemhall_error is DataError
