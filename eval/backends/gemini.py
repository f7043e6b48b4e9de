"""Gemini through google-genai's `genai.Client`: Developer API key or Vertex AI, from the environment."""

from __future__ import annotations

import os

from ._transport import FATAL_STATUS, RETRYABLE_STATUS, TRANSIENT_TRANSPORT_ERRORS
from .base import Backend, BackendConfigError, GenerationParams
from .limits import BackendError, CallLimits, FatalBackendError, RetryableError, find_retry_delay

DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"
_TRUE = {"1", "true", "yes", "on"}

__all__ = ["DEFAULT_GEMINI_MODEL", "BackendConfigError", "GeminiBackend", "gemini_client_kwargs"]  # the error: re-exported


def gemini_client_kwargs(environ: dict | None = None) -> dict:
    """Resolve credentials from the environment the way `genai.Client()` would, refusing ambiguity.

    Vertex mode (GOOGLE_GENAI_USE_VERTEXAI) with an API key also set is refused: which one bills and
    which quota applies would depend on SDK precedence rules, so the user has to choose.
    """
    env = os.environ if environ is None else environ
    api_key_vars = [v for v in ("GOOGLE_API_KEY", "GEMINI_API_KEY") if env.get(v)]
    if env.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip().lower() in _TRUE:
        if api_key_vars:
            raise BackendConfigError(
                "gemini backend: GOOGLE_GENAI_USE_VERTEXAI is set and so is "
                + " and ".join(api_key_vars)
                + "; choose one: unset the API key to use Vertex AI (GOOGLE_CLOUD_PROJECT, "
                "GOOGLE_CLOUD_LOCATION), or unset GOOGLE_GENAI_USE_VERTEXAI to use the Developer API."
            )
        missing = [v for v in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION") if not env.get(v)]
        if missing:
            raise BackendConfigError(f"gemini backend: Vertex AI mode needs {' and '.join(missing)} to be set.")
        return {"vertexai": True, "project": env["GOOGLE_CLOUD_PROJECT"], "location": env["GOOGLE_CLOUD_LOCATION"]}
    if not api_key_vars:
        raise BackendConfigError(
            "gemini backend: no credentials. Set GOOGLE_API_KEY (or GEMINI_API_KEY) for the Developer API, "
            "or GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION."
        )
    return {"api_key": env[api_key_vars[0]]}


class GeminiBackend(Backend):
    name = "gemini"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        limits: CallLimits | None = None,
        timeout_s: float = 60.0,
        environ: dict | None = None,
    ):
        from google import genai
        from google.genai import types

        super().__init__(model or DEFAULT_GEMINI_MODEL, limits=limits)
        self.base_url = base_url
        self._types = types
        # retry_options=None: the SDK makes exactly one attempt, our RetryPolicy owns retries.
        http_options = types.HttpOptions(base_url=base_url, timeout=int(timeout_s * 1000))
        self.client = genai.Client(http_options=http_options, **gemini_client_kwargs(environ))

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model, "base_url": self.base_url}

    def _config(self, params: GenerationParams):
        types = self._types
        thinking = (
            types.ThinkingConfig(thinking_budget=params.thinking_budget)
            if params.thinking_budget is not None else None
        )
        return types.GenerateContentConfig(
            max_output_tokens=params.max_output_tokens,
            temperature=params.temperature,
            seed=params.seed,
            thinking_config=thinking,
        )

    def _translate(self, exc: BaseException) -> BaseException:
        from google.genai import errors

        if isinstance(exc, errors.APIError):
            msg = f"gemini {exc.code} {exc.status or ''}: {exc.message or exc.details}".strip()
            if exc.code in RETRYABLE_STATUS:
                return RetryableError(msg, status=exc.code, retry_after=find_retry_delay(exc.details))
            if exc.code in FATAL_STATUS:
                return FatalBackendError(msg, status=exc.code)
            return BackendError(msg, status=exc.code)
        if isinstance(exc, TRANSIENT_TRANSPORT_ERRORS):
            return RetryableError(f"gemini transport error: {type(exc).__name__}: {exc}")
        return BackendError(f"gemini: {type(exc).__name__}: {exc}")

    def _call_once(self, prompt: str, params: GenerationParams) -> str:
        try:
            response = self.client.models.generate_content(
                model=self.model, contents=prompt, config=self._config(params)
            )
        except Exception as exc:  # translated, then re-raised
            raise self._translate(exc) from exc
        return response.text or ""  # blocked or empty candidates read as an empty answer (an IDK)

    async def _acall_once(self, prompt: str, params: GenerationParams) -> str:
        try:
            response = await self.client.aio.models.generate_content(
                model=self.model, contents=prompt, config=self._config(params)
            )
        except Exception as exc:
            raise self._translate(exc) from exc
        return response.text or ""

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        await self.client.aio.aclose()
