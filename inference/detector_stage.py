"""The Detector stage: windows -> token probabilities -> calibrated combination with grounding signals -> spans.

This is the one scoring path: `HaluGate` runs it, and `eval.detector` scores models through it (torch or ONNX
runner alike), so evaluation figures describe the detector that ships.

    scores = score_answers(runner, jobs, settings, calibration)     # one batched model call for all windows
    spans = scores_to_spans(job.answer, scores[i], settings, calibration)

Calibration (`detector.json` next to the model, key "calibration", written by training.detector from a
held-out calibration split, never from a test set):

    {"threshold": 0.42, "window_aggregation": "min",
     "combiner": {"features": ["model_logit", "number_unsupported", ...], "coef": [...], "intercept": -1.3}}

The combiner is a logistic regression over the model's logit and the grounding features of
inference.grounding (plus task-type indicators): P = sigmoid(coef . x + intercept). Without a combiner the
model's probability is used as it is. `DetectorSettings.use_model_calibration` (default true) lets the config
ignore a model's calibration.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from inference.formats import lettuce_spans
from inference.grounding import (
    ANSWER_TYPES,
    COPY_FEATURES,
    FEATURES,
    ContextIndex,
    answer_type_ids,
    token_features,
    unsupported_spans,
    unsupported_word_share,
    word_signals,
)
from inference.runners import Features
from inference.spans import (
    TASK_TYPES,
    WINDOW_FILLS,
    DetectorInput,
    answer_token_probs,
    check_span_extension,
    token_probs_to_spans,
)
from inference.structured import STYLES as STRUCTURED_STYLES
from inference.windowing import context_coverage

log = logging.getLogger("halugate.inference")

CALIBRATION_FILE = "detector.json"
MODEL_FEATURE = "model_logit"
TASK_FEATURES = tuple(f"task={t}" for t in TASK_TYPES)
ALL_FEATURES = (MODEL_FEATURE, *FEATURES, *TASK_FEATURES)
# What training.detector fits by default: the word- and sentence-level absences spread a flag over whole
# sentences (they help example-level detection but blur localisation), so only exact, local signals are used.
DEFAULT_COMBINER_FEATURES = (MODEL_FEATURE, "number_unsupported", "entity_unsupported", "function_word",
                             "falsy_field", *TASK_FEATURES)
_EPS = 1e-6


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


@dataclass
class Combiner:
    """Logistic regression over named token features (see ALL_FEATURES)."""

    features: list[str]
    coef: list[float]
    intercept: float

    def __post_init__(self):
        unknown = sorted(set(self.features) - set(ALL_FEATURES))
        if unknown or len(self.coef) != len(self.features):
            raise ValueError(f"combiner: unknown features {unknown} or {len(self.coef)} coefficients for "
                             f"{len(self.features)} features")

    def apply(self, design: np.ndarray) -> np.ndarray:
        z = design @ np.asarray(self.coef, dtype=np.float64) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))


def design_matrix(model_probs: np.ndarray, grounding: np.ndarray, task_type: str | None,
                  features: list[str] | tuple[str, ...] = ALL_FEATURES) -> np.ndarray:
    """Token feature matrix (n_tokens, len(features)) in the combiner's column order."""
    n = len(model_probs)
    cols = {MODEL_FEATURE: logit(model_probs)}
    for j, name in enumerate(FEATURES):
        cols[name] = grounding[:, j].astype(np.float64) if n else np.zeros(0)
    for t, name in zip(TASK_TYPES, TASK_FEATURES):
        cols[name] = np.full(n, float(task_type == t))
    return np.stack([cols[f] for f in features], axis=1) if n else np.zeros((0, len(features)))


