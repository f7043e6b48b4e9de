"""The `serve:` section of configs/inference.yaml (inference.settings keeps it as a plain mapping; it is
validated here, with the same errors naming the file and key as every other config section).

    serve:
      upstream: http://127.0.0.1:8000/v1   # the OpenAI-compatible base URL (--upstream overrides)
      host: 127.0.0.1                      # loopback by default; 0.0.0.0 only behind your own network policy
      port: 8080
      batching: true                       # micro-batching; false: one input per model call
      max_batch: 16                        # inputs per batch
      max_wait_ms: 2.0                     # how long a batch waits for more inputs (only while others are coming)
      max_queue: 256                       # inputs waiting for detection; beyond it: 503 + Retry-After
      retry_after_s: 1
      detect_timeout_s: 30.0               # detection slower than this: status unavailable (fail_mode applies)
      upstream_timeout_s: 300.0            # read timeout of an upstream call; exceeded: 504
      upstream_connect_timeout_s: 5.0
      max_body_bytes: 1048576              # larger request bodies: 413
      auth_token_env: ""                   # name of an env var holding the service's bearer token(s), comma-separated
      upstream_api_key_env: ""             # env var with the upstream key, sent when the caller's Authorization was
                                           # the service token
      shutdown_timeout_s: 30.0             # graceful shutdown: in-flight requests get this long to finish
      keep_alive_s: 65                     # idle keep-alive of client connections; longer than clients' own
                                           # (httpx: 5 s) so that a client never reuses a connection being closed
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inference.config import ConfigError, from_dict
from inference.settings import InferenceSettings, load_settings


@dataclass
class ServeSettings:
    upstream: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    batching: bool = True
    max_batch: int = 16
    max_wait_ms: float = 2.0
    max_queue: int = 256
    retry_after_s: int = 1
    detect_timeout_s: float = 30.0
    upstream_timeout_s: float = 300.0
    upstream_connect_timeout_s: float = 5.0
    max_body_bytes: int = 1_048_576
    auth_token_env: str = ""
    upstream_api_key_env: str = ""
    shutdown_timeout_s: float = 30.0
    keep_alive_s: int = 65

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: expected 0-65535, got {self.port}")
        for name in ("max_batch", "max_queue", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("keep_alive_s", "max_wait_ms", "detect_timeout_s", "upstream_timeout_s", "upstream_connect_timeout_s",
                     "shutdown_timeout_s", "retry_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.upstream and not self.upstream.startswith(("http://", "https://")):
            raise ValueError(f"upstream: expected an http(s) URL, got {self.upstream!r}")

    def auth_tokens(self) -> list[str]:
        """The service's accepted bearer tokens (from the env var named by auth_token_env); [] = no auth."""
        if not self.auth_token_env:
            return []
        tokens = [t.strip() for t in os.environ.get(self.auth_token_env, "").split(",") if t.strip()]
        if not tokens:
            raise ConfigError(f"serve.auth_token_env: environment variable {self.auth_token_env} is empty or unset")
        return tokens

    def upstream_api_key(self) -> str | None:
        return os.environ.get(self.upstream_api_key_env) or None if self.upstream_api_key_env else None


def load(path: str | Path | None, overrides: list[str] | None = None) -> tuple[InferenceSettings, ServeSettings]:
    """The runtime settings and the serve section of one config file (`serve.*` overrides work too)."""
    settings = load_settings(path, overrides)
    serve = from_dict(ServeSettings, settings.serve, f"{path or '<defaults>'}: serve")
    return settings, serve
