"""The LLM backend settings shared by gemhall, halurate and claims: one dataclass, one set of flags.

A tool's config subclasses `BackendSettings` (which model, where, how hard to call it) or `SamplingSettings`
(that plus how to sample), so the YAML keys and the flags (`--backend`, `--model`, `--base-url`,
`--concurrency`, `--rpm-limit`, `--max-retries`, `--timeout-s`, `--threads`; `--temperature`, `--seed`,
`--max-output-tokens`, `--thinking-budget`) are the same in every tool and declared here only.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from .base import Backend
from .limits import CallLimits
from .registry import REGISTRY, backend_names, make_backend

S = argparse.SUPPRESS  # only flags actually given override the config file and the defaults


def _at_least(cfg, checks) -> None:
    for name, low in checks:
        value = getattr(cfg, name)
        if value is not None and value < low:
            raise ValueError(f"{name}: must be >= {low}, got {value}")


@dataclass(kw_only=True)
class BackendSettings:
    backend: str | None = "local"   # a registered backend (eval/backends/registry.py); None: no LLM (claims)
    model: str | None = None        # default: the backend's own (see --help)
    base_url: str | None = None     # gemini: endpoint override; openai: server URL incl. /v1
    concurrency: int = 8            # calls in flight
    rpm_limit: int | None = None    # never more than this many requests in any 60 s window
    max_retries: int = 6
    timeout_s: float = 60.0         # per request (gemini, openai)
    threads: int | None = None      # local backend: torch CPU threads (default half the cores)

    def validate(self) -> None:
        if self.backend is not None and self.backend not in REGISTRY:
            raise ValueError(f"backend: unknown backend {self.backend!r}; choose one of {', '.join(REGISTRY)}")
        _at_least(self, (("concurrency", 1), ("rpm_limit", 1), ("max_retries", 0), ("threads", 1)))
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0, got {self.timeout_s:g}")

    def build_backend(self, *, model: str | None = None, limits: CallLimits | None = None) -> Backend:
        """The configured backend (`model` instead of the configured one; `limits` shared with another)."""
        return make_backend(self.backend, model=model or self.model, rpm_limit=self.rpm_limit,
                            max_retries=self.max_retries, concurrency=self.concurrency, limits=limits,
                            base_url=self.base_url, timeout_s=self.timeout_s, threads=self.threads)


@dataclass(kw_only=True)
class SamplingSettings(BackendSettings):
    temperature: float = 0.0
    seed: int = 1234                # sampling and the request seed
    max_output_tokens: int = 128
    thinking_budget: int | None = None   # gemini thinking tokens (0 disables on models that allow it)

    def validate(self) -> None:
        super().validate()
        _at_least(self, (("max_output_tokens", 1), ("thinking_budget", -1)))
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature:g}")

    def generation_kwargs(self) -> dict:
        """The keywords of Backend.generate / agenerate."""
        return {"max_output_tokens": self.max_output_tokens, "temperature": self.temperature, "seed": self.seed,
                "thinking_budget": self.thinking_budget}


def _default(cls: type, name: str):
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def add_backend_arguments(group, cls: type[BackendSettings] = BackendSettings) -> None:
    """--backend ... --threads (dests = the field names, absent unless given), with `cls`'s defaults in the help."""
    default = _default(cls, "backend")
    group.add_argument("--backend", choices=backend_names(), default=S, help=(
        f"default: {default or 'none'}; " + "; ".join(f"{e.name}: {e.summary}" for e in REGISTRY.values())))
    group.add_argument("--model", default=S,
                       help="; ".join(f"{e.name}: {e.model_help}" for e in REGISTRY.values() if e.model_help))
    group.add_argument("--base-url", dest="base_url", default=S,
                       help="gemini: endpoint override (http_options.base_url); openai: server URL incl. /v1")
    group.add_argument("--concurrency", type=int, default=S,
                       help=f"max calls in flight (default {_default(cls, 'concurrency')})")
    group.add_argument("--rpm-limit", dest="rpm_limit", type=int, default=S,
                       help="never more than this many requests in any 60 s window (judge calls included)")
    group.add_argument("--max-retries", dest="max_retries", type=int, default=S,
                       help=f"default {_default(cls, 'max_retries')}")
    group.add_argument("--timeout-s", dest="timeout_s", type=float, default=S,
                       help=f"per-request timeout in seconds (default {_default(cls, 'timeout_s'):g})")
    group.add_argument("--threads", type=int, default=S,
                       help="local backend: torch CPU threads (default half the cores)")


def add_sampling_arguments(group, cls: type[SamplingSettings] = SamplingSettings) -> None:
    """--temperature, --seed, --max-output-tokens, --thinking-budget (dests = the field names)."""
    group.add_argument("--temperature", type=float, default=S, help=f"default {_default(cls, 'temperature')}")
    group.add_argument("--seed", type=int, default=S,
                       help=f"default {_default(cls, 'seed')} (sampling, request seed)")
    group.add_argument("--max-output-tokens", dest="max_output_tokens", type=int, default=S,
                       help=f"default {_default(cls, 'max_output_tokens')}")
    group.add_argument("--thinking-budget", dest="thinking_budget", type=int, default=S,
                       help="gemini thinking tokens (0 disables on models that allow it)")


def setting_names(cls: type[BackendSettings] = SamplingSettings) -> list[str]:
    """The field names (= flag dests) of `cls`."""
    return [f.name for f in dataclasses.fields(cls)]
