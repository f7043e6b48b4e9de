"""The Sentinel stage: does the prompt need fact-checking? (P(FACT_CHECK_NEEDED) against the config's threshold,
else the model's calibrated one in sentinel.json, else 0.6.)"""

from __future__ import annotations

from inference.calibration import sentinel_threshold
from inference.formatting import sentinel_text
from inference.labels import SENTINEL_LABELS, LabelMapError, sentinel_label
from inference.stages.base import Stage, register


@register
class SentinelStage(Stage):
    name = "sentinel"
    settings_key = "fact_check_model"
    task = "sequence"
    labels = tuple(SENTINEL_LABELS[1:])

    def check_labels(self, runner, settings) -> None:
        """The fact-check label by name (FACT_CHECK_NEEDED, fact_check, ...) or as the config names it
        (fact_check_model.fact_check_label, e.g. LABEL_1)."""
        try:
            sentinel_label(runner.labels, settings.fact_check_model.fact_check_label, f"sentinel model {runner.model_dir}")
        except LabelMapError as exc:
            raise RuntimeError(str(exc)) from None

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
            needed = sentinel_label(runner.labels, m.fact_check_model.fact_check_label, runner.model_dir)
            # the config's threshold, else the model's calibrated one (sentinel.json), else 0.6
            threshold = sentinel_threshold(m.fact_check_model.threshold, getattr(runner, "model_dir", None))
        except Exception as exc:  # noqa: BLE001 - a failing model is reported, never read as "not needed"
            for it in asked:
                gate.fail(it, "sentinel", f"run failed: {type(exc).__name__}: {exc}")
            return
        for it, p in zip(asked, probs):
            it.result.fact_check_confidence = float(p[needed])
            it.result.fact_check_needed = bool(p[needed] >= threshold)
