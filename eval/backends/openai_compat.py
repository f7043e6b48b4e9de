"""Any OpenAI-compatible `/v1/chat/completions` server (vLLM, llama.cpp, Ollama, DeepSeek, OpenAI) via httpx."""

from __future__ import annotations

import asyncio
import os

import httpx

from ._transport import FATAL_STATUS, RETRYABLE_STATUS, TRANSIENT_TRANSPORT_ERRORS
from .base import Backend, BackendConfigError, GenerationParams
from .limits import BackendError, CallLimits, FatalBackendError, RetryableError, find_retry_delay

DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8000/v1"


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait: the Retry-After header (delta-seconds), else a RetryInfo in the JSON body."""
    header = response.headers.get("retry-after")
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass  # an HTTP-date: fall back to the body or to backoff
    try:
        return find_retry_delay(response.json())
    except ValueError:
        return None


class OpenAICompatBackend(Backend):
    name = "openai"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        limits: CallLimits | None = None,
        timeout_s: float = 60.0,
    ):
        model = model or os.environ.get("OPENAI_MODEL")
        if not model:
            raise BackendConfigError(
                "openai backend: --model is required (the model name the server serves; or set OPENAI_MODEL)."
            )
        super().__init__(model, limits=limits)
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL).rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout_s)
        self._client: httpx.Client | None = None
        self._aclients: dict[int, httpx.AsyncClient] = {}

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model, "base_url": self.base_url}

    def _payload(self, prompt: str, params: GenerationParams) -> dict:
        # thinking_budget has no portable OpenAI-compatible field; servers that think do so by default.
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": params.max_output_tokens,
            "temperature": params.temperature,
        }
        if params.seed is not None:
            payload["seed"] = params.seed
        return payload

    def _parse(self, response: httpx.Response) -> str:
        status = response.status_code
        if status != 200:
            body = response.text[:300]
            msg = f"openai-compatible server {status}: {body}"
            if status in RETRYABLE_STATUS:
                raise RetryableError(msg, status=status, retry_after=_retry_after(response))
            if status in FATAL_STATUS:
                raise FatalBackendError(f"{msg} (url {self.url}, model {self.model!r})", status=status)
            raise BackendError(msg, status=status)
        try:
            message = response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"openai-compatible server: unexpected response {response.text[:300]!r}") from exc
        return message.get("content") or ""

    def _call_once(self, prompt: str, params: GenerationParams) -> str:
        if self._client is None:
            self._client = httpx.Client(headers=self._headers, timeout=self._timeout)
        try:
            response = self._client.post(self.url, json=self._payload(prompt, params))
        except TRANSIENT_TRANSPORT_ERRORS as exc:
            raise RetryableError(f"openai-compatible transport error: {type(exc).__name__}: {exc}") from exc
        return self._parse(response)

    async def _acall_once(self, prompt: str, params: GenerationParams) -> str:
        loop_id = id(asyncio.get_running_loop())
        client = self._aclients.get(loop_id)
        if client is None:  # an AsyncClient belongs to the loop that created it
            client = self._aclients[loop_id] = httpx.AsyncClient(headers=self._headers, timeout=self._timeout)
        try:
            response = await client.post(self.url, json=self._payload(prompt, params))
        except TRANSIENT_TRANSPORT_ERRORS as exc:
            raise RetryableError(f"openai-compatible transport error: {type(exc).__name__}: {exc}") from exc
        return self._parse(response)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        client = self._aclients.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()
