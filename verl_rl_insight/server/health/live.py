"""The detectors run online: the server walks every detector over each trainer step it accepts
(before Prometheus has it) and pushes what they say into the hub, one stream per run and detector
(``source="health"``, ``detector``, ``metric``), stamped at the step's time:

- ``rl_insight_health_finding``: 1 while the newest step belongs to a finding, else 0;
- ``rl_insight_health_findings_total``: the steps that belonged to a finding so far (the
  ``RLInsight<Mode>`` alert rules fire on its increase: a one-step finding, a NaN or a spike, is
  not lost between two scrapes);
- ``rl_insight_health_value`` and ``rl_insight_health_baseline``: the value tested and the run's
  own baseline (median of the steps before), the evidence.

Bounded: ``max_runs`` runs (the one heard from longest ago is forgotten first), each detector
keeping the last 200 steps. A server restart starts the baselines again from the next steps.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from verl_rl_insight.server.health.detectors import (
    DEFAULTS,
    DETECTORS,
    NON_FINITE_KEYS,
    Streak,
    key_of,
    series_name,
    verl_key,
)

SOURCE = "health"


class _Run:
    def __init__(self) -> None:
        self.streaks: dict[str, Streak] = {}  # detector name -> its walk over the metric chosen
        self.counts: dict[str, float] = {}  # detector name -> steps that belonged to a finding


class HealthMonitor:
    def __init__(
        self, emit: Callable[[dict[str, Any]], Any], params: Mapping[str, float] | None = None, max_runs: int = 256
    ) -> None:
        self.emit = emit
        self.params = {**DEFAULTS, **(params or {})}
        self.max_runs = max_runs
        self.stats = {"steps": 0, "findings": 0}
        self._runs: OrderedDict[tuple[str, str], _Run] = OrderedDict()
        self._lock = threading.Lock()
        self._non_finite = {series_name(k): k for k in NON_FINITE_KEYS}

    def observe(self, batches: list[Any]) -> None:
        """The batches the hub accepted (``contract.wire.Batch``): the trainer's own stream only."""
        out: list[dict[str, Any]] = []
        with self._lock:
            for batch in batches:
                labels = dict(batch.labels)
                if batch.step is None or set(labels) != {"project", "experiment_name"}:
                    continue
                run_key = (labels["project"], labels["experiment_name"])
                run = self._runs.get(run_key)
                if run is None:
                    run = self._runs[run_key] = _Run()
                    while len(self._runs) > self.max_runs:
                        self._runs.popitem(last=False)
                self._runs.move_to_end(run_key)
                out.extend(self._step(run_key, run, batch))
                self.stats["steps"] += 1
        if out:  # outside the lock: the hub calls its listeners (this one too) from the push
            self.emit({"batches": out})

    def _step(self, run_key: tuple[str, str], run: _Run, batch: Any) -> list[dict[str, Any]]:
        project, experiment = run_key

        def push(detector: str, metric: str, finding: bool, value: float | None, baseline: float | None) -> None:
            run.counts[detector] = run.counts.get(detector, 0.0) + (1.0 if finding else 0.0)
            metrics = {
                "rl_insight_health_finding": 1.0 if finding else 0.0,
                "rl_insight_health_findings_total": run.counts[detector],
            }
            for name, x in (("rl_insight_health_value", value), ("rl_insight_health_baseline", baseline)):
                if x is not None and math.isfinite(x):
                    metrics[name] = x
            self.stats["findings"] += int(finding)
            made.append(
                {
                    "project": project,
                    "experiment_name": experiment,
                    "time": batch.time,
                    "metrics": metrics,
                    "labels": {"source": SOURCE, "detector": detector, "metric": metric},
                }
            )

        made: list[dict[str, Any]] = []
        broken = [
            self._non_finite[n] for n, v in batch.metrics.items() if n in self._non_finite and not math.isfinite(v)
        ]
        if broken or any(n in self._non_finite for n in batch.metrics):
            push("non_finite", "losses", bool(broken), None, None)  # one stream: its counter's increase is seen
        for detector in DETECTORS:
            if not detector.online:
                continue
            streak = run.streaks.get(detector.name)
            name = streak.metric if streak is not None else key_of(detector, batch.metrics)
            if name is None or name not in batch.metrics:
                continue
            if streak is None:
                streak = run.streaks[detector.name] = Streak(detector, name, self.params)
            check = streak.add(batch.step, batch.metrics[name])
            if check is not None:
                push(detector.name, verl_key(name), streak.active, check.value, check.baseline)
        return made
