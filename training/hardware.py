"""What a run was measured on, for result files, reports and model cards: one description for every command.

The CPU part (model, speed class such as "AVX-512 VNNI" or "x86-64 AVX2", the features that decide speed, cores)
is inference.hardware's, the one implementation; this adds the torch build and the GPU a training run used.

Torch-free: it never imports torch, it only describes the torch a run has already imported (training and the
local LLM backend do; the remote LLM backends do not), so the eval harnesses can call it without the `train`
extra.
"""

from __future__ import annotations

import platform
import sys

from inference.hardware import cpu_info


def hardware() -> str:
    """One line: the CUDA device if torch uses one, the CPU (its speed class, the features that decide speed and
    its cores, from inference.hardware), the torch version if loaded."""
    line = f"{platform.system()} {cpu_info().describe()}"
    torch = sys.modules.get("torch")
    if torch is None:
        return line
    line += f", torch {torch.__version__}"
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA); {line}"
    return line
