"""How the Explainer should read a long context: which premise candidates, and which verdict rule, on dev rows.

    python scripts/nli_premise_sweep.py --model runs/explainer-mpnet-s25-onnx --data-dir ../shared/data \
        --sets wice_dev summedits begin --per-set 350 --out runs/nli-sweep

For each sampled dev row (premise = a long document, hypothesis = a claim; gold: supported or not) it scores,
once, through the runtime's ONNX runner, every candidate the grid below can pick: the 4 best premise windows
filling the Explainer's pair (256 tokens for the offline recipe; the rule before 2026-12-05), the 4 best windows
of 96 tokens, and the 8 best context sentences, each found by the runtime's own premise_set (ranked by shared
content words). It then prints, for
every combination (k long windows, k short windows, m sentences) and verdict rule, the balanced accuracy of
"supported" and the ROC-AUC of the highest entailment probability, per set, with the pairs read per row.

Only dev rows the shipped Explainer never trained on are read: WiCE dev (registered for tuning, in no recipe),
and the rows of SummEdits' 'evaluation' split and of BEGIN dev longer than the offline recipe's max_chars (1000
characters), which that filter kept out of training. The test sets (wice_test, summedits_test, begin_test) are
for eval.explainer, after a choice is made here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from inference.explain import VERDICT_PROBABILITY
from inference.formatting import nli_pair
from inference.runners import ModelLoadError, OnnxRunner
from inference.settings import ExplainerSettings
from inference.stages.explainer import premise_set
from training.data.base import DataError, get_adapter, resolve_data_dir

TRAINED_MAX_CHARS = 1000  # configs/explainer.offline.yaml data.max_chars: longer pairs never reached training
FILTERED_SETS = {"summedits", "begin"}  # in the offline mixture, so only their longer rows are unseen
SETS = ["wice_dev", "summedits", "begin"]
CANDIDATES = {"w256": 4, "w96": 4, "sent": 8}  # kind -> how many of the best are scored


def verdict_rules(e: int, c: int) -> dict:
    """Per-row "supported" decisions from the candidates' probabilities (rows: candidates)."""
    return {"argmax (before)": lambda p: bool((p.argmax(1) == e).any()),
            f"p(entailment) >= {VERDICT_PROBABILITY} (now)": lambda p: bool(p[:, e].max() >= VERDICT_PROBABILITY),
            "p(entailment) >= 0.7": lambda p: bool(p[:, e].max() >= 0.7),
            "max(p(e) - p(c)) > 0": lambda p: bool((p[:, e] - p[:, c]).max() > 0)}


def load_rows(names: list[str], data_dir: Path, per_set: int, seed: int) -> list[tuple[str, object]]:
    rows = []
    for name in names:
        found = get_adapter(name, kind="nli").load(data_dir)
        for r in found:
            r.premise, r.hypothesis = nli_pair(r.premise, r.hypothesis)
        if name in FILTERED_SETS:
            found = [r for r in found if len(r.premise) + len(r.hypothesis) > TRAINED_MAX_CHARS]
        random.Random(seed).shuffle(found)
        rows += [(name, r) for r in found[:per_set]]
    return rows


# How the runtime would read each kind (inference.stages.explainer.premise_set, at the Explainer's pair length).
READINGS = {"w256": ExplainerSettings(max_premise_windows=CANDIDATES["w256"], premise_window_tokens=0,
                                      max_premise_sentences=0),
            "w96": ExplainerSettings(max_premise_windows=CANDIDATES["w96"], premise_window_tokens=96,
                                     max_premise_sentences=0),
            # sentences that are a whole pair-filling window are left out (as the figures in docs/explainer.md
            # were made): they are that window's candidate
            "sent": ExplainerSettings(max_premise_windows=1, premise_window_tokens=0,
                                      max_premise_sentences=CANDIDATES["sent"])}


def candidates(runner, rows) -> list[tuple[int, str, int, str]]:
    """(row, kind, rank, premise text) of every candidate of every row, as the runtime's premise_set finds them
    (no question: these sets have none)."""
    out = []
    for i, (_, r) in enumerate(rows):
        for kind, nm in READINGS.items():
            found = premise_set(runner, nm, r.premise, "", r.hypothesis)
            picked = found.sentences if kind == "sent" else found.pick(nm.max_premise_windows, 0)
            out.extend((i, kind, p.rank, p.text) for p in picked)
    return out


