"""HaluGate for evaluation: build it from settings, fingerprint it, and detect many answers without letting one
bad input sink a batch."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from inference.config import to_dict
from inference.detect import STAGE_MODELS, HaluGate, InputError, InputTooLongError, Result
from inference.settings import InferenceSettings, default_config_path, load_settings

from .config import DetectionSettings


def gate_settings(settings: DetectionSettings) -> InferenceSettings:
    """The runtime config file with the user's own `--set` strings, then the model dirs and backend set on the
    typed settings directly (no string round trip: a dir `runs/x #1` stays that, `on` stays a string)."""
    gate = load_settings(settings.config or default_config_path(), settings.overrides)
    m = gate.hallucination_mitigation
    for stage, key in STAGE_MODELS.items():
        value = getattr(settings, stage)
        if value is not None:
            getattr(m, key).model_id = "" if value.lower() == "none" else value
    if settings.backend:
        m.backend = settings.backend
    return gate


def build_gate(settings: DetectionSettings) -> HaluGate:
    """HaluGate from the evaluation's detection settings; ConfigError names what is wrong."""
    return HaluGate(gate_settings(settings))


WEIGHT_FILES = ("model.safetensors", "model.onnx", "model_quantized.onnx", "pytorch_model.bin")


def _runner_identity(runner) -> list | None:
    """Which model a stage runs: runner type, dir, labels, and the weights' size and mtime (a model retrained in
    place changes the key too)."""
    if runner is None:
        return None
    model_dir = Path(str(getattr(runner, "model_dir", "")))
    weights = [[f, (model_dir / f).stat().st_size, (model_dir / f).stat().st_mtime_ns]
               for f in WEIGHT_FILES if (model_dir / f).is_file()]
    return [type(runner).__name__, str(model_dir), list(getattr(runner, "labels", [])), weights]


def gate_key(gate: HaluGate) -> str:
    """Fingerprint of the detection settings and models: a logged detection is reused only under the same key."""
    data = {"settings": to_dict(gate.settings), "load_errors": sorted(gate.load_errors),
            "runners": {stage: _runner_identity(r) for stage, r in gate.runners.items()}}
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def describe_gate(gate: HaluGate) -> dict:
    m = gate.settings.hallucination_mitigation
    out = {"backend": m.backend, "precision": m.precision}
    for stage, key in STAGE_MODELS.items():
        model_id = getattr(m, key).model_id
        state = "not configured" if not model_id else ("unavailable: " + gate.load_errors[stage]
                                                       if stage in gate.load_errors else "loaded")
        out[stage] = {"model_id": model_id or None, "state": state}
    return out


def detect_items(gate: HaluGate, items: Sequence[dict]) -> list[Result | Exception]:
    """One detect_batch call; when an input is rejected (InputError / InputTooLongError), each item is checked
    on its own so that only the bad ones get their error."""
    if not items:
        return []
    try:
        return list(gate.detect_batch(list(items)))
    except (InputError, InputTooLongError):
        pass
    out: list[Result | Exception] = []
    for item in items:
        try:
            out.append(gate.detect_batch([item])[0])
        except (InputError, InputTooLongError) as exc:
            out.append(exc)
    return out
