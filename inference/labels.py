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


# ---- label maps of published models: found by name -----------------------------------------------------------

def _norm(label: str) -> str:
    """'NOT-ENTAILMENT' / 'Not Entailment' / 'not_entailment' -> 'notentailment'."""
    return "".join(c for c in str(label).lower() if c.isalnum())


NLI_NAMES = {
    "entailment": ("entailment", "entail", "entails", "entailed"),
    "neutral": ("neutral",),
    "contradiction": ("contradiction", "contradict", "contradicts", "contradicted"),
    "not_entailment": ("notentailment", "nonentailment", "notentailed", "notentail"),
}


class LabelMapError(ValueError):
    """A model's label names do not say which label is which; the message names them and the way out."""


class NliLabelMap:
    """The columns of an NLI model's labels, found by name in any order and case. Three-way models
    (entailment / neutral / contradiction) map one to one; two-way models (entailment / not_entailment) are
    read as entailment / neutral (not entailed says nothing about contradiction), and `two_way` says so.

        nli = NliLabelMap(runner.labels)
        probs = nli.canonical(runner.classify(pairs))     # columns in EXPLAINER_LABELS order
    """

    def __init__(self, labels: list[str] | tuple[str, ...], model: str = "the model"):
        found: dict[str, int] = {}
        for i, name in enumerate(labels):
            for canon, aliases in NLI_NAMES.items():
                if _norm(name) in aliases:
                    if canon in found:
                        raise LabelMapError(f"{model}: two labels mean {canon!r}: {list(labels)}")
                    found[canon] = i
        self.labels = list(labels)
        if set(found) == {"entailment", "neutral", "contradiction"} and len(labels) == 3:
            self.two_way = False
            self.columns = [found[n] for n in EXPLAINER_LABELS]
        elif set(found) == {"entailment", "not_entailment"} and len(labels) == 2:
            self.two_way = True
            self.columns = [found["entailment"], found["not_entailment"], None]
        else:
            missing = "label 'entailment' not in its label map" if "entailment" not in found else "NLI labels"
            raise LabelMapError(
                f"{model}: {missing} {list(labels)}: they are neither entailment / neutral / contradiction nor "
                "entailment / not_entailment (found by name, any order and case); give the checkpoint's "
                "config.json an id2label with those names")

    def canonical(self, probs):
        """(n, len(labels)) probabilities -> (n, 3) in EXPLAINER_LABELS order (contradiction 0 for two-way)."""
        import numpy as np

        probs = np.asarray(probs, dtype=np.float32)
        out = np.zeros((probs.shape[0], len(EXPLAINER_LABELS)), dtype=np.float32)
        for j, col in enumerate(self.columns):
            if col is not None:
                out[:, j] = probs[:, col]
        return out

    @property
    def kind(self) -> str:
        return "two-way" if self.two_way else "three-way"


# The Sentinel's positive label by name: FACT_CHECK_NEEDED (ours), fact_check, factcheck, needs_fact_check, ...
SENTINEL_POSITIVE = ("factcheckneeded", "factcheck", "needsfactcheck", "needfactcheck", "factcheckrequired",
                     "requiresfactcheck", "checkneeded")


def sentinel_label(labels: list[str] | tuple[str, ...], configured: str = "", model: str = "the model") -> int:
    """Index of the Sentinel label meaning "needs fact-checking": `configured` (fact_check_model.fact_check_label,
    a label name in any case, e.g. LABEL_1) when set, else the one label whose name says it."""
    if configured:
        lowered = [str(x).lower() for x in labels]
        if configured.lower() not in lowered:
            raise LabelMapError(f"{model}: fact_check_label {configured!r} is not one of its labels {list(labels)}")
        return lowered.index(configured.lower())
    hits = [i for i, name in enumerate(labels) if _norm(name) in SENTINEL_POSITIVE]
    if len(hits) != 1:
        raise LabelMapError(
            f"{model}: cannot tell which of its labels {list(labels)} means 'needs fact-checking' by name; set "
            "hallucination_mitigation.fact_check_model.fact_check_label to it (e.g. LABEL_1)")
    return hits[0]
