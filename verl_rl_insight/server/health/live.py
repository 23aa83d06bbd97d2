"""The detectors run online: the server walks every detector over each trainer step it accepts
(before Prometheus has it) and pushes what they say into the hub, one stream per run and detector
(``source="health"``, ``detector``, ``metric``), stamped at the step's time:

- ``rl_insight_health_finding``: 1 while the newest step belongs to a finding, else 0;
- ``rl_insight_health_findings_total``: the steps that belonged to a finding so far (the
  ``RLInsight<Mode>`` alert rules fire on its increase: a one-step finding, a NaN or a spike, is
  not lost between two scrapes);
- ``rl_insight_health_value`` and ``rl_insight_health_baseline``: the value tested and the run's
  own baseline (median of the steps before), the evidence.

Also, per run, the stall detector's stream (``detector="stall"``): the latest step's duration and
the run's median step time, which ``RLInsightTrainingStalled`` compares with the time since the
run's last step (so it never fires before a run has a step time).

``reset_baseline(project, experiment, step)``: every baseline of the run starts again at ``step``
(a planned change: ``rl-insight runs mark --reset-baseline``).

Bounded: ``max_runs`` runs (the one heard from longest ago is forgotten first), each detector
keeping the last ``KEEP`` (120) values of what it reads. A server restart starts the baselines again
from the next steps.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from verl_rl_insight.server.health.detectors import BY_NAME, DEFAULTS, Finding, RunHealth

SOURCE = "health"
ONLINE = {d.name for d in BY_NAME.values() if d.online} | {"stall"}  # stall: its step times, for its rule


class _Run:
    def __init__(self, params: Mapping[str, float], validation_keys: Sequence[str]) -> None:
        self.walk = RunHealth(params, validation_keys=validation_keys)
        self.counts: dict[str, float] = {}  # detector name -> steps that belonged to a finding


class HealthMonitor:
    def __init__(
        self,
        emit: Callable[[dict[str, Any]], Any],
        params: Mapping[str, float] | None = None,
        max_runs: int = 256,
        validation_keys: Sequence[str] = (),
    ) -> None:
        self.emit = emit
        self.validation_keys = tuple(validation_keys)  # the server config's validation_keys
        self.params = {**DEFAULTS, **(params or {})}
        self.max_runs = max_runs
        self.stats = {"steps": 0, "findings": 0}
        self._runs: OrderedDict[tuple[str, str], _Run] = OrderedDict()
        self._lock = threading.Lock()

    def _run(self, run_key: tuple[str, str]) -> _Run:
        run = self._runs.get(run_key)
        if run is None:
            run = self._runs[run_key] = _Run(self.params, self.validation_keys)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
        self._runs.move_to_end(run_key)
        return run

    def reset_baseline(self, project: str, experiment: str, step: int) -> None:
        """Every detector's baseline of the run starts again at ``step`` (``rl-insight runs mark
        --reset-baseline``): the steps before it are not baseline once the run is there."""
        with self._lock:
            self._run((project, experiment)).walk.reset_baseline(step)

    def findings(self, project: str, experiment: str) -> list[Finding]:
        """What the detectors found so far in the run (the server's memory of it)."""
        with self._lock:
            run = self._runs.get((project, experiment))
            return run.walk.findings() if run is not None else []

    def observe(self, batches: list[Any]) -> None:
        """The batches the hub accepted (``contract.wire.Batch``): the trainer's own stream only."""
        out: list[dict[str, Any]] = []
        with self._lock:
            for batch in batches:
                labels = dict(batch.labels)
                if batch.step is None or set(labels) != {"project", "experiment_name"}:
                    continue
                run_key = (labels["project"], labels["experiment_name"])
                out.extend(self._step(run_key, self._run(run_key), batch))
                self.stats["steps"] += 1
        if out:  # outside the lock: the hub calls its listeners (this one too) from the push
            self.emit({"batches": out})

    def _step(self, run_key: tuple[str, str], run: _Run, batch: Any) -> list[dict[str, Any]]:
        project, experiment = run_key
        made: list[dict[str, Any]] = []
        for said in run.walk.add(batch.step, batch.metrics, batch.time):
            if said.detector not in ONLINE:
                continue
            run.counts[said.detector] = run.counts.get(said.detector, 0.0) + (1.0 if said.finding else 0.0)
            metrics = {
                "rl_insight_health_finding": 1.0 if said.finding else 0.0,
                "rl_insight_health_findings_total": run.counts[said.detector],
            }
            for name, x in (("rl_insight_health_value", said.value), ("rl_insight_health_baseline", said.baseline)):
                if x is not None and math.isfinite(x):
                    metrics[name] = x
            self.stats["findings"] += int(said.finding)
            made.append(
                {
                    "project": project,
                    "experiment_name": experiment,
                    "time": batch.time,
                    "metrics": metrics,
                    "labels": {"source": SOURCE, "detector": said.detector, "metric": said.metric},
                }
            )
        return made
