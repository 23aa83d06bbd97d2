"""One rank's torch-profiler trace of a verl step, written as kineto writes a CUDA trace, for the
profile-analyze benchmark (a stand-in for size only: its figures are not judged; the real traces
that judge the analysis are in tests/data/gpu_traces). Per launch: the ``aten::mm`` op, its
``cudaLaunchKernel`` and kernel with kineto's args and correlation id, the ``ac2g`` flow pair, two
``[memory]`` points; a memset now and then; every 50 launches an NCCL all-reduce kernel on a
stream of its own (the fast ranks wait in it for the slow one); ``actor_update`` on the host and
on the device (``gpu_user_annotation``)."""

from __future__ import annotations

import gzip
from pathlib import Path

HEADER = (
    '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320}], '
    '"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}, '
    '"baseTimeNanoseconds": 1790857026000000000, "traceEvents": [\n'
)
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _launch(ts: float, dur: float, i: int, allocated: float) -> str:
    corr = 1000 + i
    return (
        f'{{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": {ts:.3f}, "dur": 12.5, '
        f'"args": {{"External id": {i}, "Record function id": 0, "Concrete Inputs": ["", ""], '
        f'"Input type": ["c10::BFloat16", "c10::BFloat16"], "Input Strides": [[4096, 1], [4096, 1]], '
        f'"Input Dims": [[4096, 4096], [4096, 4096]], "Ev Idx": {i}}}}},\n'
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {ts + 2:.3f}, '
        f'"dur": 4.2, "args": {{"External id": {i}, "cbid": 211, "correlation": {corr}}}}},\n'
        f'{{"ph": "s", "id": {corr}, "pid": 1, "tid": 1, "ts": {ts + 2:.3f}, "cat": "ac2g", "name": "ac2g"}},\n'
        f'{{"ph": "X", "cat": "kernel", "name": "{GEMM}", "pid": 0, "tid": 7, "ts": {ts + 5:.3f}, "dur": {dur:.3f}, '
        f'"args": {{"External id": {i}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, '
        f'"registers per thread": 168, "shared memory": 213188, "blocks per SM": 1.0, "warps per SM": 12.0, '
        f'"grid": [2, 66, 1], "block": [384, 1, 1], "est. achieved occupancy %": 0}}}},\n'
        f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {ts + 5:.3f}, "cat": "ac2g", "name": "ac2g", '
        f'"bp": "e"}},\n'
        f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, '
        f'"ts": {ts + 1:.3f}, "args": {{"Device Type": 1, "Device Id": 0, "Addr": {139926520725504 + i * 512}, '
        f'"Bytes": 33554432, '
        f'"Total Allocated": {allocated:.0f}, "Total Reserved": 85899345920}}}},\n'
        f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, '
        f'"ts": {ts + dur:.3f}, "args": {{"Device Type": 1, "Device Id": 0, "Addr": {139926520725504 + i * 512}, '
        f'"Bytes": -33554432, "Total Allocated": {allocated - 33554432:.0f}, "Total Reserved": 85899345920}}}},\n'
    )


def write_cuda_trace(path: Path, rank: int, ranks: int, slow_rank: int, megabytes: float) -> None:
    """About ``megabytes`` of JSON (before gzip), written as a stream; ``slow_rank``'s kernels run 30 % longer."""
    target = int(megabytes * 1e6)
    work, ts, written, i = (1.3 if rank == slow_rank else 1.0), 1_000_000.0, 0, 0
    start = ts
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(HEADER % (rank, ranks))
        while written < target:
            chunk = []
            for _ in range(50):
                dur = 40.0 * work
                chunk.append(_launch(ts, dur, i, 6e10 + (i % 97) * 1e8))
                if i % 10 == 0:
                    chunk.append(
                        f'{{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, '
                        f'"ts": {ts + dur + 5.5:.3f}, "dur": 0.96, "args": {{"device": 0, "stream": 7, '
                        f'"correlation": {900000 + i}, "bytes": 4}}}},\n'
                    )
                ts += dur + 8
                i += 1
            wait = 40.0 * 50 * (1.3 - work) + 20.0
            chunk.append(
                f'{{"ph": "X", "cat": "kernel", "name": "{NCCL}", "pid": 0, "tid": 20, "ts": {ts:.3f}, '
                f'"dur": {wait:.3f}, "args": {{"device": 0, "stream": 20, "correlation": {800000 + i}}}}},\n'
            )
            ts += wait
            text = "".join(chunk)
            out.write(text)
            written += len(text)
        out.write(
            f'{{"ph": "X", "cat": "gpu_user_annotation", "name": "actor_update", "pid": 0, "tid": 7, '
            f'"ts": {start + 5:.3f}, "dur": {ts - start - 5:.3f}}},\n'
            f'{{"ph": "X", "cat": "user_annotation", "name": "actor_update", "pid": 1, "tid": 1, '
            f'"ts": {start:.3f}, "dur": {ts - start:.3f}}}\n], "traceName": "bench"}}\n'
        )
