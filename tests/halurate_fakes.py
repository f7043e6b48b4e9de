"""Rule-based runners behind inference.runners' ClassifierRunner interface, with the real MiniLM tokenizer, so
that HaluGate and the claim verifier run their real code paths with predictable model outputs.

- FakeDetector: an answer token is HALLUCINATED when its WordPiece is in `bad_words`.
- FakeNLI: (premise, hypothesis) -> contradiction when the hypothesis has a word of `contradict_words`, entailment
  when every content word of the hypothesis is in the premise, else neutral.
- FakeSentinel: FACT_CHECK_NEEDED unless the prompt mentions a poem.
"""

from __future__ import annotations

import re

import numpy as np

from inference.labels import DETECTOR_LABELS, EXPLAINER_LABELS, SENTINEL_LABELS
from inference.runners import ClassifierRunner, load_tokenizer_info

_WORD = re.compile(r"\w+")
_STOP = {"the", "a", "an", "of", "in", "is", "was", "it", "and", "to", "by", "on", "at", "for"}


class FakeDetector(ClassifierRunner):
    def __init__(self, tokenizer_dir: str, bad_words=("mumbai", "berlin", "1999")):
        tok = load_tokenizer_info(tokenizer_dir)
        super().__init__(model_dir="fake-detector", task="token", labels=list(DETECTOR_LABELS), tok=tok,
                         max_length=512)
        self.bad_ids = {tok.tokenizer.token_to_id(w) for w in bad_words} - {None}
        self.calls = 0

    def _run_batch(self, ids, mask, types):
        self.calls += 1
        bad = np.isin(ids, list(self.bad_ids))
        logits = np.zeros(ids.shape + (2,), dtype=np.float32)
        logits[..., 0] = np.where(bad, -4.0, 4.0)
        logits[..., 1] = np.where(bad, 4.0, -4.0)
        return logits


class FakeNLI(ClassifierRunner):
    def __init__(self, tokenizer_dir: str, contradict_words=("berlin", "mumbai", "1999"), confidence: float = 0.9):
        super().__init__(model_dir="fake-nli", task="sequence", labels=list(EXPLAINER_LABELS),
                         tok=load_tokenizer_info(tokenizer_dir), max_length=512)
        self.contradict = set(contradict_words)
        self.confidence = confidence
        self.calls = 0
        self.pairs: list[tuple[str, str]] = []

    def verdict(self, premise: str, hypothesis: str) -> int:
        hyp = [w for w in _WORD.findall(hypothesis.lower()) if w not in _STOP]
        prem = set(_WORD.findall(premise.lower()))
        if any(w in self.contradict for w in hyp):
            return 2
        if hyp and all(w in prem for w in hyp):
            return 0
        return 1

    def classify(self, texts):
        self.calls += 1
        self.pairs.extend(texts)
        rest = (1.0 - self.confidence) / 2
        out = np.full((len(texts), 3), rest, dtype=np.float32)
        for i, (premise, hypothesis) in enumerate(texts):
            out[i, self.verdict(premise, hypothesis)] = self.confidence
        return out


class FakeSentinel(ClassifierRunner):
    def __init__(self, tokenizer_dir: str):
        super().__init__(model_dir="fake-sentinel", task="sequence", labels=list(SENTINEL_LABELS),
                         tok=load_tokenizer_info(tokenizer_dir), max_length=512)

    def classify(self, texts):
        return np.array([[0.9, 0.1] if "poem" in t.lower() else [0.1, 0.9] for t in texts], dtype=np.float32)


def fake_gate(tokenizer_dir: str, *, sentinel: bool = True, explainer: bool = True, **detector_kwargs):
    from inference.detect import HaluGate
    from inference.settings import InferenceSettings

    settings = InferenceSettings()
    settings.hallucination_mitigation.hallucination_model.model_id = "fake-detector"
    return HaluGate(settings, detector=FakeDetector(tokenizer_dir, **detector_kwargs),
                    sentinel=FakeSentinel(tokenizer_dir) if sentinel else None,
                    explainer=FakeNLI(tokenizer_dir) if explainer else None, load=False)
