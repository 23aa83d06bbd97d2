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
(live values) has the hub collect first, and ``collect`` walks what is queued, after a walk under
way (it shows the findings of every step pushed before it; it waits at most for the walk of what the
bound let queue). A named scrape (Prometheus, history) never does: a backlog would hold it past its
timeout.

Bounded by bytes, under the hub's memory bound (``book``: ``Bound.book_other``, ``room.py`` for
what each holds): the steps queued (the hub's values tuples, which it may drop while they wait; at
most ``queue_bytes``), the steps held for a late card, and the series made and not collected yet are
booked. A push whose steps find no room walks the queue itself (back-pressure:
``stats.walked_on_push``, ``pushes_walked``); series made with no room wait unbooked, and the hub
takes them at its next push (``backlog``); a run whose held step finds no room holds none more
(``held_refused``). ``stats``: a ``room.HealthStats``.

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

import dataclasses
import threading
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.health import room
from verl_rl_insight.server.health.defaults import HealthSettings
from verl_rl_insight.server.health.detectors import BY_NAME, DEFAULTS, Finding, RunHealth, Said
from verl_rl_insight.server.health.room import HealthStats
from verl_rl_insight.server.metrics.derived import derived_batch

SOURCE = "health"
ONLINE = {d.name for d in BY_NAME.values() if d.online} | {"stall"}  # stall: its step times, for its rule
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
        self.held: deque[_Waiting] | None = deque()  # the last HOLD steps; None once the run's card came
        self.costs: deque[int] = deque()  # what each held step booked (a names tuple: its oldest holder)
        self.names: tuple[str, ...] = ()  # the names of the steps held, while they stay the same