@dataclass
class Calibration:
    threshold: float | None = None
    window_aggregation: str | None = None
    combiner: Combiner | None = None
    source: str = ""  # where it was read from
    task_thresholds: dict[str, float] | None = None  # per task type (QA / Summary / Data2txt), else `threshold`
    smoothing: int = 0  # answer tokens in the moving average of the token probabilities (0 or 1: none)
    # the span extension the thresholds were fitted with (inference.spans.token_probs_to_spans `extend_to` =
    # this x the threshold; 1.0: none, which is also what a calibration written before it existed was fitted with)
    span_extension: float = 1.0

    def __post_init__(self):
        if not isinstance(self.smoothing, int) or isinstance(self.smoothing, bool) or self.smoothing < 0:
            raise ValueError(f"calibration.smoothing: a token count >= 0, got {self.smoothing!r}")
        check_span_extension(self.span_extension, "calibration.span_extension")

    @classmethod
    def from_dict(cls, data: dict | None, source: str = "") -> Calibration:
        if not data:
            return cls(source=source)
        comb = data.get("combiner")
        return cls(threshold=data.get("threshold"), window_aggregation=data.get("window_aggregation"),
                   combiner=Combiner(**comb) if comb else None, source=source,
                   task_thresholds=data.get("task_thresholds") or None, smoothing=data.get("smoothing", 0),
                   span_extension=data.get("span_extension", 1.0))

    def to_dict(self) -> dict:
        out: dict = {"threshold": self.threshold, "window_aggregation": self.window_aggregation,
                     "task_thresholds": self.task_thresholds, "smoothing": self.smoothing,
                     "span_extension": self.span_extension}
        if self.combiner is not None:
            out["combiner"] = {"features": list(self.combiner.features), "coef": list(self.combiner.coef),
                               "intercept": self.combiner.intercept}
        return out


@dataclass
class DetectorJob:
    """One answer to score: its windows (inference.windowing.detector_windows) and the texts."""

    windows: list[DetectorInput]
    answer: str
    context: str
    question: str | None = None
    task_type: str | None = None


# The example score's step per ungrounded term, set before it was measured (2026-12-06, docs/experiments.md): per-task AUROC of the offline recipe's folds 0.77 / 0.66 / 0.61
# -> 0.79 / 0.67 / 0.68 (QA / Summary / Data2txt); 0.80 / 0.67 / 0.65 with the later name rules of the check.
UNGROUNDED_SCORE_STEP = 0.1
UNGROUNDED_SCORE_TERMS = 3


@dataclass
class DetectorScores:
    answer_offsets: list[tuple[int, int]]
    model_probs: np.ndarray  # P(hallucinated) per answer token from the model, windows aggregated
    probs: np.ndarray  # after the combiner (== model_probs without one)
    grounding: np.ndarray = field(default_factory=lambda: np.zeros((0, len(FEATURES))))
    windows: int = 0
    task_type: str | None = None
    window_probs: list[np.ndarray] = field(default_factory=list)  # per window, before aggregation
    signals: str = "all"  # which grounding signals `grounding` holds: "none", "grounding" (no copy signals), "all"
    # the answer's numbers, quantities and names that the context lacks (inference.grounding.unsupported_spans)
    ungrounded: list[dict] = field(default_factory=list)
    # the share of the answer's content words the context lacks (inference.grounding.unsupported_word_share)
    unsupported_share: float = 0.0

    @property
    def score(self) -> float:
        """Example-level score in [0, 1]: the mean of (a) the highest token probability (0 for an empty answer)
        plus UNGROUNDED_SCORE_STEP for each number, quantity or name the context lacks (`ungrounded`, at most
        UNGROUNDED_SCORE_TERMS; (a) at most 1) and (b) the share of the answer's content words the context lacks
        (`unsupported_share`). The check's terms are spans of their own (flag_ungrounded), so the score ranks what
        is flagged; the word share ranks the answers whose unsupported content is no number or name (2026-12-06,
        docs/experiments.md)."""
        top = float(self.probs.max()) if len(self.probs) else 0.0
        model_and_check = min(1.0, top + UNGROUNDED_SCORE_STEP * min(len(self.ungrounded), UNGROUNDED_SCORE_TERMS))
        return (model_and_check + self.unsupported_share) / 2


