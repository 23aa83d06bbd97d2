"""The detectors run online, in one walk per run that both the alerts and the run explorer read:
the walk of each run's history (``history/histories.py``: the per-run step columns the server holds
once, filled by the hub's pushes and, after a restart, read back from Prometheus), each step fed
once (``walk.py``), with what ``rl-insight diagnose`` reads, so that the explorer's findings of a run
are diagnose's (``run_findings``). What the detectors say of each step is exposed once, one stream
per run and detector (``source="health"``, ``detector``, ``metric``), stamped at the step's time:

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
(a planned change: ``rl-insight runs mark --reset-baseline``); the run's walk goes again from its
first step with it (what diagnose does with the marks), emitting nothing already emitted.
``set_resets`` gives the run's resets whole (the mark store, after any change to its marks: a reset
removed stops counting at once).
``take_run_keys(project, experiment, keys)``: the validation keys the run names in its config
(``rl_insight.health.validation_keys``, read from its card), followed before the server's; the card
may come after the run's first steps: the walk goes again with them, and the validation detector's
series of the run's last ``walk.LATE`` steps are emitted then (a fall already seen counts).

The walk is off the push path and off the scrape: a push only queues its steps for the history (the
explorer's listener); the server walks every second (``walk``, its own thread), the explorer when it
asks for a run's findings, and hands the hub what they made (``collect``, ``metrics/derived.py``); an
unnamed scrape (live values) has the hub collect first, which walks what is new. A named scrape
(Prometheus, history) never does.

Bounded, and booked under the hub's memory bound (``book``: ``Bound.book_other``; ``room.py``):
what the walk holds beside the history is per run its detectors' state (the last ``KEEP`` (120)
values of what each reads, the run's names, its findings) for at most ``max_runs`` runs, a few
numbers of what it emitted per run (its record, ``MAX_RECORDS`` runs), and the series made and not
collected yet. A walk that finds no room lets go idle walks (fed no step in the last ``ACTIVE_S``),
the one walked longest ago first, each walked again from its history's first step if asked for
again (``stats.walks_let_go``); with none idle the new walk is kept unbooked
(``stats.held_unbooked``), since letting go the walks of runs that still log would walk each again
from its first step at its every step. Series made with no room wait unbooked and the hub takes
them at its next push (``backlog``).
A step the history let go before the walk had it (a run at its cap, or forgotten for room, faster
than a second) is not walked. ``stats``: a ``room.HealthStats``. A run the history forgot for room
that logs again keeps its walk and its baselines (``RunWalk.goes_on``). A server restart starts the
walk again from the steps the history holds.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.health import room
from verl_rl_insight.server.health.detectors import DEFAULTS, Finding, Said
from verl_rl_insight.server.health.room import HealthStats
from verl_rl_insight.server.health.walk import LATE, Emitted, RunWalk, StepValues, to_emit
from verl_rl_insight.server.history.histories import Histories
from verl_rl_insight.server.metrics.derived import derived_batch
from verl_rl_insight.server.settings.health import HealthSettings

SOURCE = "health"
MAX_RECORDS = 10_000  # runs whose marks, own validation keys and emitted steps are kept (as many as run cards)
# a walk fed within this long is not let go for room (it would be walked again from its first step at
# the run's next step, every step: the CPU thrown at it, not the memory, would grow): kept unbooked
ACTIVE_S = 60.0


class _Record:
    """What the server knows of a run beside its history: its baseline resets, the validation keys
    its card names, what its walk emitted."""

    def __init__(self) -> None:
        self.resets: tuple[int, ...] = ()
        self.named: tuple[str, ...] = ()
        self.emitted = Emitted()
        self.walked: int | None = None  # the newest step any walk of the run had
        self.booked = 0  # what the record and the run's walk hold, booked under the hub's bound (room.py)
        self.fed_at = -math.inf  # when its walk was last fed a step (the monitor's clock)


class HealthMonitor:
    def __init__(
        self,
        params: HealthSettings | None = None,
        max_runs: int = 256,
        validation_keys: Sequence[str] = (),
        book: Callable[[int], bool] = lambda nbytes: True,
        histories: Histories | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``book``: books bytes (negative: gives them back) under the hub's memory bound; False, and
        nothing booked: no room (``Bound.book_other``). ``histories``: the explorer's, which the hub's
        listener fills (None: a history of its own, filled by ``observe``)."""
        self.validation_keys = tuple(validation_keys)  # the server config's validation_keys
        self.params = params or DEFAULTS
        self.max_runs = max_runs
        self.book = book
        self.clock = clock  # when a walk was fed: walks fed within ACTIVE_S are not let go for room
        self.histories = histories if histories is not None else Histories()
        self._own = histories is None
        self._stats = HealthStats()
        self._records: OrderedDict[Run, _Record] = OrderedDict()
        self._walks: OrderedDict[Run, RunWalk] = OrderedDict()
        self._made: list[Batch] = []  # the series walked, not collected yet, in order
        self._made_bytes = 0  # booked for them (under _lock)
        self._unbooked = 0  # of the series made, those with no room booked
        self._lock = threading.Lock()  # what was made, its booking and the counters (held briefly)
        self._walking = threading.Lock()  # the runs' walks and records: one walker at a time

    @property
    def stats(self) -> HealthStats:
        """A copy of the walk's counters, as of now."""
        with self._lock:
            return dataclasses.replace(self._stats, booked_bytes=self._made_bytes)

    def observe(self, batches: list[Batch]) -> None:
        """A hub listener for a monitor with a history of its own: the steps go to it (the server's
        monitor reads the explorer's history, which its own listener fills)."""
        if self._own:
            self.histories.observe(batches)

    def _record(self, run: Run) -> _Record:
        record = self._records.get(run)
        if record is None:
            record = self._records[run] = _Record()
            while len(self._records) > MAX_RECORDS:
                gone, forgotten = self._records.popitem(last=False)
                self._walks.pop(gone, None)
                self._give_back(forgotten, forgotten.booked)
        self._records.move_to_end(run)
        return record

    def reset_baseline(self, project: str, experiment: str, step: int) -> None:
        """Every detector's baseline of the run starts again at ``step`` (``rl-insight runs mark
        --reset-baseline``): the run's walk goes again from its first step with it."""
        with self._walking:
            record = self._record((project, experiment))
            record.resets = tuple(sorted({*record.resets, step}))
            self._rebook((project, experiment), record)

    def set_resets(self, project: str, experiment: str, steps: Sequence[int]) -> None:
        """The run's baseline resets are ``steps`` from now on (its marks changed: one added, moved
        off a reset, removed, or the run's marks deleted): walked again with them."""
        resets = tuple(sorted(set(steps)))
        with self._walking:
            record = self._records.get((project, experiment))
            if record is not None or resets:
                record = self._record((project, experiment))
                record.resets = resets
                self._rebook((project, experiment), record)

    def take_run_keys(self, project: str, experiment: str, keys: Sequence[str]) -> None:
        """The validation keys the run names (its card came): followed before the server's, the run
        walked again with them (what that makes is collected as a walk's is)."""
        with self._walking:
            self._record((project, experiment)).named = tuple(keys)
            self._walk_run((project, experiment))

    def findings(self, project: str, experiment: str) -> list[Finding]:
        """What the detectors found so far in the run (the run as finished)."""
        with self._walking:
            walked = self._walk_run((project, experiment))
            return walked[0].health.findings() if walked is not None else []

    def run_findings(self, run: Run, resets: Sequence[int]) -> list[Finding]:
        """The run's findings as diagnose finds them with the run's marks' ``resets`` (the run
        explorer's; [] for a run without history here); the stall finding reads the clock."""
        with self._walking:
            if self._held(run):  # a run asked for and never logged makes no record (anyone may ask)
                self._record(run).resets = tuple(sorted(set(resets)))
            walked = self._walk_run(run)
            return walked[0].health.findings(walked[1], time.time()) if walked is not None else []

    def walk(self) -> None:
        """Walk every run's steps the walk has not had (the server's thread, every second)."""
        self.histories.settle()  # the steps pushed since in their columns, their queue's booking given back
        with self._walking:
            for run in self.histories.runs():
                self._walk_run(run)

    def backlog(self) -> int:
        """The series made and not collected with no room booked (the hub takes them at once past
        its ``MAX_DERIVED_BACKLOG``): those booked wait for the server's next second."""
        return self._unbooked

    def collect(self) -> list[Batch]:
        """The series made since the last call, in order (``derived.Derived``): the steps not walked
        yet walked first (after a walk under way)."""
        self.walk()
        with self._lock:
            made, self._made = self._made, []
            freed, self._made_bytes, self._unbooked = self._made_bytes, 0, 0
        if freed:
            self.book(-freed)
        return made

    def _held(self, run: Run) -> bool:
        """Whether the histories hold the run."""
        with self.histories.lock:
            return self.histories.get(run) is not None

    def _walk_run(self, run: Run) -> tuple[RunWalk, bool] | None:
        """Feed the run's walk the steps of its history it has not had (walked again from the start
        when it no longer fits); the walk and whether the run finished (under ``_walking``)."""
        if not self._held(run):  # no record for it: asked-for names never push logged runs' records out
            return None
        record = self._record(run)
        keys = (*record.named, *self.validation_keys)
        walk = self._walks.get(run)
        with self.histories.lock:  # what the walk lacks copied out; the walking runs after
            history = self.histories.get(run)
            if history is None:
                return None
            finished = history.finished == 1
            if walk is not None and walk.version == history.version and walk.fits(history, record.resets, keys):
                self._walks.move_to_end(run)
                return walk, finished
            again = None
            if walk is None or not (
                walk.fits(history, record.resets, keys) or walk.goes_on(history, record.resets, keys)
            ):
                if record.walked is not None:
                    again = (record.walked, history.steps[max(0, len(history.steps) - LATE)] if history.steps else 0)
                    self._stats.rewalks += 1  # under _walking: the one writer
                walk = RunWalk(self.params, history, record.resets, keys)
            steps, floor = walk.unfed(history), history.exposed
        said = walk.feed(steps)
        if steps:
            record.walked = max(steps[-1][0], record.walked if record.walked is not None else steps[-1][0])
            record.fed_at = self.clock()
        self._keep(self._made_of(run, record, to_emit(record.emitted, said, floor, again)))
        self._walks[run] = walk
        self._walks.move_to_end(run)
        while len(self._walks) > self.max_runs:
            gone = next((other for other in self._walks if other != run), None)
            if gone is None:
                break
            self._let_go_walk(gone)
        self._rebook(run, record)
        with self._lock:
            self._stats.steps += len(steps)
        return walk, finished

    def _held_bytes(self, run: Run, record: _Record) -> int:
        """What the run's record and walk hold now (``room.py``)."""
        walk = self._walks.get(run)
        emitted = record.emitted
        size = room.record_bytes(emitted.newest, emitted.counts, record.resets, record.named)
        return size + (room.walk_bytes(walk.health) if walk is not None else 0)

    def _rebook(self, run: Run, record: _Record) -> None:
        """Book what the run's record and walk hold now (under ``_walking``); with no room, idle walks
        are let go, walked longest ago first (each walked again from its history when asked), and
        with none left to let go the run's grown part stays unbooked (counted)."""
        size = self._held_bytes(run, record)
        delta = size - record.booked
        if delta <= 0:
            self._give_back(record, -delta)
            return
        while not self.book(delta):
            idle = next((other for other in self._walks if other != run and self._idle(other)), None)
            if idle is None:
                with self._lock:
                    self._stats.held_unbooked += 1
                return
            self._let_go_walk(idle)
            with self._lock:
                self._stats.walks_let_go += 1
        record.booked = size
        with self._lock:
            self._stats.held_bytes += delta

    def _idle(self, run: Run) -> bool:
        """Whether the run's walk was fed no step in the last ``ACTIVE_S`` (may be let go for room)."""
        record = self._records.get(run)
        return record is None or self.clock() - record.fed_at >= ACTIVE_S

    def _let_go_walk(self, run: Run) -> None:
        """Let the run's walk go, giving back what it held (under ``_walking``); never books more."""
        del self._walks[run]
        record = self._records.get(run)
        if record is not None:
            self._give_back(record, record.booked - min(record.booked, self._held_bytes(run, record)))

    def _give_back(self, record: _Record, nbytes: int) -> None:
        """Give back ``nbytes`` of what ``record`` booked."""
        if nbytes:
            self.book(-nbytes)
            record.booked -= nbytes
            with self._lock:
                self._stats.held_bytes -= nbytes

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

    def _made_of(self, run: Run, record: _Record, saids: list[tuple[StepValues, Said]]) -> list[Batch]:
        """The series of what the detectors said of each step (under ``_walking``)."""
        project, experiment = run
        made: list[Batch] = []
        counts = record.emitted.counts
        for step, said in saids:
            at = step.time
            counts[said.detector] = counts.get(said.detector, 0.0) + (1.0 if said.finding else 0.0)
            metrics = {
                "rl_insight_health_finding": 1.0 if said.finding else 0.0,
                "rl_insight_health_findings_total": counts[said.detector],
            }
            for name, x in (("rl_insight_health_value", said.value), ("rl_insight_health_baseline", said.baseline)):
                if x is not None:
                    metrics[name] = x  # derived_batch leaves out what is not finite
            with self._lock:
                self._stats.findings += int(said.finding)
            labels = {"project": project, "experiment_name": experiment, "source": SOURCE, "detector": said.detector}
            made.append(derived_batch({**labels, "metric": said.metric}, at, metrics))
        return made
