"""CPU cost of the hardware sampler at 1 Hz with 8 GPUs: CPU seconds one sample takes (GPU part
through a STAND-IN NVML, so this measures the sampler's own work, not the driver's; host part
for real from /proc), as a share of one core at 1 sample per second. Median over many samples.

    python benchmarks/bench_hardware_sampler.py [--samples 300]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl_rl_insight.trainer.plugins.hardware import HardwareSampler
from verl_rl_insight.trainer.runtime import RunInfo
from verl_rl_insight.trainer.samplers.simulated_nvml import make_nvml


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="20 samples (CI: it runs)")
    args = parser.parse_args()
    args.samples = 20 if args.quick else args.samples
    batches = []
    sampler = HardwareSampler(
        lambda batch: batches.append(batch),
        lambda: RunInfo("bench", "hw"),
        interval_s=1.0,
        lock_dir=tempfile.mkdtemp(),
        nvml_loader=lambda: make_nvml(gpus=args.gpus),
    )
    sampler._open_gpu()
    costs = []
    for _ in range(args.samples):
        started = time.thread_time()
        for batch in sampler.sample_once():
            batch.samples()  # the conversion the sender thread does, counted here too
        costs.append(time.thread_time() - started)
        batches.clear()
    median = statistics.median(costs)
    print(
        json.dumps(
            {
                "gpus": args.gpus,
                "samples": args.samples,
                "median_cpu_ms_per_sample": round(median * 1e3, 3),
                "share_of_one_core_at_1hz_percent": round(median * 100, 3),
                "p99_cpu_ms": round(sorted(costs)[int(len(costs) * 0.99)] * 1e3, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
