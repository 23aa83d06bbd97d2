"""The training-health evaluation: the corpus (benchmarks/health_corpus.py) pushed step by step
through the real path (the server process, its detectors on every step, a real Prometheus
scraping it), then per detector: the steps from the injection to the first online finding (the
server's ``rl_insight_health_findings_total`` rising) and to the first step diagnose reports
(offline, reading Prometheus back), and the false findings on the healthy runs.

    python benchmarks/bench_health.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import health_corpus as corpus
from tests.helpers import Prometheus, free_port, http, push, start_hub_process, stop_group, wait_for
from verl_rl_insight.server.health import detectors


def wire(value: float) -> float | str:
    return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))


def online_count(hub: str, experiment: str, detector: str) -> float:
    """The server's rl_insight_health_findings_total of one run and detector, from its live /metrics."""
    status, body = http("GET", hub + "/metrics")
    for line in body.decode().splitlines():
        if (
            line.startswith("rl_insight_health_findings_total{")
            and f'detector="{detector}"' in line
            and f'experiment_name="{experiment}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def runs_in(prometheus: Prometheus) -> int:
    found = prometheus.query('count_over_time(rl_insight_monitor_training_global_step{project="eval"}[10m])')
    return len(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    port = free_port()
    process = start_hub_process(port, tmp, alerts={"stalled_for": "60s"})  # the corpus' stall is 90 s
    hub = f"http://127.0.0.1:{port}"
    prometheus: Prometheus | None = None
    all_runs: list[tuple[int, str, str | None]] = []
    online: dict[str, list[int]] = {}
    offline: dict[str, list[int]] = {}
    false: dict[str, int] = {}
    try:
        start = time.time() - corpus.STEPS * corpus.STEP_S - corpus.STALL_S - 30
        for seed in range(args.seeds):
            runs = [(s, None, corpus.run(s, seed=seed)) for s in corpus.HEALTHY]
            runs += [(f"inject-{f}", f, corpus.run("rising", f, seed=seed)) for f in corpus.FAILURES]
            for name, failure, history in runs:
                experiment = f"{name}-{seed}"
                first_online = None
                for step, (metrics, at) in enumerate(zip(history, corpus.times(failure), strict=True), 1):
                    batch = {
                        "project": "eval",
                        "experiment_name": experiment,
                        "step": step,
                        "time": start + at,
                        "metrics": {detectors.series_name(k): wire(v) for k, v in metrics.items()},
                    }
                    push(hub, {"batches": [batch]})
                    if failure and first_online is None and detectors.BY_NAME[failure].online:
                        if online_count(hub, experiment, failure) > 0:
                            first_online = step
                done = {"project": "eval", "experiment_name": experiment, "time": start + corpus.times(failure)[-1] + 1}
                push(hub, {"batches": [{**done, "metrics": {"rl_insight_run_finished": 1}}]})  # as finish() does
                if failure and first_online is not None:
                    online.setdefault(failure, []).append(first_online - corpus.INJECT_AT)
                all_runs.append((seed, name, failure))
        # Prometheus from here on: a new scraper is sent the history with the trainers' own times
        # (a scraper that had scraped during the pushes would get the steps stamped at its scrapes)
        prometheus = Prometheus(tmp, [f"127.0.0.1:{port}"])
        wait_for(lambda: runs_in(prometheus) >= len(all_runs), 60)
        time.sleep(2)
        for seed, name, failure in all_runs:
            result = subprocess.run(
                [sys.executable, "-m", "verl_rl_insight", "diagnose", "--project", "eval", "--experiment",
                 f"{name}-{seed}", "--server", hub, "--prometheus", prometheus.url, "--json"],
                capture_output=True, text=True,
            )  # fmt: skip
            found = json.loads(result.stdout)["findings"]
            if failure is None:
                for f in found:
                    if not (name == "flat" and f["detector"] == "reward_plateau"):
                        false[f["detector"]] = false.get(f["detector"], 0) + 1
                continue
            mine = [f for f in found if f["detector"] == failure and f["last_step"] >= corpus.INJECT_AT]
            if mine:
                seen = mine[0]["found_at"] or mine[0]["first_step"]
                offline.setdefault(failure, []).append(seen - corpus.INJECT_AT)
            for f in found:
                if f["detector"] != failure and f["detector"] not in ("reward_plateau", "validation_drop"):
                    false[f["detector"]] = false.get(f["detector"], 0) + 1
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)
    runs_total = f"{len(corpus.HEALTHY)} healthy + {len(corpus.FAILURES)} injected runs"
    print(f"{args.seeds} seeds x {runs_total} of {corpus.STEPS} steps, injected at step {corpus.INJECT_AT}")
    print("| detector | steps to detection, online (median / max) | offline (median / max) | found | false findings |")
    print("| --- | --- | --- | --- | --- |")
    for failure in corpus.FAILURES:
        on, off = online.get(failure, []), offline.get(failure, [])

        def show(xs: list[int]) -> str:
            return f"{statistics.median(xs):g} / {max(xs)}" if xs else "-"

        shown_online = show(on) if detectors.BY_NAME[failure].online else "its own rule"
        found = f"{len(off)}/{args.seeds}"
        print(f"| {failure} | {shown_online} | {show(off)} | {found} | {false.get(failure, 0)} |")
    others = {k: v for k, v in false.items() if k not in corpus.FAILURES}
    if others:
        print("other false findings:", others)


if __name__ == "__main__":
    main()
