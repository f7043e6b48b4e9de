"""Number-swap NLI: minimal pairs that teach the Explainer that a changed number, year or month contradicts the
context (issue 12). Both offline Explainers read "The Eiffel Tower was built in 1950." against "It was built
from 1887 to 1889." as neutral: none of their sources pairs a sentence with the same sentence carrying another
number.

Source: the ConTRoL training passages (`curriculum_nli/control.zip`, train split, already a training source of
the recipe; its val split and every evaluation set are untouched). Up to PER_PASSAGE sentences of each distinct
passage that hold a number, a year or a month (6-60 words) each give two pairs with the same premise, the
sentence with up to NEIGHBOURS sentences either side:

- entailment: the hypothesis is the sentence itself;
- contradiction: the sentence with one number, year or month changed (training.data.synthetic's edits: another
  number of the same passage or a perturbed one, a year moved by 1-15, another month).

The choice of sentences and edits depends only on the passage text (a `random.Random` seeded by its hash), so
adding passages never changes the pairs of others.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

from training.data.curriculum import _SENTENCE, CURRICULUM_DIR, read_task
from training.data.nli import CONTRADICTION, ENTAILMENT, _nli_adapter, _rec
from training.data.synthetic import _date_edits, _number_edits

PER_PASSAGE = 2
NEIGHBOURS = 1
MIN_WORDS, MAX_WORDS = 6, 60


def _edits(sentence: str, passage: str, rng: random.Random):
    return _date_edits(sentence, passage, rng) + _number_edits(sentence, passage, rng)


def swap_pairs(passage: str, key: str) -> Iterator:
    """The entailment / contradiction pairs of one passage (PairRecords, meta pair_id `number_swap:KEY:i:label`)."""
    rng = random.Random(hashlib.sha256(passage.encode("utf-8")).hexdigest())
    sentences = [x.strip() for x in _SENTENCE.findall(passage) if x.strip()]
    usable = [i for i, x in enumerate(sentences)
              if MIN_WORDS <= len(x.split()) <= MAX_WORDS and _edits(x, passage, random.Random(0))]
    for i in sorted(rng.sample(usable, min(PER_PASSAGE, len(usable)))):
        sentence = sentences[i]
        edit = rng.choice(_edits(sentence, passage, rng))
        changed = sentence[:edit.start] + edit.replacement + sentence[edit.end:]
        if changed == sentence:
            continue
        premise = " ".join(sentences[max(0, i - NEIGHBOURS): i + NEIGHBOURS + 1])
        # train_only: the two pairs share a premise, so a row-level dev/test split would leak one into the other
        meta = {"domain": "number_swap", "transform": edit.transform, "train_only": True}
        yield _rec(premise, sentence, ENTAILMENT, pair_id=f"number_swap:{key}:{i}:e", **meta)
        yield _rec(premise, changed, CONTRADICTION, pair_id=f"number_swap:{key}:{i}:c", **meta)


def read_number_swap(data_dir: Path) -> Iterator:
    seen = set()
    for rec in read_task(data_dir, "control", "train", window=False):
        digest = hashlib.sha256(rec.premise.encode("utf-8")).hexdigest()[:16]
        if digest in seen:
            continue
        seen.add(digest)
        yield from swap_pairs(rec.premise, digest)


_nli_adapter("number_swap", [f"{CURRICULUM_DIR}/control.zip"], read_number_swap,
             description="number-swap minimal pairs from ConTRoL training passages (three-way: entailment / "
                         "contradiction; a number, year or month changed)")
