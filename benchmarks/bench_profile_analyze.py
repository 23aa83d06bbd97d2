"""``rl-insight profile analyze`` on 8 ranks' torch traces of one step, against reading the same
files with ``json.load`` (what the official recipe's parser does): wall time and peak RSS side by
side, each in a fresh process. The traces are made here, in a temporary folder: verl 0.9.1's file
names, a ``distributedInfo`` header, an ``actor_update`` range, CPU ops and kernels, NCCL
all-reduce kernels; rank 5 works 30 % longer so the others wait for it.

    python benchmarks/bench_profile_analyze.py            # quick: 8 ranks x 20 MB
    python benchmarks/bench_profile_analyze.py --mb 200   # the issue's size: 8 x 200 MB (about 14 min here)
"""

import argparse
import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 8
SLOW_RANK = 5
HEADER = '{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}, "traceEvents": [\n'


def write_trace(path: Path, rank: int, megabytes: float) -> None:
    """One rank's trace of about ``megabytes`` of JSON (before gzip), written as a stream."""
    target = int(megabytes * 1e6)
    work_us, ts, written = (1.3 if rank == SLOW_RANK else 1.0), 1_000_000.0, 0
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(HEADER % (rank, RANKS))
        start = ts
        while written < target:
            chunk = []
            for i in range(200):
                dur = 40.0 * work_us
                chunk.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {ts:.3f}, '
                    f'"dur": {dur:.3f}, "args": {{"External id": {i}, "Ev Idx": {i}}}}},\n'
                    f'{{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, '
                    f'"tid": 7, "ts": {ts + 5:.3f}, "dur": {dur - 10:.3f}, '
                    f'"args": {{"stream": 7, "correlation": {i}}}}},\n'
                )
                ts += dur
                if i % 50 == 49:  # an all-reduce: the fast ranks wait in it for the slow one
                    wait = 40.0 * 50 * (1.3 - work_us) + 20.0
                    chunk.append(
                        f'{{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", '
                        f'"pid": 0, "tid": 20, "ts": {ts:.3f}, "dur": {wait:.3f}, "args": {{"stream": 20}}}},\n'
                    )
                    ts += wait
            text = "".join(chunk)
            out.write(text)
            written += len(text)
        out.write(
            f'{{"ph": "X", "cat": "user_annotation", "name": "actor_update", "pid": 1, "tid": 1, '
            f'"ts": {start:.3f}, "dur": {ts - start:.3f}}}\n], "traceName": "bench"}}\n'
        )


STREAMING = """
import resource, sys, time
from pathlib import Path
from verl_rl_insight.commands.traces.analysis import analyse
from verl_rl_insight.commands.traces.files import read_all, trace_files
t = time.perf_counter()
view = analyse(read_all(trace_files(Path(sys.argv[1])), int(sys.argv[2])))
took = time.perf_counter() - t
rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(took, rss, view.answer)
"""

JSON_LOAD = """
import gzip, json, resource, sys, time
from pathlib import Path
t = time.perf_counter()
found = []
for path in sorted(Path(sys.argv[1]).glob("*.json.gz")):
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    rank = data["distributedInfo"]["rank"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in data["traceEvents"] if e.get("name") == "actor_update"]
    found.append((rank, spans))
    del data
took = time.perf_counter() - t
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, len(found), "ranks")
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


def measure(code: str, *args: str) -> tuple[float, float, str]:
    """(seconds, peak RSS of the process and every process it started, summed, in MB, what it said)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"the measured run failed: {out}")
    took, rss_kb, said = out.split(" ", 2)
    return float(took), max(peak, int(rss_kb) / 1024), said.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=20.0, help="JSON megabytes per rank (before gzip)")
    parser.add_argument("--jobs", type=int, default=2, help="reading processes for the streaming run")
    parser.add_argument("--quick", action="store_true", help="8 ranks x 1 MB (CI: it runs)")
    args = parser.parse_args()
    args.mb = 1.0 if args.quick else args.mb
    with tempfile.TemporaryDirectory() as folder:
        t = time.perf_counter()
        for rank in range(RANKS):
            write_trace(
                Path(folder) / f"actor_train_step120_rank{rank}-of-{RANKS}_pid{100 + rank}_0.json.gz", rank, args.mb
            )
        size = sum(p.stat().st_size for p in Path(folder).iterdir()) / 1e6
        print(
            f"{RANKS} ranks x {args.mb:g} MB of JSON ({size:.0f} MB gzipped) written in {time.perf_counter() - t:.0f} s"
        )
        rows = [
            ("json.load, one file at a time", *measure(JSON_LOAD, folder)),
            ("profile analyze, 1 process", *measure(STREAMING, folder, "1")),
            (f"profile analyze, {args.jobs} processes", *measure(STREAMING, folder, str(args.jobs))),
        ]
    base_s, base_mb = rows[0][1], rows[0][2]
    for name, took, rss, _ in rows:
        print(f"{name:34} {took:7.1f} s ({took / base_s:.2f}x)  peak RSS {rss:7.0f} MB ({rss / base_mb:.3f}x)")
    print(rows[-1][3])


if __name__ == "__main__":
    main()
