"""Curriculum NLI (Chen & Gao, NAACL 2022): 36 recast NLI tasks, one zip per task under `curriculum_nli/`.

Every zip holds `<task>/train.jsonl` and `<task>/val.jsonl` (rows: premise, hypothesis, gold_label, idx) plus
macOS junk (`__MACOSX/...`, `._*` resource forks, `.DS_Store`), which is skipped. Adapters:

- `curriculum_<task>`: the train split of every task.
- `curriculum_<task>_val`: the val split of the seven three-way tasks (extra three-way training data; the
  Curriculum val splits are not evaluation sets here).

Label mappings (explicit; an unknown label is an error naming zip, member and line):

- three-way tasks (THREE_WAY_TASKS): entailment / neutral / contradiction as they are.
- two-way tasks: `entailed` -> entailment, `not-entailed` -> NOT_ENTAILMENT (the two-way loss mask).
- `monotonicity_infer` train: labels are written `entailment` / `neutral`, but the task is two-way (HELP-style
  monotonicity: "neutral" means "not entailed", contradictions included), so `neutral` -> NOT_ENTAILMENT.
  Its val split is mostly MED (5,369 of 6,382 pairs verbatim, PROVENANCE.md), an evaluation set: it is never
  read (`read_task(..., "monotonicity_infer", "val")` raises).

ConTRoL (`control`) premises are passages of ~2.7k characters (~600 tokens). They are windowed, not cut at a
fixed position: the premise keeps the sentences that share the most content words with the hypothesis, in
document order, within CONTROL_PREMISE_WORDS words (about 210 MiniLM tokens, so premise + hypothesis fit
max_length 256). A label whose evidence sits in a dropped sentence can be wrong after windowing (an entailment
or contradiction read against sentences that no longer hold the evidence); ranking by overlap keeps the
sentences most likely to hold it, the same rule the inference stack uses to choose premise windows.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from inference.grounding import content_words
from training.data.base import DataError
from training.data.nli import (
    CONTRADICTION,
    ENTAILMENT,
    NEUTRAL,
    NOT_ENTAILMENT,
    _nli_adapter,
    _rec,
    map_label,
)

CURRICULUM_DIR = "curriculum_nli"
THREE_WAY_TASKS = ("boolean", "comparative", "conditional", "counting", "negation", "quantifier", "control")
TWO_WAY_TASKS = (
    "analytic", "context_align", "coreference", "cosmoqa", "counterfactual", "defeasible", "drop",
    "entailment_tree", "ester", "hellaswag", "hypernymy", "hyponymy", "kg_relations", "lexical", "logiqa",
    "monotonicity_infer", "ner", "physicalqa", "puns", "sentiment", "socialqa", "spatial", "sprl",
    "syntactic_alternation", "syntactic_variation", "temporal", "transitive", "verbcorner", "verbnet",
)
TASKS = THREE_WAY_TASKS + TWO_WAY_TASKS
# PROVENANCE.md: the most NLI-like two-way tasks (the others are templated or odd recasts).
NLI_LIKE_TWO_WAY = ("logiqa", "defeasible", "monotonicity_infer", "drop", "cosmoqa", "ester", "entailment_tree")

LABELS_THREE_WAY = {"entailment": ENTAILMENT, "neutral": NEUTRAL, "contradiction": CONTRADICTION}
LABELS_TWO_WAY = {"entailed": ENTAILMENT, "not-entailed": NOT_ENTAILMENT}
LABELS_MONOTONICITY_TRAIN = {"entailment": ENTAILMENT, "neutral": NOT_ENTAILMENT}
EVAL_LEAKS = {("monotonicity_infer", "val"): "it is mostly MED (5,369 of 6,382 pairs verbatim), an evaluation set"}

CONTROL_PREMISE_WORDS = 160
_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+[\"')\]]*|$)")


def task_labels(task: str, split: str) -> dict:
    if task == "monotonicity_infer" and split == "train":
        return LABELS_MONOTONICITY_TRAIN
    return LABELS_THREE_WAY if task in THREE_WAY_TASKS else LABELS_TWO_WAY


def is_junk(name: str) -> bool:
    """macOS archive debris: __MACOSX/ entries, AppleDouble `._*` files, .DS_Store, folders."""
    parts = PurePosixPath(name).parts
    return (name.endswith("/") or not parts or parts[0] == "__MACOSX" or parts[-1].startswith("._")
            or parts[-1] == ".DS_Store")


def _member(zf: zipfile.ZipFile, path: Path, task: str, split: str) -> str:
    want = f"{split}.jsonl"
    found = [n for n in zf.namelist() if not is_junk(n) and PurePosixPath(n).name == want]
    preferred = [n for n in found if PurePosixPath(n).parts[0] == task]
    if len(preferred or found) != 1:
        real = [n for n in zf.namelist() if not is_junk(n)]
        raise DataError(f"curriculum_{task}: {path}: expected exactly one {task}/{want} (junk entries skipped), "
                        f"found {found or 'none'} among {real}")
    return (preferred or found)[0]


def window_premise(premise: str, hypothesis: str, max_words: int) -> str:
    """The premise sentences sharing the most content words with the hypothesis, in document order, within
    `max_words` words (the best sentence alone is cut to `max_words` if it is longer)."""
    words = premise.split()
    if len(words) <= max_words:
        return premise
    sentences = [s.strip() for s in _SENTENCE.findall(premise) if s.strip()]
    target = content_words(hypothesis)
    order = sorted(range(len(sentences)), key=lambda i: (-len(target & content_words(sentences[i])), i))
    kept, used = [], 0
    for i in order:
        n = len(sentences[i].split())
        if used + n <= max_words:
            kept.append(i)
            used += n
        elif not kept:
            return " ".join(sentences[i].split()[:max_words])
    return " ".join(sentences[i] for i in sorted(kept))


def read_task(data_dir: Path, task: str, split: str = "train", window: bool = True) -> Iterator[dict]:
    """NLI records of one Curriculum task split, read from its zip (junk entries skipped); `window=False` keeps
    ConTRoL's whole passages."""
    if (task, split) in EVAL_LEAKS:
        raise DataError(f"curriculum_nli {task}/{split}.jsonl is never read: {EVAL_LEAKS[(task, split)]}")
    if task not in TASKS:
        raise DataError(f"curriculum_nli: unknown task {task!r} (known: {', '.join(TASKS)})")
    path = Path(data_dir) / CURRICULUM_DIR / f"{task}.zip"
    mapping = task_labels(task, split)
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"curriculum_{task}: cannot open {path}: {exc}") from None
    with zf:
        member = _member(zf, path, task, split)
        with zf.open(member) as fh:
            for lineno, raw in enumerate(fh, 1):
                line = raw.decode("utf-8").strip()
                if not line:
                    continue
                where = f"{path}:{member}:{lineno}"
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{where}: invalid JSON ({exc.msg})") from None
                missing = [k for k in ("premise", "hypothesis", "gold_label") if k not in r]
                if missing:
                    raise DataError(f"curriculum_{task}: {where}: missing field(s) {', '.join(missing)}")
                label = map_label(r["gold_label"], mapping, f"curriculum_{task}", where)
                premise = str(r["premise"])
                if task == "control" and window:
                    premise = window_premise(premise, str(r["hypothesis"]), CONTROL_PREMISE_WORDS)
                idx = r.get("uid", r.get("idx", r.get("index", lineno)))
                yield _rec(premise, r["hypothesis"], label, pair_id=f"curriculum:{task}:{split}:{idx}",
                           domain=task)


def _register() -> None:
    for task in TASKS:
        kind = "three-way" if task in THREE_WAY_TASKS else "two-way"
        note = {"monotonicity_infer": "; labels entailment/neutral, neutral = not entailed (two-way)",
                "control": f"; ConTRoL passages windowed to the {CONTROL_PREMISE_WORDS} words closest to the "
                           "hypothesis"}.get(task, "")
        _nli_adapter(f"curriculum_{task}", [f"{CURRICULUM_DIR}/{task}.zip"],
                     lambda d, t=task: read_task(d, t, "train"),
                     description=f"Curriculum NLI {task} train ({kind}{note})")
    for task in THREE_WAY_TASKS:
        _nli_adapter(f"curriculum_{task}_val", [f"{CURRICULUM_DIR}/{task}.zip"],
                     lambda d, t=task: read_task(d, t, "val"),
                     description=f"Curriculum NLI {task} val (three-way; extra training data, not an "
                                 "evaluation set here)")


_register()
