"""What a run was measured on, for result files, reports and model cards: one description for every command.

Torch-free: it never imports torch, it only describes the torch a run has already imported (training and the
local LLM backend do; the remote LLM backends do not), so the eval harnesses can call it without the `train`
extra.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> str:
    """One line: the CUDA device if torch uses one, the CPU and its visible cores, the torch version if loaded."""
    line = f"{platform.system()} {cpu_name()}, {os.cpu_count()} CPU cores visible"
    torch = sys.modules.get("torch")
    if torch is None:
        return line
    line += f", torch {torch.__version__}"
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA); {line}"
    return line