def load_detector_json(model_dir: str | Path | None) -> tuple[Calibration, str | None, str, str]:
    """What MODEL_DIR/detector.json tells the runtime, read once: the calibration, the window plan the Detector
    was trained with ("window_fill", written by training.detector for the `packed` plan; None: trained on
    contiguous windows), how it reads a context that is one JSON object / array ("structured_context":
    "json" as given, also for models that do not say, or "text", inference.structured), and its answer token
    types ("answer_types": "plain", also for models that do not say, or "grounding"). Without the file: no
    calibration, no plan, "json", "plain"; ValueError when it is unreadable."""
    path = Path(model_dir) / CALIBRATION_FILE if model_dir else None
    if path is None or not path.is_file():
        return Calibration(), None, "json", "plain"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        calibration = Calibration.from_dict(data.get("calibration"), str(path))
        fill = data.get("window_fill")
        structured = data.get("structured_context", "json")
        answer_types = data.get("answer_types", "plain")
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: unreadable calibration ({exc})") from None
    if answer_types not in ANSWER_TYPES:
        raise ValueError(f"{path}: answer_types must be one of {', '.join(ANSWER_TYPES)}, got {answer_types!r}")
    if fill is not None and fill not in WINDOW_FILLS:
        raise ValueError(f"{path}: window_fill must be one of {', '.join(WINDOW_FILLS)}, got {fill!r}")
    if structured not in STRUCTURED_STYLES:
        raise ValueError(f"{path}: structured_context must be one of {', '.join(STRUCTURED_STYLES)}, "
                         f"got {structured!r}")
    return calibration, fill, structured, answer_types


def in_force(settings, calibration: Calibration | None) -> Calibration | None:
    """The model's calibration when the settings allow it (`use_model_calibration`), else None."""
    return calibration if (calibration is not None and getattr(settings, "use_model_calibration", True)) else None


def effective(settings, calibration: Calibration | None, task_type: str | None = None
              ) -> tuple[float, str, Combiner | None]:
    """(threshold, window aggregation, combiner) after applying the model's calibration when allowed; the
    threshold is the task type's own when the calibration has one."""
    cal = in_force(settings, calibration)
    threshold = cal.threshold if cal and cal.threshold is not None else settings.threshold
    if cal and cal.task_thresholds and task_type in cal.task_thresholds:
        threshold = cal.task_thresholds[task_type]
    aggregation = cal.window_aggregation if cal and cal.window_aggregation else settings.window_aggregation
    return threshold, aggregation, cal.combiner if cal else None


def smoothing_of(settings, calibration: Calibration | None) -> int:
    """The calibration's smoothing width when the runtime uses the model's calibration, else none."""
    cal = in_force(settings, calibration)
    return cal.smoothing if cal else 0


def extension_of(settings, calibration: Calibration | None) -> float:
    """The span extension in force: the one the model's calibration was fitted with when the runtime uses it
    (thresholds and extension go together), else the settings' `span_extension`."""
    cal = in_force(settings, calibration)
    return cal.span_extension if cal else settings.span_extension


def smooth(probs: np.ndarray, width: int) -> np.ndarray:
    """Centred moving average over `width` answer tokens (the mean of the neighbours that exist at the edges).

    Why: RAGTruth annotators mark phrases, while per-token probabilities flicker around the threshold inside a
    phrase ("is about 500 meters" flagged as "is about" + "500"); averaging neighbours joins such fragments and
    drops isolated single-token flags. The width is chosen by calibration (0 = none)."""
    p = np.asarray(probs, dtype=np.float64)
    if width <= 1 or len(p) < 2:
        return p
    half = width // 2
    csum = np.concatenate([[0.0], np.cumsum(p)])
    idx = np.arange(len(p))
    lo, hi = np.maximum(idx - half, 0), np.minimum(idx + half + 1, len(p))
    return (csum[hi] - csum[lo]) / (hi - lo)


