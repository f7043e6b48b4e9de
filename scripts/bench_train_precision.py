"""Training-step time in fp32 and under bf16 autocast, side by side, on this CPU (what training.trainer decides on).

    python scripts/bench_train_precision.py                       # offline:minilm, 8 x 256 tokens
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python scripts/bench_train_precision.py   # AVX2 kernels only

The trainer uses bf16 autocast on a CPU only where bf16 is native (avx512_bf16 / amx_bf16: inference.hardware);
this prints both timings and the trainer's decision with its reason, so the rule can be checked on a CPU. With
the two environment variables torch and oneDNN pick their AVX2 kernels on a newer CPU: an emulation of an
AVX2-only CPU's kernels (not of its memory system or clocks), the closest check possible without one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_train_step import time_steps

from inference.hardware import cpu_info
from training.models import resolve_base_model
from training.trainer import bf16_choice


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-model", default="offline:minilm")
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    caps = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if os.environ.get(k)}
    on, why = bf16_choice(None, "cpu")
    print(f"CPU: {cpu_info().describe()}; kernel caps {caps or 'none'}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load average {[round(x, 2) for x in os.getloadavg()]}")
    print(f"trainer's decision (train.bf16: null): {'bf16 autocast' if on else 'fp32'}: {why}")
    path = resolve_base_model(args.base_model)
    t = {}
    for name, bf16 in (("fp32", False), ("bf16 autocast", True)):
        t[name] = statistics.median(time_steps(path, 0.0, args.length, args.batch, args.steps, args.warmup, bf16))
    print(f"| {args.base_model}, {args.batch} x {args.length} tokens | fp32 s/step | bf16 autocast s/step | "
          "bf16 speed-up |\n|---|---:|---:|---:|")
    print(f"| median of {args.steps} steps | {t['fp32']:.3f} | {t['bf16 autocast']:.3f} | "
          f"{t['fp32'] / t['bf16 autocast']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
