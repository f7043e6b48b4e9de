"""eval.detector_nli: sentence-level NLI features per answer token, and the cross-fitted combiners (a fold is
never used to fit what it is scored on; an informative NLI signal is picked up)."""

from __future__ import annotations

import numpy as np
from detect_helpers import FakeExplainer

from eval.detector_nli import FoldData, cross_fit, features, sentence_nli
from inference.detector_stage import DetectorScores
from inference.grounding import FEATURES
from inference.settings import DetectorSettings, ExplainerSettings
from training.data.records import SpanRecord
from training.detector_scoring import Prediction

CONTEXT = "The Eiffel Tower was built from 1887 to 1889. It is 330 meters tall."


def test_sentence_nli_marks_the_contradicted_sentence(minilm_dir):
    runner = FakeExplainer(minilm_dir)
    answer = "It is 330 meters tall. It was built in 1950."
    split = answer.index("It was")
    offsets = [(m.start(), m.end()) for m in __import__("re").finditer(r"\S+", answer)]
    nli = sentence_nli(runner, SpanRecord(answer=answer, context=CONTEXT, question=None), offsets,
                       ExplainerSettings())
    first = [i for i, (s, _) in enumerate(offsets) if s < split]
    second = [i for i, (s, _) in enumerate(offsets) if s >= split]
    assert np.all(nli[first, 1] < 0.5) and np.all(nli[second, 1] > 0.5)  # P(contradiction) of its sentence
    assert np.all(nli[first, 0] < 0.5)  # the first sentence is entailed


def _fold(k: int, rng: np.random.Generator, n: int = 30) -> FoldData:
    records, preds, nli = [], [], []
    for i in range(n):
        words = [f"w{j}" for j in range(12)]
        answer = " ".join(words)
        offsets, pos = [], 0
        for w in words:
            offsets.append((pos, pos + len(w)))
            pos += len(w) + 1
        bad = rng.random() < 0.5
        gold = [{"start": offsets[3][0], "end": offsets[5][1], "text": answer[offsets[3][0]:offsets[5][1]]}] if bad else []
        truth = np.array([1.0 if bad and 3 <= j <= 5 else 0.0 for j in range(12)])
        model = np.clip(0.3 + 0.1 * rng.standard_normal(12), 0.01, 0.99)  # uninformative detector
        signal = np.stack([0.1 + 0.8 * truth, 0.05 + 0.9 * truth], axis=1)  # informative NLI
        scores = DetectorScores(offsets, model, model, np.zeros((12, len(FEATURES))), 1, "QA")
        records.append(SpanRecord(id=f"{k}-{i}", context="", answer=answer, spans=gold, task_type="QA"))
        preds.append(Prediction(scores, []))
        nli.append(signal)
    return FoldData(k, records, preds, {}, nli)


def test_cross_fit_uses_other_folds_and_learns_the_nli_signal():
    rng = np.random.default_rng(0)
    folds = [_fold(k, rng) for k in range(3)]
    assert features("nli", folds[0].records[0], folds[0].preds[0], folds[0].nli[0]).shape == (12, 5)
    det = cross_fit(folds, "detector", DetectorSettings())
    both = cross_fit(folds, "detector+nli", DetectorSettings())
    assert [f["fold"] for f in both] == [0, 1, 2]
    span_f1 = lambda rows: np.mean([r["levels"]["span"]["overall"]["f1"] for r in rows])
    assert span_f1(both) > 0.9 > span_f1(det)
