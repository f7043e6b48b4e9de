"""Label maps of the three models: defined once, imported by training, export, eval and inference."""

from __future__ import annotations

SENTINEL_LABELS = ["NO_FACT_CHECK_NEEDED", "FACT_CHECK_NEEDED"]
DETECTOR_LABELS = ["SUPPORTED", "HALLUCINATED"]
EXPLAINER_LABELS = ["entailment", "neutral", "contradiction"]

IGNORE_INDEX = -100  # tokens that carry no label (context, question, special tokens)


def id2label(labels: list[str]) -> dict[int, str]:
    return dict(enumerate(labels))


def label2id(labels: list[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(labels)}
