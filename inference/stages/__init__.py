"""HaluGate's pipeline stages (inference.stages.base: the Stage interface, the registry, the order)."""

from inference.stages.base import PIPELINE, Stage, label_index, pipeline, register

__all__ = ["PIPELINE", "Stage", "label_index", "pipeline", "register"]
