"""The training-health evaluation (``tests/health_shapes.py``), per detector:

- false findings (warning or critical; a plateau is information) on every real healthy verl run
  and on the realistic healthy shapes (``--seeds`` of each);
- steps from the injection to the finding on real runs and on the realistic long-CoT GRPO shape
  with a failure that grows over tens of steps, offline (``diagnose``) and online (the server's
  ``HealthMonitor`` fed the batches the hub accepts, step by step);
- the online cost: ``HealthMonitor.observe`` of one step against decoding that step's push body
  (``contract.wire.decode_push``, what the hub does with every push), the same steps, this run.

- issue 38's two figures, per mode: steps from the onset to the first warning or critical on the
  gradual shapes (``tests/health_gradual.py``: a healthy start, then the failure built over 20,
  40 and 60 steps; median / max over the seeds, offline and online), and the false findings on
  every healthy real run, one by one (critical / warning).

    python benchmarks/bench_health.py [--seeds 5] [--quick]   # --quick: issue 38's figures and the cost, 3 seeds
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import health_gradual as gradual
from tests import health_shapes as shapes
from verl_rl_insight.contract.wire import decode_push
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor

NOW = 1_700_000_000.0


def wire(value: float) -> float | str:
    return value if math.isfinite(value) else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))


def bodies(run: shapes.Run) -> list[bytes]:
    at = dict(run.times)
    return [
        json.dumps(
            {
                "batches": [
                    {
                        "project": "p",
                        "experiment_name": "e",
                        "step": step,
                        "time": NOW + at.get(step, float(step)),
                        "metrics": {name: wire(v) for name, v in metrics.items()},
                    }
                ]
            }
        ).encode()
        for step, metrics in detectors.steps_of(run.history)
    ]


def online(run: shapes.Run) -> list[detectors.Finding]:
    monitor = HealthMonitor()
    for body in bodies(run):
        monitor.observe(decode_push(body, now=NOW + 10**9))
    return monitor.findings("p", "e")


def offline(run: shapes.Run) -> list[detectors.Finding]:
    at = dict(run.times)
    times = [(s, NOW + at.get(s, float(s))) for s, _ in detectors.steps_of(run.history)]
    return detectors.diagnose(run.history, times)


def false_findings(runs: list[shapes.Run]) -> dict[str, int]:
    """{detector: its warning or critical findings on these healthy runs}; for an information-only
    detector (a plateau): the runs where it spoke."""
    counts: dict[str, int] = {}
    for run in runs:
        found = offline(run)
        for f in found:
            if f.severity != "info" and not shapes.known(run, f):
                counts[f.detector] = counts.get(f.detector, 0) + 1
        for name in {f.detector for f in found if f.severity == "info"}:
            counts[name] = counts.get(name, 0) + 1
    return counts


def timed(fn: Callable[[], object], repeat: int = 3) -> float:
    """The least CPU time of this process over ``repeat`` runs (the walk is one thread: the CPU time
    is its cost, which other processes on a loaded machine move far less than the wall clock)."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def cost_ratio(run: shapes.Run) -> tuple[float, float, float]:
    """(observe / decode, us per step observed, us per step decoded) over the run's steps."""
    pushes = bodies(run)
    decoded = [decode_push(b, now=NOW + 10**9) for b in pushes]

    def decode_all() -> None:
        for b in pushes:
            decode_push(b, now=NOW + 10**9)

    def observe_all() -> None:  # the walk of each push's steps (at a scrape on the server: off the push)
        monitor = HealthMonitor()
        for batches in decoded:
            monitor.observe(batches)
            monitor.collect()

    d, o = math.inf, math.inf
    for _ in range(5):  # interleaved, the fastest of each: the machine's load moves both alike
        d, o = min(d, timed(decode_all, 1)), min(o, timed(observe_all, 1))
    return o / d, o / len(pushes) * 1e6, d / len(pushes) * 1e6


def show(xs: list[int | None]) -> str:
    got = [x for x in xs if x is not None]
    if not got:
        return f"not found (0/{len(xs)})"
    found = "" if len(got) == len(xs) else f", found {len(got)}/{len(xs)}"
    return f"{statistics.median(got):g} / {max(got)}{found}" if len(xs) > 1 else f"{got[0]}{found}"


