"""Evaluate an Explainer run dir (or any NLI sequence classifier) on the standard NLI sets and on grounding.

    python -m eval.explainer --model runs/explainer-offline --out runs/explainer-offline/eval
    python -m eval.explainer --model tasksource/ModernBERT-base-nli --out runs/eval-tasksource   # Hub reference

Three-way sets (MNLI dev matched/mismatched, SNLI test, ANLI dev R1-R3, SICK test, and the run's own held-out
mixture split `run_test`): accuracy, macro-F1, confusion matrix. Binary sets (SummEdits test, BEGIN test, WiCE
claims test, RTE dev, MED): the premise is the source document / knowledge, the hypothesis the claim;
"supported" means the Explainer's verdict is entailment. Long premises are cut exactly as the inference stack
does (inference.explain.premise_candidates: the best windows + the best sentences; verdict by
inference.explain.combine_nli: entailed by a candidate -> supported); the score for ROC-AUC is the highest
entailment probability over the candidates.
An evaluation set the run trained on (metrics.json `data.trained_on_eval_sets`, e.g. MNLI dev-mismatched in
the offline recipe) is skipped with that reason.

Writes OUT/metrics.json, OUT/report.md, OUT/predictions.jsonl and OUT/confusion_matrices.png. The model's label
names are matched to entailment/neutral/contradiction by name, so models with another label order (e.g.
DeBERTa MNLI checkpoints) are scored correctly.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

from inference.explain import combine_nli, context_sentences
from inference.formatting import nli_pair
from inference.hub import WEIGHT_PATTERNS, ModelRefError, resolve_model
from inference.labels import EXPLAINER_LABELS, LabelMapError, NliLabelMap
from inference.runners import trained_length
from inference.settings import ExplainerSettings
from inference.stages.explainer import premises_for
from training.data.base import DataError, get_adapter, numbered_jsonl, resolve_data_dir
from training.data.nli import EVAL_SETS
from training.data.records import PairRecord
from training.hardware import hardware
from training.metrics import classification_metrics
from training.models import BaseModelError
from training.predict import model_labels

log = logging.getLogger("halugate.eval.explainer")

# Published accuracies shown beside ours in report.md (not re-measured here; see docs/explainer.md).
REFERENCES = {
    "tasksource/ModernBERT-base-nli": {"mnli_dev_matched": 0.87, "mnli_dev_mismatched": 0.87, "snli_test": 0.83,
                                       "anli_r1_dev": 0.66, "anli_r2_dev": 0.49, "anli_r3_dev": 0.44},
    "DeBERTa-v3-base NLI (~)": {"mnli_dev_matched": 0.90, "mnli_dev_mismatched": 0.90},
}
RUN_TEST = "run_test"  # the run dir's own held-out mixture split (RUN_DIR/test.jsonl)
BINARY_LABELS = ["supported", "not_supported"]


class EvalError(ValueError):
    """Bad arguments or an unusable model; the message says which."""


# ---- label alignment and metrics ---------------------------------------------------------------------------------

def align_labels(model_label_names: list[str]) -> list[int]:
    """Column index in the model's output of each of entailment, neutral, contradiction (matched by name)."""
    try:
        nli = NliLabelMap(list(model_label_names), "the model")
    except LabelMapError as exc:
        raise EvalError(f"{exc}; only three-way NLI classifiers can be evaluated") from None
    if nli.two_way:
        raise EvalError(f"the model's labels {model_label_names} are two-way (entailment / not_entailment); only "
                        "three-way NLI classifiers can be evaluated here (the runtime reads two-way ones)")
    return nli.columns


