"""The Sentinel's calibrated threshold, read from the model directory (torch-free).

training.sentinel writes RUN_DIR/sentinel.json and training.export copies it into the export dir:

    {"calibration": {"threshold": 0.31, "label": "FACT_CHECK_NEEDED",
                     "target": "recall >= 0.95 on FACT_CHECK_NEEDED dev prompts", "dev": {...}, "test": {...}}}

The runtime uses it when `hallucination_mitigation.fact_check_model.threshold` is not set in the config; an
explicit threshold always wins, and without either the default is DEFAULT_SENTINEL_THRESHOLD.
"""

from __future__ import annotations

import json
from pathlib import Path

SENTINEL_CALIBRATION_FILE = "sentinel.json"
DEFAULT_SENTINEL_THRESHOLD = 0.6


def read_sentinel_threshold(model_dir: str | Path | None) -> float | None:
    """The calibrated threshold in MODEL_DIR/sentinel.json, or None when there is none; ValueError when the file
    exists but is unreadable (a broken calibration is reported, never silently replaced)."""
    if not model_dir:
        return None
    path = Path(model_dir) / SENTINEL_CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))["calibration"]["threshold"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable calibration ({type(exc).__name__}: {exc})") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{path}: calibration.threshold must be a number in [0, 1], got {value!r}")
    return float(value)


def sentinel_threshold(configured: float | None, model_dir: str | Path | None) -> float:
    """The threshold in effect: the config's, else the model's calibrated one, else the default."""
    if configured is not None:
        return float(configured)
    calibrated = read_sentinel_threshold(model_dir)
    return DEFAULT_SENTINEL_THRESHOLD if calibrated is None else calibrated