class HealthMonitor:
    def __init__(
        self,
        params: HealthSettings | None = None,
        max_runs: int = 256,
        validation_keys: Sequence[str] = (),
        book: Callable[[int], bool] = lambda nbytes: True,
        queue_bytes: int | None = None,
    ) -> None:
        """``book``: books bytes (negative: gives them back) under the hub's memory bound; False, and
        nothing booked: no room (``Bound.book_other``). ``queue_bytes``: the most the queue books (the
        rest of what the server may hold beside the hub stays for the others: the timeline's spans)."""
        self.validation_keys = tuple(validation_keys)  # the server config's validation_keys
        self.params = params or DEFAULTS
        self.max_runs = max_runs
        self.book, self.queue_bytes = book, queue_bytes
        self._stats = HealthStats()
        self._runs: OrderedDict[Run, _Run] = OrderedDict()
        self._holding: OrderedDict[Run, None] = OrderedDict()  # runs holding steps for a card, oldest first
        self._waiting: list[_Waiting] = []  # trainer steps the hub took, not walked yet, in order
        self._queued_names: dict[Run, tuple[str, ...]] = {}  # the names tuple of each run's last step queued
        self._made: list[Batch] = []  # the series walked, not collected yet, in order
        self._waiting_bytes = self._made_bytes = 0  # booked for them (under _lock)
        self._unbooked = 0  # of the series made, those with no room booked
        self._held_bytes = 0  # booked for the steps held (under _walking)
        self._lock = threading.Lock()  # the queue, what was made, their bookings and the counters (held briefly)
        self._walking = threading.Lock()  # the runs' walks: one walker at a time, in the order queued

    @property
    def stats(self) -> HealthStats:
        """A copy of the walk's counters, as of now."""
        with self._lock:
            booked = self._waiting_bytes + self._made_bytes + self._held_bytes
            return dataclasses.replace(self._stats, booked_bytes=booked)

    def _run(self, run_key: Run) -> _Run:
        run = self._runs.get(run_key)
        if run is None:
            run = self._runs[run_key] = _Run(self.params, self.validation_keys)
            while len(self._runs) > self.max_runs:
                self._let_go(*self._runs.popitem(last=False))
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
            held = list(run.held or ())
            self._let_go((project, experiment), run)
            made: list[Batch] = []
            if keys:
                steps = [(h.step, dict(zip(h.names, h.values))) for h in held]
                at = {h.step: h for h in held}
                for step, said in run.walk.take_validation_keys(keys, steps):
                    made.extend(self._made_of(at[step], run, [said]))
            self._keep(made)

    def findings(self, project: str, experiment: str) -> list[Finding]:
        """What the detectors found so far in the run (the server's memory of it)."""
        with self._walking:
            self._walk()
            run = self._runs.get((project, experiment))
            return run.walk.findings() if run is not None else []

    def observe(self, batches: list[Batch]) -> None:
        """The batches the hub accepted: the trainer's own streams' steps are queued (a hub listener),
        booked; with no room for them the push walks the queue itself (back-pressure)."""
        steps = [  # labels: experiment_name, project (sorted)
            _Waiting((b.labels[1][1], b.labels[0][1]), b.step, b.time, b.names, b.values)
            for b in batches
            if b.step is not None and len(b.labels) == 2
        ]
        if not steps:
            return
        nbytes = sum(room.step_bytes(len(s.values)) for s in steps)
        with self._lock:  # a run's names tuple once while its steps share it (the stream's, as the hub keeps it)
            names = self._queued_names
            for s in steps:
                if names.get(s.run) is not s.names:
                    names[s.run] = s.names
                    nbytes += room.names_bytes(s.names)
            fits = self.queue_bytes is None or self._waiting_bytes + nbytes <= self.queue_bytes
        queued = fits and self.book(nbytes)
        with self._lock:
            self._waiting.extend(steps)
            if queued:
                self._waiting_bytes += nbytes
            else:
                self._stats.walked_on_push += len(self._waiting)
                self._stats.pushes_walked += 1
        if not queued:
            self.walk()

    def walk(self) -> None:
        """Walk the steps queued (the server's thread, every second; a push with no room to queue)."""
        with self._walking:
            self._walk()

    def backlog(self) -> int:
        """The series made and not collected with no room booked (the hub takes them at once past
        its ``MAX_DERIVED_BACKLOG``): those booked wait for the server's next second."""
        return self._unbooked

    def collect(self) -> list[Batch]:
        """The series made since the last call, in order (``derived.Derived``): the steps still queued
        walked first (after a walk under way: the steps pushed before are in what it returns)."""
        with self._walking:
            self._walk()
        with self._lock:
            made, self._made = self._made, []
            freed, self._made_bytes, self._unbooked = self._made_bytes, 0, 0
        if freed:
            self.book(-freed)
        return made

    def _walk(self) -> None:
        """Walk the queued steps (under ``_walking``)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
            booked, self._waiting_bytes = self._waiting_bytes, 0
            self._queued_names = {}
        made: list[Batch] = []
        for step in waiting:
            made.extend(self._step(step, self._run(step.run)))
        if booked:
            self.book(-booked)  # before the series made book theirs
        self._keep(made)
        with self._lock:
            self._stats.steps += len(waiting)

    def _keep(self, made: list[Batch]) -> None:
        """Keep the series made for the hub to collect, booked; with no room, unbooked and counted:
        the hub then takes them at the next push (``backlog``)."""
        if not made:
            return
        nbytes = room.MADE_BYTES * len(made)
        booked = self.book(nbytes)
        with self._lock:
            self._made.extend(made)
            if booked:
                self._made_bytes += nbytes
            else:
                self._unbooked += len(made)
                self._stats.made_unbooked += len(made)

    def _step(self, step: _Waiting, run: _Run) -> list[Batch]:
        if run.held is not None:
            self._hold(step, run)
        if run.held is not None:
            self._holding[step.run] = None
            while len(self._holding) > HOLD_RUNS:  # the hub let those steps go; held, they would stay
                oldest, _ = self._holding.popitem(last=False)
                if (gone := self._runs.get(oldest)) is not None:
                    self._let_go(oldest, gone)  # a card it sends later counts from the steps after
        return self._made_of(step, run, run.walk.add(step.step, dict(zip(step.names, step.values)), step.time))

    def _hold(self, step: _Waiting, run: _Run) -> None:
        """Hold a copy of ``step`` for the run's card, booked; with no room the run holds none more
        (under ``_walking``)."""
        assert run.held is not None
        fresh = run.names != step.names  # a copy that keeps none of the push's objects alive
        cost = room.held_bytes(len(step.values)) + (room.names_bytes(step.names) if fresh else 0)
        if len(run.held) >= HOLD:
            self._drop_oldest(run)
        if not self.book(cost):
            with self._lock:
                self._stats.held_refused += 1
            self._let_go(step.run, run)
            return
        run.names = step.names if fresh else run.names
        run.held.append(step._replace(names=run.names, values=array("d", step.values)))
        run.costs.append(cost)
        self._held_bytes += cost

    def _drop_oldest(self, run: _Run) -> None:
        """The run's oldest held step goes; its names tuple stays booked with the next step holding it."""
        assert run.held is not None
        old, cost = run.held.popleft(), run.costs.popleft()
        names = cost - room.held_bytes(len(old.values))
        if names and run.held and run.held[0].names is old.names:
            run.costs[0] += names
            cost -= names
        self._held_bytes -= cost
        self.book(-cost)

    def _let_go(self, key: Run, run: _Run) -> None:
        """The run holds no steps more: its card came, it had no room, or it is not among the newest
        without one, or forgotten (under ``_walking``)."""
        self._holding.pop(key, None)
        if run.held is None:
            return
        freed = sum(run.costs)
        run.held, run.names = None, ()
        run.costs.clear()
        self._held_bytes -= freed
        if freed:
            self.book(-freed)

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
            self._stats.findings += int(said.finding)  # under _walking: the one writer
            labels = {"project": project, "experiment_name": experiment, "source": SOURCE, "detector": said.detector}
            made.append(derived_batch({**labels, "metric": said.metric}, step.time, metrics))
        return made
