"""Every run's trainer scalars by step (``run_history.RunHistory``: one column of floats per series,
aligned on the run's steps), as the explorer reads them and the live detectors walk them.

Filled from the batches the hub accepts (a hub listener: the trainer's own stream, the batches with a
step), and, for a run the server has not heard since it started, read back once from its Prometheus
(``prometheus.read_run``).

Bounded by bytes, not by a count of runs: ``max_bytes`` in all (the histories' share of the server's
``memory_limit_mb``, ``settings/memory.py``; beyond it the run touched longest ago is forgotten first, counted in
``stats.forgotten_runs``), ``max_cells`` values per run (beyond it the run's oldest steps go,
counted in ``stats.dropped_steps``). A run forgotten here is not lost: its steps are in
Prometheus, and a run that logs again after it was forgotten is marked ``partial`` so that the
explorer reads it back whole (``Sources.history``) instead of showing the steps since, and again
until Prometheus gives back the newest step it had when it was forgotten (``awaited``: a scrape
behind the pushes has not sent Prometheus those steps yet).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from verl_rl_insight.contract.counters import Counters
from verl_rl_insight.contract.runs import Run, trainer_run
from verl_rl_insight.server.history.run_history import FINISHED, RunHistory
from verl_rl_insight.server.settings.memory import DEFAULT_SHARES

MAX_CELLS = 4_000_000  # values per run: 10,000 steps of 400 series (32 MB) ...
MAX_BYTES = DEFAULT_SHARES.histories  # ... and all runs' bytes (the server gives its own share of memory_limit_mb)
MAX_FORGOTTEN = 4096  # runs remembered as forgotten (read back whole when they log again)
WAITING_BYTES = 32  # a value queued: its place in the tuple and its float (the hub's snapshot holds the same)


class StepBatch(Protocol):
    """What the explorer reads of a batch the hub accepted (``contract.wire.Batch``)."""

    labels: tuple[tuple[str, str], ...]
    step: int | None
    time: float
    metrics: dict[str, float]
    names: tuple[str, ...]  # metrics' names and values, in its order (the hub holds the same tuples)
    values: tuple[float, ...]
    keys: dict[str, str] | None  # name: the key the trainer logged, for a name that does not tell it


@dataclasses.dataclass(slots=True)
class HistoryStats(Counters):
    steps: int = 0  # steps added
    settled_on_push: int = 0  # pushes that put the steps waiting in their columns (no room for more waiting)
    dropped_steps: int = 0  # a run's oldest steps dropped at max_cells
    forgotten_runs: int = 0  # runs forgotten at max_bytes (read back from Prometheus when asked)


class Step(NamedTuple):
    """A step of a run read back from Prometheus (``explorer/prometheus.py``)."""

    step: int
    time: float  # the step's time: the trainer's, one for all its values
    values: Mapping[str, float]  # series name -> value


class Waiting(NamedTuple):
    """A batch queued for the next read."""

    run: Run
    step: int | None  # None: finish()'s batch
    at: float  # the step's time
    names: tuple[str, ...]
    values: tuple[float, ...]


class Histories:
    """The runs' histories, thread-safe: the hub's pushes add, the API's requests read (under ``lock``).

    A push only queues its steps (the names and values tuples the hub's snapshots hold, not a copy);
    they are put in their columns, in the order they came, by the first read after it (the
    detectors' walk, every second on the server's thread, or a request), so a push's cost is not the
    per-value work. The queue is booked (``book``, under the hub's memory bound) at ``WAITING_BYTES``
    a value; a push that finds no room puts the queue in its columns itself
    (``stats.settled_on_push``). ``book`` takes the hub's lock, so it is never called under ``lock``:
    what a read settled is given back by the next push or ``settle``."""

    def __init__(
        self,
        max_bytes: int = MAX_BYTES,
        max_cells: int = MAX_CELLS,
        book: Callable[[int], bool] = lambda nbytes: True,
        max_waiting_bytes: int | None = None,
    ) -> None:
        """``book``: books bytes (negative: gives back) under the hub's bound, False: no room
        (``Bound.book_other``); ``max_waiting_bytes``: the queue's own bound (the server gives its share,
        ``MemoryShares.histories_waiting``; ``max_bytes`` / 2 when not given)."""
        self.max_bytes = max_bytes
        self.max_cells = max_cells
        self.book = book
        self.max_waiting_bytes = max_bytes // 2 if max_waiting_bytes is None else max_waiting_bytes
        self.lock = threading.RLock()  # a read takes it to settle the queue, under a caller that holds it
        self.stats = HistoryStats()
        self._waiting: list[Waiting] = []
        self._waiting_bytes = 0  # booked for them
        self._freed = 0  # booked for steps settled since, not given back yet
        self._runs: OrderedDict[Run, RunHistory] = OrderedDict()
        self._bytes: dict[Run, int] = {}  # each run's nbytes() when it last changed
        self._total = 0  # their sum
        # runs forgotten here (read back when asked), each with the newest step it had then
        self._forgotten: OrderedDict[Run, int | None] = OrderedDict()

    def observe(self, batches: Sequence[StepBatch]) -> None:
        """The hub's listener: each trainer batch with a step, and finish()'s batch (its own stream:
        labels project and experiment_name only), queued for the next read."""
        waiting: list[Waiting] = []
        nbytes = 0
        for batch in batches:
            run = trainer_run(batch.labels)
            if run is not None and (batch.step is not None or FINISHED in batch.metrics):
                waiting.append(Waiting(run, batch.step, batch.time, batch.names, batch.values))
                nbytes += WAITING_BYTES * (len(batch.values) + 8)
        if not waiting:
            return
        booked = self.book(nbytes)
        with self.lock:
            self._waiting.extend(waiting)
            if booked:
                self._waiting_bytes += nbytes
            if not booked or self._waiting_bytes > self.max_waiting_bytes:
                self.stats.settled_on_push += 1
                self._settle()
        self._give_back()

    def settle(self) -> None:
        """Put the steps waiting in their columns and give back their booking (the detectors' walk,
        every second; never under ``lock``)."""
        with self.lock:
            self._settle()
        self._give_back()

    def _give_back(self) -> None:
        with self.lock:
            freed, self._freed = self._freed, 0
        if freed:
            self.book(-freed)

    def _settle(self) -> None:
        """Put the steps waiting in their columns, in the order they came (under ``lock``)."""
        waiting, self._waiting = self._waiting, []
        for run, step, at, names, values in waiting:
            if step is not None:
                self._add(run, step, at, names, values)
            elif run in self._runs:  # finish(): a batch of its own
                self._runs[run].finished = values[names.index(FINISHED)]
                self._runs[run].version += 1
        self._freed += self._waiting_bytes
        self._waiting_bytes = 0

    def _add(self, run: Run, step: int, at: float, names: tuple[str, ...], values: Sequence[float]) -> None:
        history = self._runs.get(run)
        if history is None:
            history = self._runs[run] = RunHistory()
            history.partial = run in self._forgotten
            history.awaited = self._forgotten.pop(run, None)
        self._runs.move_to_end(run)
        if history.add(step, at, names, values):
            self.stats.steps += 1
        while history.cells() > self.max_cells and len(history.steps) > 1:
            history.drop_oldest()
            self.stats.dropped_steps += 1
        nbytes = history.nbytes()
        self._total += nbytes - self._bytes.get(run, 0)
        self._bytes[run] = nbytes
        while len(self._runs) > 1 and self._total > self.max_bytes:
            gone, forgotten = self._runs.popitem(last=False)  # (never ``run``: it was touched last)
            self._total -= self._bytes.pop(gone, 0)
            newest = forgotten.steps[-1] if forgotten.steps else None
            if forgotten.awaited is not None:  # forgotten again before it was read back whole
                newest = forgotten.awaited if newest is None else max(newest, forgotten.awaited)
            self._forgotten[gone] = newest
            while len(self._forgotten) > MAX_FORGOTTEN:
                self._forgotten.popitem(last=False)
            self.stats.forgotten_runs += 1

    def fill(self, run: Run, steps: Iterable[Step], finished: float | None = None) -> RunHistory | None:
        """A run read back from Prometheus (steps in any order); what the hub added since stays. The
        run stays ``partial`` (read back again later) while Prometheus has not given back the newest
        step it had when it was forgotten. Returns the run's history (filled, even when the runs
        touched meanwhile have forgotten it again)."""
        with self.lock:
            self._settle()
            newest: int | None = None
            latest: float | None = None
            history = None
            for read in steps:
                self._add(run, read.step, read.time, tuple(read.values), tuple(read.values.values()))
                history = self._runs.get(run, history)
                newest = read.step if newest is None else max(newest, read.step)
                latest = read.time if latest is None else max(latest, read.time)
            history = self._runs.get(run, history)
            if history is not None:
                history.from_prometheus = True
                if latest is not None:
                    history.exposed = max(latest, history.exposed if history.exposed is not None else latest)
                if history.awaited is None or (newest is not None and newest >= history.awaited):
                    history.partial, history.awaited = False, None
                history.finished = finished if finished is not None else history.finished
            return history

    def get(self, run: Run) -> RunHistory | None:
        """The run's history, every step pushed before in it (read it under ``lock``), or None."""
        with self.lock:
            self._settle()
            return self._runs.get(run)

    def runs(self) -> list[Run]:
        with self.lock:
            self._settle()
            return list(self._runs)

    def forgotten(self, run: Run) -> bool:
        """Whether ``run`` was forgotten here for room (its steps are in Prometheus)."""
        with self.lock:
            self._settle()
            return run in self._forgotten

    def forget(self, run: Run) -> None:
        with self.lock:
            self._settle()
            self._runs.pop(run, None)
            self._total -= self._bytes.pop(run, 0)
