"""The resolved settings of one gemhall run (flags, optionally over a YAML file), saved beside its outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class GemhallConfig:
    command: Literal["run", "mmlu"]
    thresholds: list[float]
    # run
    data: str | None = None
    # mmlu
    split: Literal["test", "validation", "dev"] = "test"
    subjects: list[str] = field(default_factory=lambda: ["all"])
    limit: int | None = None
    idk_frac: float = 0.0
    data_dir: str | None = None
    # backend and sampling
    backend: Literal["gemini", "openai", "local"] = "gemini"
    model: str | None = None
    base_url: str | None = None
    temperature: float = 0.0
    thinking_budget: int | None = None
    seed: int = 1234
    max_output_tokens: int = 128
    judge: Literal["exact", "llm"] = "exact"
    judge_model: str | None = None
    # execution
    use_async: bool = False
    concurrency: int = 8
    progress: bool = False
    out: str = "outputs"
    rpm_limit: int | None = None
    max_retries: int = 6
    timeout_s: float = 60.0
    threads: int | None = None

    def validate(self) -> None:
        if not self.thresholds:
            raise ValueError("thresholds: give at least one confidence target in [0, 1)")
        for t in self.thresholds:
            if not 0.0 <= t < 1.0:
                raise ValueError(f"thresholds: each must be in [0, 1) (t=1 makes the penalty infinite), got {t:g}")
        if len(set(self.thresholds)) != len(self.thresholds):
            raise ValueError(f"thresholds: duplicate values in {self.thresholds}")
        if self.command == "run" and not self.data:
            raise ValueError("data: `gemhall run` needs --data CSV")
        if not 0.0 <= self.idk_frac <= 1.0:
            raise ValueError(f"idk_frac: must be in [0, 1], got {self.idk_frac:g}")
        checks = [
            ("limit", self.limit, 1), ("concurrency", self.concurrency, 1), ("rpm_limit", self.rpm_limit, 1),
            ("max_retries", self.max_retries, 0), ("max_output_tokens", self.max_output_tokens, 1),
            ("thinking_budget", self.thinking_budget, -1), ("threads", self.threads, 1),
        ]
        for name, value, low in checks:
            if value is not None and value < low:
                raise ValueError(f"{name}: must be >= {low}, got {value}")
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature:g}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s: must be > 0, got {self.timeout_s:g}")
