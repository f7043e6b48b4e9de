"""What a pipeline stage is, and the registry that orders them.

A stage is one class: its `name` is used everywhere the stage shows (timings_ms key, the `stage` of result errors,
`load_errors`, the CLI flag `--<name>` of a model stage); `settings_key` is its section under
`hallucination_mitigation` in the config (the upstream semantic router's key names, kept so that its configs
load unchanged); `task` and `labels` are what its model must be. `run(gate, items)` reads and writes the
per-input working state (`inference.detect._Item`) of one detect_batch call.

Adding a stage is one module in inference/stages/ with a `@register`-ed class, listed in PIPELINE (the order is
part of the design: each stage reads what the ones before it wrote). docs/architecture.md has the recipe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

PIPELINE = ("sentinel", "decision", "detector", "explainer")

_REGISTRY: dict[str, type[Stage]] = {}


class Stage:
    name: ClassVar[str]
    settings_key: ClassVar[str | None] = None  # None: a step without a model
    task: ClassVar[str | None] = None  # "sequence" | "token": the runner its model needs
    labels: ClassVar[tuple[str, ...]] = ()  # labels its model's label map must contain

    def run(self, gate, items: list) -> None:
        raise NotImplementedError

    def check_labels(self, runner, settings) -> None:
        """Raise RuntimeError naming the model when its labels are not what this stage reads (by name, any
        case: `labels`); stages whose labels are found another way override it. `settings`: the
        MitigationSettings."""
        for name in self.labels:
            label_index(runner.labels, name, self.name, runner.model_dir)


def register(cls: type[Stage]) -> type[Stage]:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"stage {cls.name!r} registered twice ({_REGISTRY[cls.name].__name__}, {cls.__name__})")
    _REGISTRY[cls.name] = cls
    return cls


def label_index(labels: Sequence[str], name: str, stage: str, model: str) -> int:
    """Index of label `name` (case-insensitive) in a model's labels; a clear error naming the model otherwise."""
    lowered = [x.lower() for x in labels]
    if name.lower() in lowered:
        return lowered.index(name.lower())
    raise RuntimeError(f"{stage} model {model}: label {name!r} not in its label map {list(labels)}")


def pipeline(names: Sequence[str] = PIPELINE) -> list[Stage]:
    """Stage instances in order (importing the stage modules registers them)."""
    # imported here for registration, not at the top: the stage modules import this module
    from inference.stages import decision, detector, explainer, sentinel  # noqa: F401

    missing = [n for n in names if n not in _REGISTRY]
    if missing:
        raise ValueError(f"unknown pipeline stages {missing}; registered: {sorted(_REGISTRY)}")
    return [_REGISTRY[n]() for n in names]
