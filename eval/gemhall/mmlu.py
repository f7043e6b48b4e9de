"""MMLU as gemhall items: local hendrycks CSVs or `cais/mmlu` from the Hub, sampled and IDK-converted.

Local layout (header-less CSV: question, A, B, C, D, answer):
    $HALUGATE_DATA_DIR/mmlu/data/{dev,val,test}/<subject>_{dev,val,test}.csv
`--split validation` reads the `val` folder. Sampling and the IDK conversion both draw from one
`random.Random(seed)`, so a seed fixes exactly which items are asked and which are made unanswerable.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from training.data.base import DATA_DIR_ENV, DataError, resolve_data_dir

from .data import Item, numbered_rows

LETTERS = ("A", "B", "C", "D")
SPLITS = ("test", "validation", "dev")
SPLIT_DIRS = {"test": "test", "validation": "val", "dev": "dev"}
HUB_DATASET = "cais/mmlu"
MMLU_SUBJECTS = ["abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge", "college_biology", "college_chemistry", "college_computer_science", "college_mathematics", "college_medicine", "college_physics", "computer_security", "conceptual_physics", "econometrics", "electrical_engineering", "elementary_mathematics", "formal_logic", "global_facts", "high_school_biology", "high_school_chemistry", "high_school_computer_science", "high_school_european_history", "high_school_geography", "high_school_government_and_politics", "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics", "high_school_physics", "high_school_psychology", "high_school_statistics", "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality", "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management", "marketing", "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy", "prehistory", "professional_accounting", "professional_law", "professional_medicine", "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy", "virology", "world_religions"]


@dataclass
class McqRow:
    subject: str
    index: int  # row number within the subject's split, 0-based
    question: str
    choices: list[str]
    answer: str  # letter


def local_split_dir(split: str, data_dir: str | Path | None) -> Path | None:
    root = resolve_data_dir(data_dir)  # --data-dir, else $HALUGATE_DATA_DIR, as for every dataset
    if root is None:
        return None
    path = root / "mmlu" / "data" / SPLIT_DIRS[split]
    return path if path.is_dir() else None


def _select_subjects(available: Sequence[str], subjects: Sequence[str], source: str) -> list[str]:
    if not subjects or list(subjects) == ["all"] or "all" in subjects:
        return list(available)
    unknown = [s for s in subjects if s not in available]
    if unknown:
        raise DataError(f"--subjects: unknown MMLU subject(s) {', '.join(unknown)} in {source} "
                        f"(known: {', '.join(available)})")
    return list(dict.fromkeys(subjects))


def load_local(split_dir: Path, split: str, subjects: Sequence[str]) -> list[McqRow]:
    suffix = f"_{SPLIT_DIRS[split]}.csv"
    available = sorted(p.name[: -len(suffix)] for p in split_dir.glob(f"*{suffix}"))
    if not available:
        raise DataError(f"{split_dir}: no *{suffix} files")
    rows: list[McqRow] = []
    for subject in _select_subjects(available, subjects, str(split_dir)):
        path = split_dir / f"{subject}{suffix}"
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            index = 0
            for line, rec in numbered_rows(reader, path):
                if not rec:
                    continue
                if len(rec) != 6:
                    raise DataError(f"{path}: line {line}: {len(rec)} fields, expected 6 "
                                    "(question, A, B, C, D, answer)")
                answer = rec[5].strip().upper()
                if answer not in LETTERS:
                    raise DataError(f"{path}: line {line}, column 6 (answer): expected A-D, got {rec[5]!r}")
                rows.append(McqRow(subject, index, rec[0], [c for c in rec[1:5]], answer))
                index += 1
    return rows


def load_hub(split: str, subjects: Sequence[str]) -> list[McqRow]:
    """`cais/mmlu`: the `all` config, else each subject config concatenated (a `subject` column added)."""
    import datasets

    wanted = _select_subjects(MMLU_SUBJECTS, subjects, HUB_DATASET)
    try:
        parts = [datasets.load_dataset(HUB_DATASET, "all", split=split)]
    except Exception as all_exc:  # noqa: BLE001 -- any failure (offline, no `all` config): go per subject
        parts = []
        for subject in wanted:
            try:
                ds = datasets.load_dataset(HUB_DATASET, subject, split=split)
            except Exception as exc:  # noqa: BLE001 -- reported with both causes
                raise DataError(f"{HUB_DATASET}: cannot load split {split!r} ('all': {all_exc}; "
                                f"{subject!r}: {exc}). Offline? Set {DATA_DIR_ENV} to the data folder "
                                f"with the local MMLU copy (mmlu/data/).") from None
            if "subject" not in ds.column_names:
                ds = ds.add_column("subject", [subject] * len(ds))
            parts.append(ds)
    rows: list[McqRow] = []
    counters: dict[str, int] = {}
    keep = set(wanted)
    for ds in parts:
        for rec in ds:
            subject = rec["subject"]
            if subject not in keep:
                continue
            answer = rec["answer"]
            letter = LETTERS[answer] if isinstance(answer, int) else str(answer).strip().upper()
            index = counters.get(subject, 0)
            counters[subject] = index + 1
            rows.append(McqRow(subject, index, rec["question"], list(rec["choices"]), letter))
    return rows


def load_mmlu_rows(split: str, subjects: Sequence[str] = ("all",), data_dir: str | Path | None = None) -> list[McqRow]:
    if split not in SPLITS:
        raise DataError(f"--split: expected one of {', '.join(SPLITS)}, got {split!r}")
    split_dir = local_split_dir(split, data_dir)
    if split_dir is not None:
        return load_local(split_dir, split, subjects)
    if data_dir:
        raise DataError(f"--data-dir {data_dir}: no MMLU split folder {Path(data_dir) / 'mmlu/data' / SPLIT_DIRS[split]}")
    return load_hub(split, subjects)


def format_mcq(question: str, choices: Sequence[str]) -> str:
    options = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, choices))
    return (question.strip() + "\n\n" + options
            + "\n\nAnswer with the letter of the correct option (A, B, C or D).")


def make_unanswerable(row: McqRow, rng: random.Random) -> McqRow:
    """Overwrite the correct option with a copy of a random distractor: no option is right any more."""
    correct = LETTERS.index(row.answer)
    distractor = rng.choice([i for i in range(len(row.choices)) if i != correct])
    choices = list(row.choices)
    choices[correct] = choices[distractor]
    return McqRow(row.subject, row.index, row.question, choices, "")


def build_mmlu_items(
    rows: Sequence[McqRow], *, split: str, limit: int | None = None, idk_frac: float = 0.0, seed: int = 1234,
) -> list[Item]:
    if not 0.0 <= idk_frac <= 1.0:
        raise DataError(f"--idk-frac: expected a fraction in [0, 1], got {idk_frac}")
    rng = random.Random(seed)
    rows = list(rows)
    if limit is not None and limit < len(rows):
        rows = rng.sample(rows, limit)
    n_idk = round(idk_frac * len(rows))
    unanswerable = set(rng.sample(range(len(rows)), n_idk))
    items = []
    for i, row in enumerate(rows):
        if i in unanswerable:
            row = make_unanswerable(row, rng)
        items.append(Item(
            id=f"{row.subject}/{split}/{row.index}",
            question=format_mcq(row.question, row.choices),
            gold=row.answer,
            unknown_ok=not row.answer,
            category=row.subject if row.answer else f"{row.subject}|unanswerable",
            choices=dict(zip(LETTERS, row.choices)),
        ))
    return items
