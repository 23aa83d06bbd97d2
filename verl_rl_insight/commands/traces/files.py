"""Which files under a folder are verl profiler traces, and reading them in parallel processes."""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from verl_rl_insight.commands.traces.chrome import read_chrome
from verl_rl_insight.commands.traces.nvtx import read_nvtx
from verl_rl_insight.commands.traces.snapshot import NAME as SNAPSHOT_NAME
from verl_rl_insight.commands.traces.snapshot import Snapshot, read_snapshot
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary

NVTX_NAME = re.compile(r"^worker_process_\d+\.\d+\.jsonl$")
LOOKED_FOR = (
    "*.json.gz / *.pt.trace.json (torch), worker_process_<PID>.<RID>.jsonl (NVTX), trace_view.json (MSTX), "
    "torch_memory_rank<R>_pid<P>.pickle (torch_memory)"
)
Read = FileSummary | Snapshot


def reader_of(path: Path) -> Callable[[Path], Read] | None:
    """How a file is read, or None when it is not a trace (or memory snapshot) of verl's profiler."""
    name = path.name
    if name == "trace_view.json" and path.parent.name == "ASCEND_PROFILER_OUTPUT":
        return read_chrome
    if name.endswith((".json.gz", ".pt.trace.json")):
        return read_chrome
    if NVTX_NAME.match(name):
        return read_nvtx
    if SNAPSHOT_NAME.match(name):
        return read_snapshot
    return None


def trace_files(folder: Path) -> list[Path]:
    """Every trace under ``folder`` (a single trace file stands for itself), sorted."""
    if folder.is_file():
        return [folder] if reader_of(folder) else []
    if not folder.is_dir():
        raise BadTrace(str(folder), "no such folder")
    return sorted(p for p in folder.rglob("*") if p.is_file() and reader_of(p) is not None)


def read_one(path: Path) -> Read:
    reader = reader_of(path)
    if reader is None:  # trace_files chose it, so never; a clear error all the same
        raise BadTrace(str(path), "not a trace of verl's profiler")
    return reader(path)


def read_all(paths: list[Path], jobs: int | None = None) -> list[Read]:
    """Each file's summary, read by up to ``jobs`` processes (default: one per CPU); the first
    bad file's error (in the files' order) is raised."""
    workers = max(1, min(len(paths), jobs or os.cpu_count() or 1))
    if workers == 1:
        return [read_one(p) for p in paths]
    context = multiprocessing.get_context("spawn" if os.name != "posix" else "forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(read_one, p) for p in paths]
        return [f.result() for f in futures]
