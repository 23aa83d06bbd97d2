"""Cost of one verl ``Tracking.log`` of 150 scalars on the training thread: ``rl_insight`` vs
verl's own ``file`` backend, same process, same data, interleaved rounds. Reports medians and
the ratio (rl_insight / file); the hub runs in its own process, as it does in real use.

    python benchmarks/bench_tracking_log.py [--steps 3000] [--pause-ms 1] [--quick]

``--pause-ms``: time between two log calls, not measured; stands for the rest of a training
step (GPU work releases the GIL, so the sender thread runs there). 0 gives a tight loop.
``--quick``: 200 steps in 2 rounds, to see that it runs (CI), not to measure.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from hub_process import free_port, start_hub

KEYS = [
    f"{group}/{name}"
    for group in ("actor", "critic", "timing_s", "perf", "response_length", "training")
    for name in (f"metric_{i}" for i in range(25))
]


def timed_logs(tracking, steps, start_step, pause_s):
    samples = []
    for i in range(steps):
        data = {key: 0.001 * (i + j) for j, key in enumerate(KEYS)}
        t0 = time.perf_counter_ns()
        tracking.log(data, step=start_step + i)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        if pause_s:
            time.sleep(pause_s)
    return samples


def p99(samples):
    return sorted(samples)[int(len(samples) * 0.99)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pause-ms", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="200 steps in 2 rounds: that it runs, not a figure")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 200, 2
    pause = args.pause_ms / 1000

    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.activation import bootstrap

    bootstrap.activate()
    from verl.utils.tracking import Tracking

    workdir = tempfile.mkdtemp(prefix="rl-insight-bench")
    os.environ["VERL_FILE_LOGGER_PATH"] = os.path.join(workdir, "file-backend.jsonl")
    port = free_port()
    hub = start_hub(port, workdir)
    results = {}
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # verl's backends print; keep stdout for the JSON
    try:
        for scenario, url in (
            ("server up", f"http://127.0.0.1:{port}"),
            ("server down", f"http://127.0.0.1:{free_port()}"),
        ):
            os.environ["RL_INSIGHT_SERVER_URL"] = url
            file_tracking = Tracking("bench", "file", default_backend=["file"])
            ours = Tracking("bench", scenario.replace(" ", "-"), default_backend=["rl_insight"])
            per_round = args.steps // args.rounds
            file_samples, our_samples = [], []
            for r in range(args.rounds):  # interleaved: both see the same machine state
                file_samples += timed_logs(file_tracking, per_round, r * per_round, pause)
                our_samples += timed_logs(ours, per_round, r * per_round, pause)
            from verl_rl_insight.trainer.plugins import metric_push

            sender = metric_push.sender()
            if sender is None:
                raise RuntimeError("no sender: the rl_insight backend did not start with a server URL")
            delivered = sender.flush(30) if scenario == "server up" else None
            stats = dict(sender.stats)
            file_tracking.finish()
            runtime.shutdown(timeout_s=0.5)
            file_median, our_median = statistics.median(file_samples), statistics.median(our_samples)
            file_p99, our_p99 = p99(file_samples), p99(our_samples)
            results[scenario] = {
                "file_median_us": round(file_median, 2),
                "rl_insight_median_us": round(our_median, 2),
                "ratio_rl_insight_over_file": round(our_median / file_median, 3),
                "rl_insight_p99_us": round(our_p99, 2),
                "file_p99_us": round(file_p99, 2),
                "p99_ratio_rl_insight_over_file": round(our_p99 / file_p99, 3),
                "steps": len(our_samples),
                "all_delivered": delivered,
                "sender_stats": stats,
            }
    finally:
        sys.stdout = real_stdout
        hub.terminate()
        hub.wait(10)
    print(json.dumps({"scalars_per_log": len(KEYS), "pause_ms": args.pause_ms, "results": results}, indent=2))


if __name__ == "__main__":
    main()
