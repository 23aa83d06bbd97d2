"""Kernel names as a person reads them, what kind of GPU work a device event is, and the kernels
a window spent its time in."""

from __future__ import annotations

import re
from typing import NamedTuple

from verl_rl_insight.commands.traces.phases import collective

COMPUTE, COMMUNICATION, MEMCPY, MEMSET = 0, 1, 2, 3
KINDS = ("compute", "communication", "memcpy", "memset")
# what torch's profiler (kineto) calls the device's own events in a chrome trace
DEVICE_CATEGORIES = {"kernel": COMPUTE, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}
SHORT_NAME = 120  # characters of a kernel's name kept (the shortened name, not the template soup)
_OP_HINT = re.compile(r"::(?:launch_)?([a-z][a-z0-9_]*?)(?:_kernel_cuda|_kernel_impl|_kernel|_impl)?\(")


def kind_of(category: str, name: str) -> int | None:
    """COMPUTE, COMMUNICATION (an NCCL kernel), MEMCPY or MEMSET for a device event, None for
    anything else (a CPU op, a runtime call, an annotation)."""
    kind = DEVICE_CATEGORIES.get(category)
    if kind == COMPUTE and "nccl" in name.lower():  # ncclKernel_*, ncclDevKernel_*, rccl's the same
        return COMMUNICATION
    return kind


def collective_of_kernel(name: str) -> str:
    """The collective an NCCL kernel runs ('all-reduce', ...; 'collective' when its name says none)."""
    return collective(name.removeprefix("void ").strip()) or "collective"


def _strip_brackets(name: str) -> str:
    """The name without what stands inside <...> and (...), at any depth."""
    kept: list[str] = []
    depth = 0
    for char in name.replace("->", ""):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def short_name(name: str) -> str:
    """``void at::native::vectorized_elementwise_kernel<8, ...launch_clamp_scalar(...)...>(int, ...)``
    -> ``at::native::vectorized_elementwise_kernel [clamp_scalar]``: the function without its
    template and arguments (its last word, as Holistic Trace Analysis shortens it), and for
    PyTorch's generic elementwise and reduce kernels the op their template carries."""
    if name.startswith(("Memcpy", "Memset")) or ("<" not in name and "(" not in name):
        return name[:SHORT_NAME]
    words = _strip_brackets(name).split()
    base = words[-1] if words else name
    if base.endswith(("elementwise_kernel", "reduce_kernel")):
        hint = next((h for h in _OP_HINT.findall(name) if h not in ("operator", "lambda")), None)
        if hint:
            base = f"{base} [{hint}]"
    return base[:SHORT_NAME]


class KernelTotal(NamedTuple):
    """One kernel (by its shortened name) in a window: how often it was launched there (started in
    it) and the time it ran there (seconds)."""

    name: str
    kind: str  # compute, communication, memcpy or memset
    launches: int
    total_s: float


def top_kernels(totals: dict[tuple[str, int], list[float]], scale: float, keep: int) -> tuple[KernelTotal, ...]:
    """The ``keep`` kernels with the most time, most first; ``totals`` maps (short name, kind) to
    [count, time in trace units]."""
    ranked = sorted(totals.items(), key=lambda item: (-item[1][1], item[0]))[:keep]
    return tuple(KernelTotal(name, KINDS[kind], int(count), total * scale) for (name, kind), (count, total) in ranked)
