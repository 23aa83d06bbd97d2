"""The hardware sampler against a real NVIDIA GPU (run on a machine with one, e.g. the H200 the
device tool lends): samples idle for a few seconds, then under a torch matmul load, and checks
what a user would see: total memory near the card's size, utilisation rising under load, power
and memory use rising, every DCGM field present. Exit 0: all checks passed; 1: a check failed;
2: no GPU here (nothing checked).

    python scripts/check_nvml_on_gpu.py [--expect-total-gib 141] [--seconds 6]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl_rl_insight.trainer.plugins.hardware import HardwareSampler, load_nvml
from verl_rl_insight.trainer.runtime import RunInfo

CORE_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
}


def sample_for(sampler, seconds):
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append({b.labels.get("gpu"): b.samples()[0] for b in sampler.sample_once() if "gpu" in b.labels})
        time.sleep(0.5)
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect-total-gib", type=float, default=141.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    sampler = HardwareSampler(
        lambda batch: None,
        lambda: RunInfo("gpu-check", "h200"),
        host=False,
        lock_dir=tempfile.mkdtemp(),
        nvml_loader=load_nvml,
    )
    sampler._open_gpu()
    if sampler.gpu is None or not sampler.gpu.gpus:
        print(json.dumps({"result": "no GPU here: nothing checked"}))
        return 2
    idle = sample_for(sampler, args.seconds)

    import torch

    stop = threading.Event()

    def load():
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    time.sleep(1.0)
    busy = sample_for(sampler, args.seconds)
    stop.set()
    worker.join(10)

    def median(samples, field):
        return statistics.median(s["0"][field] for s in samples if "0" in s and field in s["0"])

    first = busy[-1]["0"]
    report = {
        "fields": sorted(first),
        "labels": sampler.gpu.gpus[0][2],
        "nvml_errors": sampler.gpu.errors,
        "total_gib": first["DCGM_FI_DEV_FB_TOTAL"] / 1024,
        "util_idle": median(idle, "DCGM_FI_DEV_GPU_UTIL"),
        "util_busy": median(busy, "DCGM_FI_DEV_GPU_UTIL"),
        "power_idle_w": median(idle, "DCGM_FI_DEV_POWER_USAGE"),
        "power_busy_w": median(busy, "DCGM_FI_DEV_POWER_USAGE"),
        "fb_used_idle_mib": median(idle, "DCGM_FI_DEV_FB_USED"),
        "fb_used_busy_mib": median(busy, "DCGM_FI_DEV_FB_USED"),
    }
    checks = {
        "total memory near the expected size": abs(report["total_gib"] - args.expect_total_gib)
        < 0.05 * args.expect_total_gib,
        "utilisation rises under load": report["util_busy"] > report["util_idle"] + 20,
        "power rises under load": report["power_busy_w"] > report["power_idle_w"],
        "memory use rises under load": report["fb_used_busy_mib"] > report["fb_used_idle_mib"],
        "core fields present": CORE_FIELDS <= set(first),
    }
    report["checks"] = checks
    print(json.dumps(report, indent=2, default=str))
    sampler.close()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
