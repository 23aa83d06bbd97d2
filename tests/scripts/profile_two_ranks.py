"""Two ranks on a gloo group, each profiled with verl's own torch profiler (verl 0.9.1's
``get_torch_profiler``: its file names, CPU activity) and verl's stage mark (``record_function``
named as ``DistProfiler.annotate(role="actor_update")`` names it). Inside ``actor_update`` rank 1
sleeps 1.5 s before the all-reduce, so rank 0 waits for it there.

    python3 tests/scripts/profile_two_ranks.py OUT_DIR STEP PORT
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SLEEP_S = 1.5


def worker(rank: int, out: str, step: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)  # two ranks on a 2-core machine: no intra-op pool fighting the other rank
    # the first matmul's one-off set-up (up to 1 s under load), outside the phase
    torch.randn(128, 128) @ torch.randn(128, 128)
    from verl.utils.profiler.torch_profile import get_torch_profiler

    prof = get_torch_profiler(
        contents=["cpu"], save_path=out, role="train", save_file_prefix="actor", rank=rank, profile_step=step
    )
    prof.start()
    grads = torch.ones(4096)
    dist.barrier()  # both enter the phase together (process start-up differs by up to seconds)
    with torch.profiler.record_function("actor_update"):
        torch.randn(128, 128) @ torch.randn(128, 128)
        if rank == 1:
            time.sleep(SLEEP_S)
        dist.all_reduce(grads)
    prof.stop()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), nprocs=2)
