"""Should a multi-sentence claim be judged whole, or each of its sentences on its own? Measured on dev rows.

    python scripts/nli_hypothesis_split.py --model runs/explainer-offline --data-dir ../shared/data \
        --sets wice_dev summedits begin --per-set 300

The dev rows are those of scripts/nli_premise_sweep.py (rows the offline Explainer never trained on: WiCE dev, and
the SummEdits 'evaluation' and BEGIN dev rows longer than the recipe's max_chars). Each row is scored the way
`python -m eval.explainer` scores a binary set, once with the claim whole and once with `--hypothesis sentences`
(every sentence of the claim against its own premise candidates, supported only when every sentence is); the
script prints balanced accuracy and ROC-AUC per set for both. The test sets are for eval.explainer, after a
choice is made here.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from argparse import Namespace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.explainer import align_labels, score_binary
from inference.runners import trained_length
from inference.settings import ExplainerSettings
from training.data.base import resolve_data_dir
from training.predict import model_labels


def _sweep_module():
    spec = importlib.util.spec_from_file_location("nli_premise_sweep", REPO / "scripts" / "nli_premise_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="Explainer run dir (torch) or model dir")
    p.add_argument("--data-dir")
    p.add_argument("--sets", nargs="+", default=["wice_dev", "summedits", "begin"])
    p.add_argument("--per-set", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    rows = _sweep_module().load_rows(args.sets, resolve_data_dir(args.data_dir), args.per_set, args.seed)
    runtime = ExplainerSettings()
    perm = align_labels(model_labels(args.model))
    print("| set | n | whole: bal. acc. | whole: ROC-AUC | sentences: bal. acc. | sentences: ROC-AUC | sentences per claim |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    means = {"whole": [], "sentences": []}
    for name in args.sets:
        part = [r for set_name, r in rows if set_name == name]
        cells = []
        for mode in ("whole", "sentences"):
            ns = Namespace(batch_size=args.batch_size, max_length=trained_length(args.model) or 256, device="cpu",
                           current=f"{name} {mode}", max_premise_windows=runtime.max_premise_windows,
                           max_premise_sentences=runtime.max_premise_sentences,
                           premise_window_tokens=runtime.premise_window_tokens, hypothesis=mode)
            m, details = score_binary(args.model, part, perm, ns)
            means[mode].append(m["balanced_accuracy"])
            cells += [f"{m['balanced_accuracy']:.3f}", f"{m['roc_auc']:.3f}"]
            per_claim = sum(d.get("sentences", 1) for d in details) / max(1, len(details))
        print(f"| {name} | {len(part)} | " + " | ".join(cells) + f" | {per_claim:.2f} |", flush=True)
    print(f"| mean | | {sum(means['whole']) / len(means['whole']):.3f} | | "
          f"{sum(means['sentences']) / len(means['sentences']):.3f} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