def binary_metrics(supported_true, supported_pred, score, groups=None) -> dict:
    """Supported-vs-not metrics. supported_* are booleans; `score` is P(supported) for ROC-AUC."""
    from sklearn.metrics import (
        accuracy_score,
        balanced_accuracy_score,
        confusion_matrix,
        f1_score,
        roc_auc_score,
    )

    y = np.asarray(supported_true, dtype=bool)
    p = np.asarray(supported_pred, dtype=bool)
    s = np.asarray(score, dtype=float)
    # Class 0 = supported, 1 = not supported (rows: gold, columns: predicted), as BINARY_LABELS.
    yt, yp = (~y).astype(int), (~p).astype(int)
    out = {
        "n": len(y),
        "supported_rate": float(y.mean()) if len(y) else 0.0,
        "accuracy": float(accuracy_score(yt, yp)) if len(y) else 0.0,
        "balanced_accuracy": float(balanced_accuracy_score(yt, yp)) if len(set(yt.tolist())) > 1 else None,
        "macro_f1": float(f1_score(yt, yp, labels=[0, 1], average="macro", zero_division=0)),
        "roc_auc": float(roc_auc_score(y.astype(int), s)) if len(set(y.tolist())) > 1 else None,
        "confusion_matrix": {"labels": BINARY_LABELS, "matrix": confusion_matrix(yt, yp, labels=[0, 1]).tolist()},
    }
    if groups is not None:
        per = {}
        for g in sorted(set(groups)):
            idx = [i for i, x in enumerate(groups) if x == g]
            hits = (yt[idx] == yp[idx])
            per[g] = {"n": len(idx), "accuracy": float(hits.mean()),
                      "balanced_accuracy": (float(balanced_accuracy_score(yt[idx], yp[idx]))
                                            if len(set(yt[idx].tolist())) > 1 else None)}
        out["per_group"] = per
    return out


# ---- scoring -------------------------------------------------------------------------------------------------

def score_three_way(model, rows: list[PairRecord], perm: list[int], args) -> tuple[dict, np.ndarray]:
    from training.predict import predict_proba  # tests patch training.predict.predict_proba

    probs = predict_proba(model, [r.premise for r in rows], [r.hypothesis for r in rows],
                          batch_size=args.batch_size, max_length=args.max_length, device=args.device,
                          desc=args.current)[:, perm]
    y = [r.label for r in rows]
    return classification_metrics(y, probs.argmax(-1), EXPLAINER_LABELS), probs


def grounding_windows(tokenizer, premise: str, hypothesis: str, max_length: int, settings: ExplainerSettings
                      ) -> list[str]:
    """The premises the inference stack would score for this hypothesis (inference.stages.explainer.premises_for,
    the runtime's own candidates): the `max_premise_windows` best windows of `premise_window_tokens` (0: all
    that fit the pair) and the `max_premise_sentences` best sentences."""
    found = premises_for(tokenizer, max_length, settings, premise, "", hypothesis)
    return [p.text for p in found.pick(settings.max_premise_windows, settings.max_premise_sentences)]


def claim_sentences(hypothesis: str) -> list[str]:
    """The sentences of a multi-sentence claim (a summary), split as the runtime splits a context
    (inference.explain.context_sentences); the claim itself when it has one sentence or none is found."""
    parts = [hypothesis[a:b] for a, b in context_sentences(hypothesis)]
    return parts or [hypothesis]


def premise_settings(args) -> ExplainerSettings:
    """The premise candidates the CLI asks for (its defaults are ExplainerSettings'; 0 for a caller without them)."""
    return ExplainerSettings(max_premise_windows=args.max_premise_windows,
                             max_premise_sentences=getattr(args, "max_premise_sentences", 0),
                             premise_window_tokens=getattr(args, "premise_window_tokens", 0))