def aggregate(per_window: list[np.ndarray], how: str) -> np.ndarray:
    stacked = np.stack([np.asarray(p, dtype=np.float64) for p in per_window])
    if how == "min":
        return stacked.min(axis=0)
    if how == "mean":
        return stacked.mean(axis=0)
    return stacked.max(axis=0)


def read_context(context: str, windows: list[DetectorInput]) -> str:
    """The context the grounding signals compare the answer with: what the Detector's windows hold. That is the
    whole context unless `max_windows` (or a packed window) left parts out; then only the text of the windows
    read, so that passages the Detector never saw do not lend their words and numbers to the answer. Measured:
    docs/inference.md, "Long contexts" (a 4K context of mostly unrelated passages otherwise hides
    most flags behind the combiner's grounding signals)."""
    coverage = context_coverage(windows)
    if coverage is None or coverage >= 1.0:
        return context
    chars = [r for w in windows for r in (w.meta.get("context_char_ranges") or [w.context_char_range])]
    return "\n".join(context[a:b] for a, b in sorted(set(chars)))


SIGNALS = ("needed", "all")
SIGNAL_LEVELS = ("none", "grounding", "all")  # DetectorScores.signals, each level holding the one before


def signals_needed(combiner: Combiner | None) -> str:
    """The grounding signals a combiner reads: "none" (no combiner, or one on model and task columns only),
    "grounding" (no copy signals) or "all"."""
    read = set(combiner.features) if combiner is not None else set()
    if read & set(COPY_FEATURES):
        return "all"
    return "grounding" if read & set(FEATURES) else "none"


def score_answers(runner, jobs: list[DetectorJob], settings, calibration: Calibration | None = None,
                  hallucinated_id: int = 1, signals: str = "needed", answer_types: str = "plain"
                  ) -> list[DetectorScores]:
    """Run every window of every job in one batched runner call; combine per token; apply the combiner.

    `answer_types`: the Detector's answer token types (detector.json "answer_types"; "grounding": types 2 / 3 on
    the tokens of words the context lacks, inference.grounding.answer_type_ids).

    `signals`: "needed" computes only the grounding signals the combiner in force reads (none without a combiner:
    the copy signals alone cost ~9 ms at 16K characters); "all" computes every one, for passes whose window
    probabilities are rescored under other combiners afterwards (calibration, cross-validation; `rescore`)."""
    if signals not in SIGNALS:
        raise ValueError(f"signals: one of {', '.join(SIGNALS)}, got {signals!r}")
    if answer_types not in ANSWER_TYPES:
        raise ValueError(f"answer_types: one of {', '.join(ANSWER_TYPES)}, got {answer_types!r}")
    _, aggregation, combiner = effective(settings, calibration)
    computed = "all" if signals == "all" else signals_needed(combiner)
    # the example score reads the word signals whatever the combiner needs (~4.5 ms at 16K characters), and a
    # Detector trained with grounding types reads them as its answer tokens' types: computed before the model
    words_of, windows_of = [], []
    for job in jobs:
        read = read_context(job.context, job.windows)
        words = word_signals(job.answer, ContextIndex(f"{read}\n{job.question or ''}"), copy=computed == "all")
        windows = job.windows
        if answer_types == "grounding" and windows:
            types = answer_type_ids(token_features(words, windows[0].answer_offsets))
            windows = [w.with_answer_types(types) for w in windows]
        words_of.append(words)
        windows_of.append(windows)
    feats = [Features(w.input_ids, w.token_type_ids) for windows in windows_of for w in windows]
    logits = runner.logits(feats) if feats else []
    out, pos = [], 0
    for job, words, windows in zip(jobs, words_of, windows_of):
        per_window = []
        for w in windows:
            per_window.append(answer_token_probs(logits[pos], w, hallucinated_id))
            pos += 1
        offsets = list(windows[0].answer_offsets) if windows else []
        if computed == "none":
            grounding = np.zeros((0, len(FEATURES)), dtype=np.float32)
        else:
            grounding = token_features(words, offsets)
        raw = DetectorScores(offsets, np.zeros(0), np.zeros(0), grounding, len(job.windows), job.task_type,
                             per_window, computed, unsupported_spans(job.answer, job.context, job.question),
                             unsupported_word_share(words))
        out.append(rescore(raw, aggregation, combiner, smoothing_of(settings, calibration)))
    return out


