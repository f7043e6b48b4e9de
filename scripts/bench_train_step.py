"""Training-step time of a token classifier with and without attention dropout, side by side in one run.

    python scripts/bench_train_step.py                                  # offline:minilm, 8 x 512 tokens
    python scripts/bench_train_step.py --base-model offline:mpnet --lengths 256 512

Why: with dropout on the attention probabilities PyTorch's scaled-dot-product attention cannot use its fused
kernel while training, and at 512 tokens the (heads x 512 x 512) probability tensors and their dropout masks
dominate a small encoder's step. `model.attention_dropout: 0.0` in a recipe turns that dropout off. The script
times full optimizer steps (forward, backward, AdamW) under the recipe's precision (bf16 autocast where the CPU
has native bf16, as training.trainer decides) on random token ids, after warm-up steps, and prints examples/s.
Run it on an idle machine: the 1-minute load average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.models import build_model, resolve_base_model
from training.trainer import cpu_has_bf16


def time_steps(path: str, attention_dropout: float | None, length: int, batch: int, steps: int, warmup: int,
               bf16: bool) -> list[float]:
    import torch

    torch.manual_seed(0)
    model = build_model(path, "token", ["SUPPORTED", "HALLUCINATED"], attention_dropout=attention_dropout)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(1000, 20000, (batch, length))
    labels = torch.randint(0, 2, (batch, length))
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-model", default="offline:minilm")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    path = resolve_base_model(args.base_model)
    bf16 = cpu_has_bf16()
    print(f"{args.base_model}, batch {args.batch}, {args.steps} timed steps after {args.warmup} warm-up, "
          f"bf16 autocast {'on' if bf16 else 'off'}, torch threads {torch.get_num_threads()}, "
          f"load average {[round(x, 2) for x in os.getloadavg()]}")
    print("| tokens | attention dropout | s/step (median) | examples/s | speed-up |")
    print("|---:|---|---:|---:|---:|")
    for length in args.lengths:
        base = None
        for dropout in (None, 0.0):
            t = statistics.median(time_steps(path, dropout, length, args.batch, args.steps, args.warmup, bf16))
            base = base or t
            label = "base model's" if dropout is None else f"{dropout}"
            print(f"| {length} | {label} | {t:.2f} | {args.batch / t:.2f} | {base / t:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
