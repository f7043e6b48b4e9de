"""The resolved settings of one gemhall run (flags, optionally over a YAML file), saved beside its outputs.

The backend and sampling keys (backend, model, base_url, concurrency, rpm_limit, max_retries, timeout_s,
threads, temperature, seed, max_output_tokens, thinking_budget) are eval.backends.SamplingSettings, shared
with halurate and claims.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from eval.backends.settings import SamplingSettings


@dataclass
class GemhallConfig(SamplingSettings):
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
    # judging
    judge: Literal["exact", "llm"] = "exact"
    judge_model: str | None = None
    # execution
    use_async: bool = False
    progress: bool = False
    out: str = "outputs"

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
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: must be >= 1, got {self.limit}")
        super().validate()
