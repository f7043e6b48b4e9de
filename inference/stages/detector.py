"""The Detector stage: windowed token scores (inference.detector_stage, the one scoring path) -> spans."""

from __future__ import annotations

from inference import explain, grounding
from inference.detector_stage import effective, scores_to_spans
from inference.formats import detector_format
from inference.labels import DETECTOR_LABELS
from inference.result import Span
from inference.stages.base import Stage, register


@register
class DetectorStage(Stage):
    name = "detector"
    settings_key = "hallucination_model"
    task = "token"
    labels = tuple(DETECTOR_LABELS[1:])

    def check_labels(self, runner, settings) -> None:
        """HALLUCINATED by name; a two-label checkpoint in lettucedetect's format (LABEL_0 / LABEL_1) reads label 1
        as hallucinated, as lettucedetect does."""
        if any(str(x).lower() == DETECTOR_LABELS[1].lower() for x in runner.labels):
            return
        try:
            fmt = detector_format(settings.hallucination_model, runner.model_dir)
        except ValueError as exc:
            raise RuntimeError(str(exc)) from None
        if not (fmt.input_format == "lettucedetect" and len(runner.labels) == 2):
            super().check_labels(runner, settings)

    def run(self, gate, items) -> None:
        items = [it for it in items if it.run_detector]
        if not items:
            return
        hm = gate.settings.hallucination_mitigation.hallucination_model
        for it in items:
            it.result.detector_windows = len(it.windows)
        try:
            scores = gate.score_tokens(items)
        except Exception as exc:  # noqa: BLE001
            for it in items:
                gate.fail(it, "detector", f"run failed: {type(exc).__name__}: {exc}")
                it.run_detector = False
            return
        for it, sc in zip(items, scores):
            raw = scores_to_spans(it.data.answer, sc, hm, gate.detector_calibration)
            it.result.hallucination_score = sc.score
            # beside the score, so that a reader sees how near an unflagged answer came ("0.14 against 0.20")
            it.result.hallucination_threshold = effective(hm, gate.detector_calibration, sc.task_type)[0]
            # The exact check next to the model's judgement: numbers, quantities and names of each span that the
            # context (and question) lacks. The Explainer stage never drops such a span as entailed.
            it.result.spans = []
            for s in raw:
                missing = grounding.terms_within(sc.ungrounded, s["start"], s["end"])
                it.result.spans.append(Span(
                    start=s["start"], end=s["end"], text=s["text"], confidence=s["confidence"],
                    severity=explain.UNEXPLAINED_SEVERITY, ungrounded=missing,
                    explanation=explain.explanation(None, None, s["confidence"], "", "NLI not run",
                                                    ungrounded=missing)))
            it.result.hallucination_detected = bool(it.result.spans)
