"""The CPU a figure was measured on: model name, the instruction-set features that decide speed, and cores.

Torch-free and cheap (it reads /proc/cpuinfo once). Every benchmark output, result file and model card names
the CPU through this module (training.hardware builds its one-line description on it), and the runtime keys its
`precision: auto` decisions on `CpuInfo.fingerprint` (inference.precision), because which ONNX file is faster
depends on these features: dynamic int8 (MatMulInteger) gains from VNNI and loses on AVX2-only CPUs.

    >>> info = cpu_info()
    >>> info.cpu_class, info.isa          # e.g. "AVX-512 VNNI+BF16", ("avx2", "avx512f", "avx512_vnni", ...)
    >>> info.describe()                   # one line for a report
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

# The features that decide ONNX Runtime / torch speed on x86, in the order they are printed.
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8",
               "amx_bf16")


def cpu_class(flags, machine: str = "x86_64") -> str:
    """A short label for the speed class of a CPU with these /proc/cpuinfo flags: "AMX", "AVX-512 VNNI+BF16",
    "AVX-512 VNNI", "AVX-512", "x86-64 AVX2+AVX-VNNI", "x86-64 AVX2", "x86-64" (older), else the machine name
    (ARM and others: the flags say nothing comparable)."""
    f = set(flags)
    if machine.lower() not in ("x86_64", "amd64", "i686", "i386", "x86"):
        return machine or "unknown"
    if {"amx_tile", "amx_int8"} <= f or "amx_bf16" in f:
        return "AMX"
    if "avx512_vnni" in f:
        return "AVX-512 VNNI+BF16" if "avx512_bf16" in f else "AVX-512 VNNI"
    if "avx512f" in f:
        return "AVX-512"
    if "avx2" in f:
        return "x86-64 AVX2+AVX-VNNI" if "avx_vnni" in f else "x86-64 AVX2"
    return "x86-64"


def native_bf16(flags) -> bool:
    """bf16 arithmetic in hardware (AVX512-BF16 or AMX-BF16); elsewhere torch emulates it, slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


@dataclass(frozen=True)
class CpuInfo:
    """What a CPU is, as far as speed goes."""

    model: str
    flags: frozenset = field(default_factory=frozenset)
    physical_cores: int = 1
    visible_cores: int = 1   # logical CPUs this process may run on (affinity / container limits)
    machine: str = "x86_64"

    @property
    def isa(self) -> tuple[str, ...]:
        """The speed-deciding features present, in SPEED_FLAGS order."""
        return tuple(f for f in SPEED_FLAGS if f in self.flags)

    @property
    def cpu_class(self) -> str:
        return cpu_class(self.flags, self.machine)

    @property
    def native_bf16(self) -> bool:
        return native_bf16(self.flags)

    @property
    def fingerprint(self) -> str:
        """Stable id of the CPU's speed class: model name, machine and speed-deciding features (not the cores:
        the precision decision is keyed on the thread count separately)."""
        text = "|".join([self.model, self.machine, ",".join(self.isa)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line: `AMD EPYC (AVX-512 VNNI+BF16; avx2 fma avx512f ...), 2 physical / 2 visible cores`."""
        isa = " ".join(self.isa) or "no AVX2"
        return (f"{self.model} ({self.cpu_class}; {isa}), {self.physical_cores} physical / "
                f"{self.visible_cores} visible cores")

    def as_dict(self) -> dict:
        return {"model": self.model, "cpu_class": self.cpu_class, "isa": list(self.isa),
                "physical_cores": self.physical_cores, "visible_cores": self.visible_cores,
                "machine": self.machine, "fingerprint": self.fingerprint}


def parse_cpuinfo(text: str) -> tuple[str, frozenset, int]:
    """(model name, flags, physical cores) from the text of /proc/cpuinfo; physical cores from the distinct
    (physical id, core id) pairs, else the processor count."""
    model, flags = "", frozenset()
    cores: set[tuple[str, str]] = set()
    processors = 0
    phys = core = ""
    for line in text.splitlines() + [""]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            processors += 1
        elif key == "model name" and not model:
            model = value
        elif key in ("flags", "Features") and not flags:  # x86 / ARM
            flags = frozenset(value.split())
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
        elif not line.strip():
            if core:
                cores.add((phys, core))
            phys = core = ""
    return model, flags, (len(cores) or processors or 1)


def _visible_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    """This machine's CpuInfo (Linux: /proc/cpuinfo; elsewhere what `platform` knows, without flags)."""
    visible = _visible_cores()
    try:
        model, flags, physical = parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        model, flags, physical = "", frozenset(), visible
    try:
        import psutil  # the physical cores where /proc/cpuinfo has no core ids (VMs, other systems)

        physical = psutil.cpu_count(logical=False) or physical
    except ImportError:
        pass
    return CpuInfo(model=model or platform.processor() or platform.machine() or "unknown CPU", flags=flags,
                   physical_cores=max(1, min(physical, visible)), visible_cores=visible,
                   machine=platform.machine() or "unknown")


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    return cpu_info().model