def table(rows, cands, probs, labels) -> list[dict]:
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score

    e, c = labels.index("entailment"), labels.index("contradiction")
    gold = np.array([r.label == 0 for _, r in rows])
    sets = list(dict.fromkeys(name for name, _ in rows))
    out = []
    for k256, k96, m in itertools.product((0, 1, 2, 4), (0, 1, 2, 4), (0, 1, 2, 4, 8)):
        if k256 + k96 + m == 0:
            continue
        limit = {"w256": k256, "w96": k96, "sent": m}
        read = [[] for _ in rows]
        for j, (i, kind, rank, _) in enumerate(cands):
            if rank < limit[kind]:
                read[i].append(j)
        ps = [probs[js] for js in read]
        best = np.array([p[:, e].max() if len(p) else 0.0 for p in ps])
        for rule, f in verdict_rules(e, c).items():
            pred = np.array([f(p) if len(p) else False for p in ps])
            per = {}
            for s in sets:
                idx = np.array([name == s for name, _ in rows])
                per[s] = {"balanced_accuracy": round(float(balanced_accuracy_score(gold[idx], pred[idx])), 3),
                          "roc_auc": round(float(roc_auc_score(gold[idx], best[idx])), 3)}
            out.append({"windows_256": k256, "windows_96": k96, "sentences": m, "rule": rule,
                        "pairs_per_row": round(float(np.mean([len(p) for p in ps])), 1), "sets": per,
                        "mean_balanced_accuracy": round(float(np.mean([v["balanced_accuracy"] for v in per.values()])), 3)})
    return sorted(out, key=lambda r: -r["mean_balanced_accuracy"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an Explainer ONNX export dir (training.export)")
    p.add_argument("--data-dir", help="local data dir (default: $HALUGATE_DATA_DIR)")
    p.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    p.add_argument("--per-set", type=int, default=350, help="rows sampled per set (seeded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="writes probs.npy, candidates.jsonl and sweep.json here")
    p.add_argument("--top", type=int, default=25, help="rows of the printed table")
    args = p.parse_args(argv)
    try:
        data_dir = resolve_data_dir(args.data_dir)
        if data_dir is None:
            raise DataError("no local data dir: pass --data-dir or set HALUGATE_DATA_DIR (dev rows are local)")
        runner = OnnxRunner(args.model, "sequence", precision="fp32")
        rows = load_rows(args.sets, data_dir, args.per_set, args.seed)
    except (DataError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tqdm.auto import tqdm

    cands = candidates(runner, rows)
    print(f"{len(rows)} dev rows, {len(cands)} candidate pairs", flush=True)
    order = np.argsort([-len(t) for *_, t in cands], kind="stable")  # long first: similar lengths per batch
    probs = np.zeros((len(cands), len(runner.labels)), dtype=np.float32)
    for s in tqdm(range(0, len(order), 32), desc="candidates", unit="batch"):
        idx = order[s:s + 32]
        probs[idx] = runner.classify([(cands[j][3], rows[cands[j][0]][1].hypothesis) for j in idx])
    labels = [name.lower() for name in runner.labels]
    result = table(rows, cands, probs, labels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "probs.npy", probs)
    (out / "candidates.jsonl").write_text("".join(json.dumps({"row": i, "set": rows[i][0], "kind": k, "rank": r})
                                                  + "\n" for i, k, r, _ in cands), encoding="utf-8")
    (out / "sweep.json").write_text(json.dumps({"model": args.model, "rows": len(rows), "table": result}, indent=1),
                                    encoding="utf-8")
    sets = list(dict.fromkeys(name for name, _ in rows))
    print("| windows 256 | windows 96 | sentences | rule | pairs/row | "
          + " | ".join(f"{s} bal. acc. / AUC" for s in sets) + " | mean |")
    print("|---:|---:|---:|---|---:|" + "---|" * len(sets) + "---:|")
    for r in result[:args.top] + [r for r in result if (r["windows_256"], r["windows_96"], r["sentences"]) == (4, 0, 2)]:
        cells = " | ".join(f"{r['sets'][s]['balanced_accuracy']:.3f} / {r['sets'][s]['roc_auc']:.3f}" for s in sets)
        print(f"| {r['windows_256']} | {r['windows_96']} | {r['sentences']} | {r['rule']} | {r['pairs_per_row']} | "
              f"{cells} | {r['mean_balanced_accuracy']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
