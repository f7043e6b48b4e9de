"""The Sentinel stage: does the prompt need fact-checking? (P(FACT_CHECK_NEEDED) against the config's threshold,
else the model's calibrated one in sentinel.json, else 0.6.)"""

from __future__ import annotations

from inference.calibration import sentinel_threshold
from inference.formatting import sentinel_text
from inference.labels import SENTINEL_LABELS
from inference.stages.base import Stage, label_index, register


@register
class SentinelStage(Stage):
    name = "sentinel"
    settings_key = "fact_check_model"
    task = "sequence"
    labels = tuple(SENTINEL_LABELS[1:])

    def run(self, gate, items) -> None:
        m = gate.settings.hallucination_mitigation
        runner = gate.runners["sentinel"]
        asked = []
        for it in items:
            if not it.data.question:
                # Explicit context/answer without a question: the caller asks for verification.
                it.result.fact_check_needed = True
            elif runner is None and "sentinel" not in gate.load_errors:
                it.result.fact_check_needed = True  # no Sentinel configured: verify everything
            elif runner is None:
                gate.fail(it, "sentinel", gate.stage_error("sentinel"))
            else:
                asked.append(it)
        if not asked:
            return
        try:
            probs = runner.classify([sentinel_text(it.data.question) for it in asked])
            needed = label_index(runner.labels, SENTINEL_LABELS[1], "sentinel", runner.model_dir)
            # the config's threshold, else the model's calibrated one (sentinel.json), else 0.6
            threshold = sentinel_threshold(m.fact_check_model.threshold, getattr(runner, "model_dir", None))
        except Exception as exc:  # noqa: BLE001 - a failing model is reported, never read as "not needed"
            for it in asked:
                gate.fail(it, "sentinel", f"run failed: {type(exc).__name__}: {exc}")
            return
        for it, p in zip(asked, probs):
            it.result.fact_check_confidence = float(p[needed])
            it.result.fact_check_needed = bool(p[needed] >= threshold)
