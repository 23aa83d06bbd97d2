"""The detectors run online: the server walks every detector over each trainer step it accepts
and exposes what they say, one stream per run and detector (``source="health"``, ``detector``,
``metric``), stamped at the step's time:

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

The walk is off the push path and off the scrape: a push only queues its steps (``observe``, a hub
listener); the server walks them every second (``walk``, its own thread) and hands the hub what
they made (``collect``, ``metrics/derived.py``), stamped at their steps' times; an unnamed scrape
(live values) has the hub collect first, and ``collect`` walks what is queued unless a walk is under
way. A named scrape (Prometheus, history) never does: a backlog would hold it past its timeout. Beyond
``MAX_WAITING`` steps queued, the push that adds one walks them (bounded whoever walks).

``take_run_keys(project, experiment, keys)``: the validation keys the run names in its config
(``rl_insight.health.validation_keys``, read from its card), followed before the server's. The card
may come after the run's first steps: until it comes, a run keeps its last ``HOLD`` steps walked (the
hub's tuples, not copies), and keys that come late are walked again over them (a validation fall
under a key the run names counts from the steps already seen).

Bounded: ``max_runs`` runs (the one heard from longest ago is forgotten first), each detector
keeping the last ``KEEP`` (120) values of what it reads. A server restart starts the baselines again
from the next steps.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import NamedTuple

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.health.defaults import HealthSettings
from verl_rl_insight.server.health.detectors import BY_NAME, DEFAULTS, Finding, RunHealth, Said
from verl_rl_insight.server.metrics.derived import derived_batch

SOURCE = "health"
ONLINE = {d.name for d in BY_NAME.values() if d.online} | {"stall"}  # stall: its step times, for its rule
MAX_WAITING = 64  # trainer steps queued for the walk, all runs together (see the module docstring)
HOLD = 64  # steps a run keeps until its card comes (validation keys that come late walk them again) ...
HOLD_RUNS = 2  # ... in the newest runs without a card only: the steps' values stay alive while held


class _Waiting(NamedTuple):
    """A trainer step queued for the walk: the tuples of names and values the hub's snapshot holds
    too (a view, not a copy of the step)."""

    run: Run
    step: int
    time: float
    names: tuple[str, ...]
    values: Sequence[float]  # the hub's tuple; held for a card: a copy in one array (no float kept alive)


class _Run:
    def __init__(self, params: HealthSettings, validation_keys: Sequence[str]) -> None:
        self.walk = RunHealth(params, validation_keys=validation_keys)
        self.counts: dict[str, float] = {}  # detector name -> steps that belonged to a finding
        self.held: deque[_Waiting] | None = deque(maxlen=HOLD)  # None once the run's card came
        self.names: tuple[str, ...] = ()  # the names of the steps held, while they stay the same


class HealthMonitor:
    def __init__(
        self,
        params: HealthSettings | None = None,
        max_runs: int = 256,
        validation_keys: Sequence[str] = (),
    ) -> None:
        self.validation_keys = tuple(validation_keys)  # the server config's validation_keys
        self.params = params or DEFAULTS
        self.max_runs = max_runs
        self.stats = {"steps": 0, "findings": 0, "walked_on_push": 0}
        self._runs: OrderedDict[Run, _Run] = OrderedDict()
        self._holding: OrderedDict[Run, None] = OrderedDict()  # runs holding steps for a card, oldest first
        self._waiting: list[_Waiting] = []  # trainer steps the hub took, not walked yet, in order
        self._made: list[Batch] = []  # the series walked, not collected yet, in order
        self._lock = threading.Lock()  # the queue, what was made and the counters (held briefly)
        self._walking = threading.Lock()  # the runs' walks: one walker at a time, in the order queued

    def _run(self, run_key: Run) -> _Run:
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
        with self._walking:
            self._walk()
            self._run((project, experiment)).walk.reset_baseline(step)

    def take_run_keys(self, project: str, experiment: str, keys: Sequence[str]) -> None:
        """The validation keys the run names (its card came): followed before the server's, walked
        again over the steps the run held (what they make is collected as a walk's is)."""
        with self._walking:
            self._walk()
            run = self._run((project, experiment))
            held, run.held = run.held or (), None
            self._holding.pop((project, experiment), None)
            made: list[Batch] = []
            if keys:
                steps = [(h.step, dict(zip(h.names, h.values))) for h in held]
                at = {h.step: h for h in held}
                for step, said in run.walk.take_validation_keys(keys, steps):
                    made.extend(self._made_of(at[step], run, [said]))
            with self._lock:
                self._made.extend(made)

    def findings(self, project: str, experiment: str) -> list[Finding]:
        """What the detectors found so far in the run (the server's memory of it)."""
        with self._walking:
            self._walk()
            run = self._runs.get((project, experiment))
            return run.walk.findings() if run is not None else []

    def observe(self, batches: list[Batch]) -> None:
        """The batches the hub accepted: the trainer's own streams' steps are queued (a hub listener)."""
        with self._lock:
            for b in batches:
                if b.step is not None and len(b.labels) == 2:  # labels: experiment_name, project (sorted)
                    self._waiting.append(_Waiting((b.labels[1][1], b.labels[0][1]), b.step, b.time, b.names, b.values))
            over = len(self._waiting) > MAX_WAITING
            if over:
                self.stats["walked_on_push"] += len(self._waiting)
        if over:
            self.walk()

    def walk(self) -> None:
        """Walk the steps queued (the server's thread, every second; a push beyond the bound)."""
        with self._walking:
            self._walk()

    def backlog(self) -> int:
        return len(self._made)

    def collect(self) -> list[Batch]:
        """The series made since the last call, in order (``derived.Derived``): the steps still queued
        walked first, unless a walk is under way (its series go with the next call)."""
        if self._walking.acquire(blocking=False):
            try:
                self._walk()
            finally:
                self._walking.release()
        with self._lock:
            made, self._made = self._made, []
        return made

    def _walk(self) -> None:
        """Walk the queued steps (under ``_walking``)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        made: list[Batch] = []
        for step in waiting:
            made.extend(self._step(step, self._run(step.run)))
        with self._lock:
            self._made.extend(made)
            self.stats["steps"] += len(waiting)

    def _step(self, step: _Waiting, run: _Run) -> list[Batch]:
        if run.held is not None:
            # a copy that keeps none of the push's objects alive: each push decodes its own name strings
            run.names = run.names if run.names == step.names else step.names
            run.held.append(step._replace(names=run.names, values=array("d", step.values)))
            self._holding[step.run] = None
            while len(self._holding) > HOLD_RUNS:  # the hub let those steps go; held, they would stay
                oldest, _ = self._holding.popitem(last=False)
                if (gone := self._runs.get(oldest)) is not None:
                    gone.held = None  # a card it sends later counts from the steps after
        return self._made_of(step, run, run.walk.add(step.step, dict(zip(step.names, step.values)), step.time))

    def _made_of(self, step: _Waiting, run: _Run, saids: Sequence[Said]) -> list[Batch]:
        """The series of what the detectors said of ``step`` (under ``_walking``)."""
        project, experiment = step.run
        made: list[Batch] = []
        for said in saids:
            if said.detector not in ONLINE:
                continue
            run.counts[said.detector] = run.counts.get(said.detector, 0.0) + (1.0 if said.finding else 0.0)
            metrics = {
                "rl_insight_health_finding": 1.0 if said.finding else 0.0,
                "rl_insight_health_findings_total": run.counts[said.detector],
            }
            for name, x in (("rl_insight_health_value", said.value), ("rl_insight_health_baseline", said.baseline)):
                if x is not None:
                    metrics[name] = x  # derived_batch leaves out what is not finite
            self.stats["findings"] += int(said.finding)  # under _walking: the one writer
            labels = {"project": project, "experiment_name": experiment, "source": SOURCE, "detector": said.detector}
            made.append(derived_batch({**labels, "metric": said.metric}, step.time, metrics))
        return made
