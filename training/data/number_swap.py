"""Number-swap NLI: minimal pairs that teach the Explainer that a changed number, year or month contradicts the
context. Both offline Explainers read "The Eiffel Tower was built in 1950." against "It was built
from 1887 to 1889." as neutral: none of their sources pairs a sentence with the same sentence carrying another
number.

Source: the ConTRoL training passages (`curriculum_nli/control.zip`, train split, already a training source of
the recipe; its val split and every evaluation set are untouched). Up to PER_PASSAGE sentences of each distinct
passage that hold a number, a year or a month (6-60 words) each give two pairs with the same premise, the
sentence with up to NEIGHBOURS sentences either side:

- entailment: the hypothesis is the sentence itself;
- contradiction: the sentence with one number, year or month changed (training.data.synthetic's edits: another
  number of the same passage or a perturbed one, a year moved by 1-15, another month).

`number_swap_neutral` adds the third label: the same premise against a number-bearing sentence of the same
passage outside it (more than NEIGHBOURS + 1 sentences away) whose numbers the premise does not contain: a claim
on the same topic with numbers about something else, which the premise neither states nor contradicts. Without
it the minimal pairs teach "another number -> contradiction" and a number the premise never mentions drifts
toward contradiction too (ablation arm G, docs/explainer.md).

The choice of sentences and edits depends only on the passage text (a `random.Random` seeded by its hash), so
adding passages never changes the pairs of others.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

from training.data.curriculum import _SENTENCE, CURRICULUM_DIR, read_task
from training.data.nli import CONTRADICTION, ENTAILMENT, NEUTRAL, _nli_adapter, _rec
from training.data.synthetic import _NUMBER, _date_edits, _number_edits

PER_PASSAGE = 2
NEIGHBOURS = 1
MIN_WORDS, MAX_WORDS = 6, 60


def _edits(sentence: str, passage: str, rng: random.Random):
    return _date_edits(sentence, passage, rng) + _number_edits(sentence, passage, rng)


def _numbers(text: str) -> set[str]:
    return {m.group() for m in _NUMBER.finditer(text)}


def _picks(passage: str) -> tuple[list[str], list[int], list[int], random.Random]:
    """The passage's sentences, those usable (a number / year / month, MIN_WORDS-MAX_WORDS words), the ones
    picked, and the passage's rng after picking (seeded by the passage text)."""
    rng = random.Random(hashlib.sha256(passage.encode("utf-8")).hexdigest())
    sentences = [x.strip() for x in _SENTENCE.findall(passage) if x.strip()]
    usable = [i for i, x in enumerate(sentences)
              if MIN_WORDS <= len(x.split()) <= MAX_WORDS and _edits(x, passage, random.Random(0))]
    return sentences, usable, sorted(rng.sample(usable, min(PER_PASSAGE, len(usable)))), rng


def _premise(sentences: list[str], i: int) -> str:
    return " ".join(sentences[max(0, i - NEIGHBOURS): i + NEIGHBOURS + 1])


def swap_pairs(passage: str, key: str) -> Iterator:
    """The entailment / contradiction pairs of one passage (PairRecords, meta pair_id `number_swap:KEY:i:e|c`)."""
    sentences, _, picks, rng = _picks(passage)
    for i in picks:
        sentence = sentences[i]
        edit = rng.choice(_edits(sentence, passage, rng))
        changed = sentence[:edit.start] + edit.replacement + sentence[edit.end:]
        if changed == sentence:
            continue
        premise = _premise(sentences, i)
        # train_only: the two pairs share a premise, so a row-level dev/test split would leak one into the other
        meta = {"domain": "number_swap", "transform": edit.transform, "train_only": True}
        yield _rec(premise, sentence, ENTAILMENT, pair_id=f"number_swap:{key}:{i}:e", **meta)
        yield _rec(premise, changed, CONTRADICTION, pair_id=f"number_swap:{key}:{i}:c", **meta)


def neutral_pairs(passage: str, key: str) -> Iterator:
    """For each sentence swap_pairs picks: its premise against a usable sentence of the same passage outside it
    (more than NEIGHBOURS + 1 away) sharing none of its numbers (neutral; pair_id `number_swap:KEY:i:n`)."""
    sentences, usable, picks, _ = _picks(passage)
    for i in picks:
        premise = _premise(sentences, i)
        shown = _numbers(premise)
        far = [j for j in usable if abs(j - i) > NEIGHBOURS + 1 and not _numbers(sentences[j]) & shown]
        if far:
            j = far[int(hashlib.sha256(f"{key}:{i}".encode()).hexdigest(), 16) % len(far)]
            yield _rec(premise, sentences[j], NEUTRAL, pair_id=f"number_swap:{key}:{i}:n", domain="number_swap",
                       transform="other_sentence", train_only=True)


def _passages(data_dir: Path) -> Iterator[tuple[str, str]]:
    """(passage, key) for each distinct ConTRoL training passage."""
    seen = set()
    for rec in read_task(data_dir, "control", "train", window=False):
        digest = hashlib.sha256(rec.premise.encode("utf-8")).hexdigest()[:16]
        if digest not in seen:
            seen.add(digest)
            yield rec.premise, digest


def read_number_swap(data_dir: Path) -> Iterator:
    for passage, key in _passages(data_dir):
        yield from swap_pairs(passage, key)


def read_number_swap_neutral(data_dir: Path) -> Iterator:
    for passage, key in _passages(data_dir):
        yield from neutral_pairs(passage, key)


_nli_adapter("number_swap", [f"{CURRICULUM_DIR}/control.zip"], read_number_swap,
             description="number-swap minimal pairs from ConTRoL training passages (three-way: entailment / "
                         "contradiction; a number, year or month changed)")
_nli_adapter("number_swap_neutral", [f"{CURRICULUM_DIR}/control.zip"], read_number_swap_neutral,
             description="the neutral counterpart of number_swap: the same premises against a number-bearing "
                         "sentence of the same passage outside them")