def rescore(scores: DetectorScores, aggregation: str, combiner: Combiner | None, smoothing: int = 0
            ) -> DetectorScores:
    """The same windows' probabilities under another aggregation / combiner / smoothing (no model call)."""
    if not scores.answer_offsets:
        return DetectorScores([], np.zeros(0), np.zeros(0), scores.grounding, scores.windows, scores.task_type,
                              scores.window_probs, scores.signals, scores.ungrounded, scores.unsupported_share)
    model_probs = aggregate(scores.window_probs, aggregation)
    probs = model_probs
    needed = signals_needed(combiner)
    if SIGNAL_LEVELS.index(scores.signals) < SIGNAL_LEVELS.index(needed):
        # zeros in place of signals never computed would silently change the combiner's output
        raise ValueError(f"these scores hold {scores.signals!r} grounding signals, the combiner reads {needed!r}: "
                         "score with signals='all' to rescore under other combiners")
    if combiner is not None:
        probs = combiner.apply(design_matrix(model_probs, scores.grounding, scores.task_type, combiner.features))
    probs = smooth(probs, smoothing)
    return DetectorScores(scores.answer_offsets, model_probs, probs, scores.grounding, scores.windows,
                          scores.task_type, scores.window_probs, scores.signals, scores.ungrounded,
                          scores.unsupported_share)


def scores_to_spans(answer: str, scores: DetectorScores, settings, calibration: Calibration | None = None,
                    threshold: float | None = None) -> list[dict]:
    """Spans from (combined) token probabilities: threshold, span extension, merging, word snapping, the span
    filters."""
    t, _, _ = effective(settings, calibration, scores.task_type)
    t = t if threshold is None else threshold
    if getattr(settings, "span_builder", "halugate") == "lettucedetect":
        # lettucedetect's spans (inference.formats.lettuce_spans): runs of flagged tokens as they are; the length
        # and confidence filters of the config (0 for lettucedetect's own behaviour) apply after it
        raw = [s for s in lettuce_spans(answer, scores.answer_offsets, scores.probs, scores.windows, t)
               if len(s["text"].strip()) >= settings.min_span_length]
    else:
        ratio = extension_of(settings, calibration)
        raw = token_probs_to_spans(answer, scores.answer_offsets, scores.probs, threshold=t,
                                   min_span_chars=max(1, settings.min_span_length),
                                   extend_to=t * ratio if ratio < 1.0 else None)
    spans = [s for s in raw if s["confidence"] >= min(settings.min_span_confidence, t)]
    if settings.flag_ungrounded:
        spans = with_ungrounded(spans, scores)
    return spans


def with_ungrounded(spans: list[dict], scores: DetectorScores) -> list[dict]:
    """`spans` plus each ungrounded term (scores.ungrounded) that none of them overlaps, with the model's mean and
    highest probability over its tokens: the exact check flags "built in 1950" when the context says 1887-1889,
    whatever the model makes of it (docs/detector.md, "Grounding signals and the exact check")."""
    added = []
    for term in scores.ungrounded:
        if any(s["start"] < term["end"] and term["start"] < s["end"] for s in spans):
            continue
        p = np.asarray([q for (a, b), q in zip(scores.answer_offsets, scores.probs)
                        if a < term["end"] and term["start"] < b] or [0.0])
        added.append({"start": term["start"], "end": term["end"], "text": term["text"],
                      "confidence": float(p.mean()), "max_prob": float(p.max())})
    return sorted(spans + added, key=lambda s: s["start"]) if added else spans
