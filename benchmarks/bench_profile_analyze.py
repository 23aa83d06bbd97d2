"""``rl-insight profile analyze`` on 8 ranks' CUDA traces of one step, against reading the same
files with ``json.load`` (what the official recipe's parser does) and against Holistic Trace
Analysis (its kernel, temporal, idle-time and overlap breakdowns): wall time and peak RSS side by
side, each in a fresh process. The traces are made here, in a temporary folder, as kineto writes a
CUDA trace (``cuda_trace.py``: verl 0.9.1's file names, launches, kernels with their correlation
ids, ``ac2g`` flows, ``[memory]`` points, NCCL all-reduce kernels); rank 5 works 30 % longer so the
others wait for it.

    python benchmarks/bench_profile_analyze.py            # 8 ranks x 20 MB
    python benchmarks/bench_profile_analyze.py --mb 200   # the issue's size: 8 x 200 MB
    python benchmarks/bench_profile_analyze.py --quick    # 8 x 1 MB: that it runs
"""

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cuda_trace import write_cuda_trace

RANKS = 8
SLOW_RANK = 5

JSON_LOAD = """
import gzip, json, sys
from pathlib import Path
found = []
for path in sorted(Path(sys.argv[1]).glob("*.json.gz")):
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    rank = data["distributedInfo"]["rank"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in data["traceEvents"] if e.get("name") == "actor_update"]
    found.append((rank, spans))
    del data
print(len(found), "ranks")
"""

HTA = """
import logging, os, sys
logging.disable(logging.WARNING)
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
analysis.get_gpu_kernel_breakdown(visualize=False)
analysis.get_temporal_breakdown(visualize=False)
analysis.get_idle_time_breakdown(ranks=list(range(8)), visualize=False)
analysis.get_comm_comp_overlap(visualize=False)
print("HTA: kernel, temporal, idle-time and overlap breakdowns")
"""


def tree_rss_mb(root: int) -> float:
    """The resident memory of ``root`` and all its descendants now (Linux /proc)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def measure(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds from start to exit, peak RSS in MB of the process and every process it started,
    summed while they run, what it printed last)."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        time.sleep(0.05)
    took = time.perf_counter() - t
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"the measured run failed: {out[-2000:]}")
    return took, peak, (out.strip().splitlines() or [""])[-1]


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def analyze(folder: str, jobs: int) -> list[str]:
    return [sys.executable, "-m", "verl_rl_insight", "profile", "analyze", folder, "--jobs", str(jobs)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20.0, help="JSON megabytes per rank (before gzip)")
    parser.add_argument("--jobs", type=int, default=2, help="reading processes for the second streaming run")
    parser.add_argument("--quick", action="store_true", help="8 ranks x 1 MB (CI: it runs)")
    parser.add_argument("--no-hta", action="store_true", help="leave Holistic Trace Analysis out")
    args = parser.parse_args()
    args.mb = 1.0 if args.quick else args.mb
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        for rank in range(RANKS):
            name = f"actor_train_step120_rank{rank}-of-{RANKS}_pid{100 + rank}_0.json.gz"
            write_cuda_trace(Path(folder) / name, rank, RANKS, SLOW_RANK, args.mb)
        size = sum(p.stat().st_size for p in Path(folder).iterdir()) / 1e6
        took = time.perf_counter() - t
        print(f"{RANKS} ranks x {args.mb:g} MB of JSON ({size:.0f} MB gzipped) written in {took:.0f} s")
        rows = [
            ("json.load, one file at a time", *measure(python(JSON_LOAD, folder))),
            ("profile analyze, 1 process", *measure(analyze(folder, 1))),
            (f"profile analyze, {args.jobs} processes", *measure(analyze(folder, args.jobs))),
        ]
        if not args.no_hta and importlib.util.find_spec("hta") is not None:
            rows.append(("Holistic Trace Analysis 0.5.0", *measure(python(HTA, folder))))
    base_s, base_mb = rows[0][1], rows[0][2]
    for name, took, rss, _ in rows:
        print(f"{name:34} {took:7.1f} s ({took / base_s:.2f}x)  peak RSS {rss:7.0f} MB ({rss / base_mb:.3f}x)")
    print(rows[1][3])


if __name__ == "__main__":
    main()