def gradual_table(seeds: int) -> None:
    """Issue 38's first figure: steps from the onset to the mode's first warning or critical."""
    overs = " | ".join(f"over {n} steps" for n in gradual.OVERS)
    print(f"| mode | {overs} | first alarm of any detector, over {gradual.OVERS[-1]} |")
    print("| --- |" + " --- |" * (len(gradual.OVERS) + 1))
    for mode in sorted(gradual.GRADUAL):
        cells, first = [], []
        for over in gradual.OVERS:
            steps: list[int | None] = []
            for seed in range(seeds):
                run = gradual.gradual(mode, over, seed)
                found_off, found_on = offline(run), online(run)
                assert [f.as_json() for f in found_off] == [f.as_json() for f in found_on], run.name
                steps.append(gradual.mode_alarm(run, found_off))
                if over == gradual.OVERS[-1]:
                    first.append(gradual.first_alarm(found_off))
            cells.append(show(steps))
        print(f"| `{mode}` | {' | '.join(cells)} | {show(first)} |")
    quiet = [
        f
        for seed in range(seeds)
        for variant in ("", "validation_drop")
        for f in offline(gradual.healthy(seed, variant))
        if f.severity != "info"
    ]
    print(f"\nthe same shapes without the failure ({2 * seeds} runs): {len(quiet)} warning or critical findings")


def healthy_real_table() -> None:
    """Issue 38's second figure: every healthy real run's findings (a finding its source describes,
    ``shapes.KNOWN``, is counted apart)."""
    print("| healthy real run | steps | critical | warning | described by its source | information |")
    print("| --- | --- | --- | --- | --- | --- |")
    for run in shapes.real_runs():
        found = offline(run)
        known = [f for f in found if f.severity != "info" and shapes.known(run, f)]
        false = [f for f in found if f.severity != "info" and not shapes.known(run, f)]
        crit = [f.detector for f in false if f.severity == "critical"]
        warn = [f.detector for f in false if f.severity == "warning"]
        info = sum(f.severity == "info" for f in found)
        print(
            f"| {run.name} | {len(detectors.steps_of(run.history))} | {len(crit)} {' '.join(crit)} | "
            f"{len(warn)} {' '.join(warn)} | {', '.join(f'{f.detector} ({f.severity})' for f in known) or '-'} | "
            f"{info} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="issue 38's figures and the online cost, 3 seeds")
    args = parser.parse_args()
    print("steps from the onset to the mode's first warning or critical, gradual shapes (median / max):\n")
    gradual_table(3 if args.quick else args.seeds)
    print("\nfalse findings on every healthy real run (diagnose, the same walk as the server online):\n")
    healthy_real_table()
    if args.quick:
        print()
        cost_line()
        return
    print()
    real = shapes.real_runs()
    healthy = shapes.healthy_shapes(args.seeds)
    on_real, on_shapes = false_findings(real), false_findings(healthy)
    print(f"{len(real)} real healthy runs ({sum(len(detectors.steps_of(r.history)) for r in real)} steps); ")
    print(f"{len(healthy)} realistic healthy runs ({len(shapes.HEALTHY_SHAPES)} shapes x {args.seeds} seeds)\n")
    failures = shapes.failures(on_shapes=True, seeds=args.seeds)
    steps: dict[str, dict[str, list[int | None]]] = {}
    for run in failures:
        assert run.failure is not None
        where = "shape" if run.name.endswith(tuple(f"#{s}" for s in range(args.seeds))) else "real"
        found_off, found_on = offline(run), online(run)
        assert [f.as_json() for f in found_off] == [f.as_json() for f in found_on], run.name
        steps.setdefault(run.failure, {}).setdefault(where, []).append(shapes.detection(run, found_off))

    print(
        "| detector | false findings: real healthy runs | realistic healthy shapes | "
        "steps to detection: real run (injected) | long-CoT GRPO shape (median / max) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for d in detectors.ALL:
        s = steps.get(d.name, {})
        info = " runs with it (information)" if d.severity == "info" else ""
        print(
            f"| `{d.name}` ({d.severity}) | {on_real.get(d.name, 0)}{info} | {on_shapes.get(d.name, 0)}{info} | "
            f"{show(s['real']) if 'real' in s else '-'} | {show(s['shape']) if 'shape' in s else '-'} |"
        )
    print("\nonline and offline found the same findings on every failure run")
    cost_line()


def cost_line() -> None:
    """The online cost, in both modes: ``HealthMonitor.observe`` against decoding the same pushes."""
    ratio, observe_us, decode_us = cost_ratio(shapes.real_run("yushengsu_amd_grpo_deepseek7b_gsm8k"))
    print(
        f"online cost: HealthMonitor.observe {observe_us:.0f} us a step, {ratio:.2f}x decoding the step's push "
        f"({decode_us:.0f} us), CPU time, over a real 1,120-step GRPO run"
    )


if __name__ == "__main__":
    main()