def score_binary(model, rows: list[PairRecord], perm: list[int], args) -> tuple[dict, list[dict]]:
    from training.predict import load_classifier, predict_proba  # tests patch training.predict

    _, tokenizer, _ = load_classifier(str(model), args.device)
    flat_p, flat_h, owner = [], [], []
    settings = premise_settings(args)
    split = getattr(args, "hypothesis", "whole") == "sentences"
    for i, r in enumerate(rows):
        for j, claim in enumerate(claim_sentences(r.hypothesis) if split else [r.hypothesis]):
            for w in grounding_windows(tokenizer, r.premise, claim, args.max_length, settings):
                flat_p.append(w)
                flat_h.append(claim)
                owner.append((i, j))
    probs = predict_proba(model, flat_p, flat_h, batch_size=args.batch_size, max_length=args.max_length,
                          device=args.device, desc=args.current)[:, perm]
    # row -> claim (sentence) -> its candidates' probabilities, in one pass over the pairs
    by_row: list[dict[int, list[np.ndarray]]] = [{} for _ in rows]
    for (i, j), p in zip(owner, probs):
        by_row[i].setdefault(j, []).append(p)
    verdicts, scores, details = [], [], []
    for i in range(len(rows)):
        claims = [np.asarray(v) for v in by_row[i].values()]
        judged = [combine_nli(list(p), EXPLAINER_LABELS) for p in claims]
        # supported only when every sentence is (what the runtime's sentence hypotheses would find); otherwise the
        # verdict of the least supported sentence, contradiction before neutral
        worst = min(range(len(judged)), key=lambda k: (judged[k][0] == "entailment", judged[k][0] == "neutral",
                                                       float(claims[k][:, 0].max())))
        label, conf = judged[worst]
        verdicts.append(label)
        scores.append(min(float(p[:, 0].max()) for p in claims))
        details.append({"windows": sum(len(p) for p in claims), "sentences": len(claims), "verdict": label,
                        "confidence": conf})
    gold = [r.label == 0 for r in rows]
    m = binary_metrics(gold, [v == "entailment" for v in verdicts], scores,
                       groups=[r.meta.get("domain") or r.source for r in rows])
    m["windows_per_example"] = float(np.mean([d["windows"] for d in details])) if details else 0.0
    m["verdicts"] = {lab: verdicts.count(lab) for lab in EXPLAINER_LABELS}
    return m, [{**d, "p_entailment": s} for d, s in zip(details, scores)]


# ---- data ----------------------------------------------------------------------------------------------------

def load_set(name: str, model: str, data_dir) -> list[PairRecord]:
    if name == RUN_TEST:
        path = Path(model) / "test.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (only run dirs written by training.explainer have it)")
        rows = [PairRecord.from_dict(r, f"{path}:{i}") for i, r in numbered_jsonl(path)]
        return [r for r in rows if r.label in (0, 1, 2)]
    rows = get_adapter(name, kind="nli").load(data_dir)
    for r in rows:
        r.premise, r.hypothesis = nli_pair(r.premise, r.hypothesis)
    return rows


def trained_eval_sets(model: str) -> list[str]:
    """Evaluation sets the run trained on (training.explainer records them in metrics.json, e.g. MNLI
    dev-mismatched): scored, they would be training-set figures, so they are skipped."""
    path = Path(model) / "metrics.json"
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8")).get("data") or {}
    except (json.JSONDecodeError, AttributeError):
        return []
    return list(data.get("trained_on_eval_sets") or [])


def parse_limits(items: list[str]) -> tuple[int | None, dict[str, int]]:
    default, per_set = None, {}
    for item in items:
        name, _, value = item.rpartition("=")
        try:
            n = int(value)
        except ValueError:
            raise EvalError(f"--limit {item!r}: expected N or SET=N with an integer N") from None
        if n <= 0:
            raise EvalError(f"--limit {item!r}: N must be positive")
        if name:
            per_set[name] = n
        else:
            default = n
    return default, per_set


# ---- report --------------------------------------------------------------------------------------------------

