"""More real CUDA traces for `profile analyze`'s tests, for a session lent a GPU machine (the
`device` tool): one prepared run that writes, per scenario, one step's traces of two ranks on the
one GPU (gloo for the collectives: NCCL needs a GPU a rank), as verl's torch profiler leaves them
(`<save_path>/<role>_step<N>_rank<R>-of-2_*.json.gz` with `distributedInfo`), with
`profile_memory=True`, and a `torch_memory` snapshot of each rank where verl's tool writes it
(`<save_path>/step<N>/torch_memory_rank<R>_pid<P>.pickle`).

Scenarios (each an `update_actor` phase after `gen` and `old_log_prob`, as in h200_step7):
  host_stall   rank 1's host sleeps 2 ms between its kernels: its GPU sits idle, its kernels are
               the others' (the answer must say host stalls, not GPU work)
  many_small   rank 1 launches 6x the kernels of rank 0, each 6x smaller (the same GPU work)
  gpu_heavy    rank 1 runs 10x the matmuls of rank 0 (the h200_step7 shape, with memory events)

    python scripts/make_cuda_traces.py OUT [--port 29511]            # on the GPU machine
    python scripts/make_cuda_traces.py OUT --cpu                      # here: that it runs (no CUDA events)

Copy OUT's small .json.gz and .pickle files back into tests/data/gpu_traces/<scenario>/ and say
in its SOURCE.md that this script made them, on which GPU and torch."""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function

SCENARIOS = ("host_stall", "many_small", "gpu_heavy")
STEP = {"host_stall": 11, "many_small": 12, "gpu_heavy": 13}


def _phase(x: torch.Tensor, n: int, pause_s: float = 0.0) -> torch.Tensor:
    for _ in range(n):
        x = (x @ x).clamp_(-1, 1)
        if pause_s:
            time.sleep(pause_s)  # the host's stall between launches (Python, a sync, data loading)
    return x


def _update_actor(scenario: str, rank: int, x: torch.Tensor, small: torch.Tensor) -> torch.Tensor:
    if scenario == "host_stall":
        return _phase(x, 40, pause_s=0.002 if rank == 1 else 0.0)
    if scenario == "many_small":
        if rank == 1:
            _phase(small, 240)
            return x
        return _phase(x, 40)
    return _phase(x, 400 if rank == 1 else 40)


def _work(rank: int, out: str, port: int, scenario: str, device: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    on_gpu = device == "cuda"
    size = 4096 if on_gpu else 256
    x = torch.randn(size, size, device=device, dtype=torch.bfloat16 if on_gpu else torch.float32)
    small = torch.randn(size // 6, size // 6, device=device, dtype=x.dtype)
    flag = torch.ones(1024)
    if on_gpu:
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        with record_function("gen"):
            x = _phase(x, 40)
            if on_gpu:
                torch.cuda.synchronize()
            dist.barrier()
        with record_function("actor_compute_log_prob"):  # verl's DistProfiler.annotate role
            x = _phase(x, 20)
            if on_gpu:
                torch.cuda.synchronize()
            dist.barrier()
        with record_function("actor_update"):
            x = _update_actor(scenario, rank, x, small)
            if on_gpu:
                torch.cuda.synchronize()
            dist.all_reduce(flag)
    step = STEP[scenario]
    folder = Path(out) / scenario
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"actor_train_step{step}_rank{rank}-of-2_pid{os.getpid()}_0.json"
    prof.export_chrome_trace(str(trace))
    with trace.open("rb") as f, gzip.open(str(trace) + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    trace.unlink()
    if on_gpu:  # where verl's torch_memory tool writes its snapshot
        snapshots = folder / f"step{step}"
        snapshots.mkdir(exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(snapshots / f"torch_memory_rank{rank}_pid{os.getpid()}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--port", type=int, default=29511)
    parser.add_argument("--cpu", action="store_true", help="run the scenarios on the CPU (no CUDA events)")
    parser.add_argument("--only", choices=SCENARIOS)
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    for i, scenario in enumerate([args.only] if args.only else SCENARIOS):
        mp.spawn(_work, args=(args.out, args.port + i, scenario, device), nprocs=2)
        print(f"{scenario}: {sorted(p.name for p in (Path(args.out) / scenario).rglob('*') if p.is_file())}")


if __name__ == "__main__":
    main()