def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def write_report(out: Path, result: dict) -> None:
    refs = list(REFERENCES)
    lines = ["# Explainer evaluation", "",
             f"- model: `{result['model']}`",
             f"- command: `{result['command']}`",
             (f"- data: {result['data_dir'] or 'Hugging Face Hub'}; max_length {result['max_length']}, "
              f"up to {result['max_premise_windows']} premise windows of "
              f"{result.get('premise_window_tokens') or 'pair-filling'} tokens + "
              f"{result.get('max_premise_sentences', 0)} sentences on binary sets"
              + (", each sentence of a claim judged on its own" if result.get("hypothesis") == "sentences" else "")),
             f"- hardware: {result['hardware']}; {result['seconds']:.0f} s", ""]
    three = {k: v for k, v in result["sets"].items() if v.get("kind") == "three_way"}
    binary = {k: v for k, v in result["sets"].items() if v.get("kind") == "binary"}
    if three:
        lines += ["## Three-way NLI", "",
                  "| set | n | accuracy | macro-F1 | " + " | ".join(refs) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(refs)]
        for k, v in three.items():
            ref = [_fmt(REFERENCES[r].get(k)) for r in refs]
            lines.append(f"| {k}{' (sample)' if v.get('sampled_from') else ''} | {v['n']} | {v['accuracy']:.3f} "
                         f"| {v['macro_f1']:.3f} | " + " | ".join(ref) + " |")
        lines += ["", "Reference columns are the published accuracies (model cards), not re-measured here.", ""]
    if binary:
        lines += ["## Grounding and two-way sets (supported vs not supported)", "",
                  "| set | n | supported share | accuracy | balanced acc. | macro-F1 | ROC-AUC | windows/example |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k, v in binary.items():
            lines.append(f"| {k}{' (sample)' if v.get('sampled_from') else ''} | {v['n']} | "
                         f"{v['supported_rate']:.3f} | {v['accuracy']:.3f} | {_fmt(v['balanced_accuracy'])} | "
                         f"{v['macro_f1']:.3f} | {_fmt(v['roc_auc'])} | {v['windows_per_example']:.2f} |")
        lines.append("")
    lines += ["## Confusion matrices (rows: gold, columns: predicted)", ""]
    for k, v in {**three, **binary}.items():
        cm = v["confusion_matrix"]
        lines += [f"**{k}**", "", "| gold \\ pred | " + " | ".join(cm["labels"]) + " |",
                  "|---|" + "---:|" * len(cm["labels"])]
        lines += [f"| {lab} | " + " | ".join(str(c) for c in row) + " |" for lab, row in zip(cm["labels"],
                                                                                              cm["matrix"])]
        lines.append("")
    if result["skipped"]:
        lines += ["## Not evaluated", ""] + [f"- {k}: {why}" for k, why in result["skipped"].items()] + [""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")


def plot_confusions(out: Path, sets: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = [(k, v["confusion_matrix"]) for k, v in sets.items() if "confusion_matrix" in v]
    if not items:
        return
    cols = min(4, len(items))
    rows = (len(items) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, cm) in zip(axes.flat, items):
        m = np.asarray(cm["matrix"], dtype=float)
        norm = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
        ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
        short = {"entailment": "ent", "neutral": "neu", "contradiction": "con", "supported": "sup",
                 "not_supported": "not sup"}
        ticks = [short.get(lab, lab) for lab in cm["labels"]]
        ax.set_xticks(range(len(ticks)), ticks)
        ax.set_yticks(range(len(ticks)), ticks)
        for (i, j), c in np.ndenumerate(m):
            ax.text(j, i, int(c), ha="center", va="center", fontsize=8,
                    color="white" if norm[i, j] > 0.6 else "black")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("predicted", fontsize=8)
        ax.set_ylabel("gold", fontsize=8)
    for ax in list(axes.flat)[len(items):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out / "confusion_matrices.png", dpi=110)
    plt.close(fig)


# ---- CLI -----------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.explainer", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="run dir, model dir or Hub id of an NLI classifier")
    p.add_argument("--out", required=True, help="output dir for metrics.json, report.md, predictions.jsonl")
    p.add_argument("--data-dir", help="local data dir (default: $HALUGATE_DATA_DIR, else the Hub)")
    p.add_argument("--sets", nargs="+", default=[*EVAL_SETS, RUN_TEST], metavar="SET",
                   help=f"sets to score (default: all): {', '.join([*EVAL_SETS, RUN_TEST])}")
    p.add_argument("--limit", action="append", default=[], metavar="N|SET=N",
                   help="score a seeded random sample of at most N pairs (all sets, or one set); repeatable")
    p.add_argument("--seed", type=int, default=42, help="seed for --limit samples")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int,
                   help="tokens per (premise window, hypothesis) input (default: the length the model was trained "
                        "at, as the runtime reads it (inference.runners.trained_length), else 256)")
    runtime = ExplainerSettings()  # the binary sets read premises as inference.detect does by default
    p.add_argument("--max-premise-windows", type=int, default=runtime.max_premise_windows,
                   help="binary sets: premise windows scored per example (default: the inference default)")
    p.add_argument("--max-premise-sentences", type=int, default=runtime.max_premise_sentences,
                   help="binary sets: + the context sentences sharing the most words with the claim (default: "
                        "the inference default; 0: windows only)")
    p.add_argument("--premise-window-tokens", type=int, default=runtime.premise_window_tokens,
                   help="binary sets: tokens per premise window (default: the inference default; 0: as many as "
                        "fit the pair, the rule before 2026-12-05)")
    p.add_argument("--hypothesis", default="whole", choices=["whole", "sentences"],
                   help="binary sets: judge the claim whole (default), or each of its sentences against its own "
                        "premise candidates, supported only when every sentence is (as the runtime judges a "
                        "flagged span's sentence)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    return p


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    try:  # a run dir, a model dir or a Hub id (inference.hub: downloaded into the Hugging Face cache)
        args.model = str(resolve_model(args.model, patterns=WEIGHT_PATTERNS))
    except ModelRefError as exc:
        raise EvalError(f"--model {exc}") from None
    args.max_length = args.max_length or trained_length(args.model) or 256
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    unknown = [s for s in args.sets if s not in EVAL_SETS and s != RUN_TEST]
    if unknown:
        raise EvalError(f"--sets: unknown set {unknown[0]!r} (known: {', '.join([*EVAL_SETS, RUN_TEST])})")
    default_limit, set_limits = parse_limits(args.limit)
    bad = [s for s in set_limits if s not in args.sets]
    if bad:
        raise EvalError(f"--limit {bad[0]}=...: {bad[0]!r} is not among the sets being scored")
    data_dir = resolve_data_dir(args.data_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        perm = align_labels(model_labels(args.model))
    except OSError as exc:
        raise EvalError(f"--model {args.model}: cannot load a model config ({str(exc).splitlines()[0]})") from None

    started = time.time()
    sets, skipped = {}, {}
    for name in trained_eval_sets(args.model):
        if name in args.sets:
            skipped[name] = "the run trained on it (metrics.json data.trained_on_eval_sets): not held out"
            log.warning("skipping %s: %s", name, skipped[name])
    args.sets = [s for s in args.sets if s not in skipped]
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as pred_fh:
        for name in args.sets:
            kind = "three_way" if name == RUN_TEST else EVAL_SETS[name]
            try:
                rows = load_set(name, args.model, data_dir)
            except (DataError, FileNotFoundError) as exc:
                skipped[name] = str(exc).splitlines()[0][:300]
                log.warning("skipping %s: %s", name, skipped[name])
                continue
            limit = set_limits.get(name, default_limit)
            sampled_from = None
            if limit is not None and len(rows) > limit:
                sampled_from = len(rows)
                rows = random.Random(args.seed).sample(rows, limit)
            log.info("%s: %d pairs (%s)%s", name, len(rows), kind,
                     f", sampled from {sampled_from}" if sampled_from else "")
            args.current = name
            if kind == "three_way":
                m, probs = score_three_way(args.model, rows, perm, args)
                preds = [{"set": name, "i": i, "gold": r.label, "pred": int(p.argmax()),
                          "probs": [round(float(x), 4) for x in p]} for i, (r, p) in enumerate(zip(rows, probs))]
            else:
                m, details = score_binary(args.model, rows, perm, args)
                preds = [{"set": name, "i": i, "gold_supported": r.label == 0, **d}
                         for i, (r, d) in enumerate(zip(rows, details))]
            m.update(kind=kind, sampled_from=sampled_from)
            sets[name] = m
            pred_fh.writelines(json.dumps(p) + "\n" for p in preds)
            log.info("%s: accuracy %.4f macro-F1 %.4f", name, m["accuracy"], m["macro_f1"])
    if not sets:
        raise EvalError("no evaluation set could be loaded: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    result = {
        "model": args.model,
        "command": "python -m eval.explainer " + " ".join(sys.argv[1:] if argv is None else argv),
        "data_dir": str(data_dir) if data_dir else None, "hardware": hardware(), "max_length": args.max_length,
        "max_premise_windows": args.max_premise_windows, "max_premise_sentences": args.max_premise_sentences,
        "premise_window_tokens": args.premise_window_tokens, "hypothesis": args.hypothesis, "seed": args.seed,
        "seconds": time.time() - started,
        "sets": sets, "skipped": skipped, "references": REFERENCES,
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    write_report(out, result)
    plot_confusions(out, sets)
    print((out / "report.md").read_text(encoding="utf-8"))
    return result


def cli(argv=None) -> int:
    try:
        main(argv)
    except (EvalError, DataError, BaseModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
