"""Each run's trainer scalars by step, as the explorer reads them: one column of floats per series,
aligned on the run's steps, each step with its own time (the time the hub stamps its samples with).

Filled from the batches the hub accepts (a hub listener: the trainer's own stream, the batches with a
step), and, for a run the server has not heard since it started, read back once from its Prometheus
(``prometheus.read_run``). A step already held keeps its first values (a resent copy is the same
step); a step older than the newest is put in its place.

Bounded by bytes, not by a count of runs: ``max_bytes`` in all (a share of the server's
``memory_limit_mb``; beyond it the run touched longest ago is forgotten first, counted in
``stats.forgotten_runs``), ``max_cells`` values per run (beyond it the run's oldest steps go,
counted in ``stats.dropped_steps``). A run forgotten here is not lost: its steps are in
Prometheus, and a run that logs again after it was forgotten is marked ``partial`` so that the
explorer reads it back whole (``Sources.history``) instead of showing the steps since, and again
until Prometheus gives back the newest step it had when it was forgotten (``awaited``: a scrape
behind the pushes has not sent Prometheus those steps yet). A value is a
C double (8 bytes); a NaN or an infinity the trainer logged is kept beside its column, so that
"not logged that step" (NaN in the column) and "logged NaN" stay apart.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from verl_rl_insight.contract.counters import Counters
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC
from verl_rl_insight.contract.runs import RUN_FINISHED, Run

FINISHED = RUN_FINISHED
MAX_CELLS = 4_000_000  # values per run: 10,000 steps of 400 series (32 MB) ...
MAX_BYTES = 64 * 2**20  # ... and all runs' bytes (the server gives a share of memory_limit_mb)
MAX_FORGOTTEN = 4096  # runs remembered as forgotten (read back whole when they log again)
RUN_BYTES = 2048  # what a run holds besides its steps: its objects, its dicts
STEP_BYTES = 8 + 8 + 32  # a step's time, its place in the list and its int
COLUMN_BYTES = 256  # a column's array and name


class StepBatch(Protocol):
    """What the explorer reads of a batch the hub accepted (``contract.wire.Batch``)."""

    labels: tuple[tuple[str, str], ...]
    step: int | None
    time: float
    metrics: dict[str, float]
    keys: dict[str, str] | None  # name: the key the trainer logged, for a name that does not tell it


class RunHistory:
    """One run: ``steps`` ascending, ``times[i]`` the time of ``steps[i]``, ``columns[name][i]`` its
    value there (NaN: not logged), ``nonfinite[name]`` {step: the NaN or infinity logged}."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.times = array("d")
        self.columns: dict[str, array[float]] = {}
        self.nonfinite: dict[str, dict[int, float]] = {}
        self.version = 0  # moves on with every step added: caches of answers made from it compare it
        # moves on when a step held changed or came before the newest (a late step, a second batch of
        # a step): a walk fed step by step starts again then (health/walk.py)
        self.rewrites = 0
        # steps dropped from the front (the run at its cap): a walk that had them keeps going, its
        # place in ``steps`` moved back by as many
        self.dropped = 0
        self.from_prometheus = False
        self.exposed: float | None = None  # the newest step's time read back from Prometheus: exposed before
        self.partial = False  # the run was forgotten and logs again: its older steps are in Prometheus only
        # the newest step the run had when it was forgotten: a read-back that does not reach it (Prometheus
        # had not scraped it yet, or did not answer) leaves the run partial, to be read back again
        self.awaited: int | None = None
        self.finished: float | None = None  # rl_insight_run_finished: 0 from the first log, 1 after finish()
        self.newest = (-math.inf, 0)  # (time, step) of the step logged last: a step before it, later, is an attempt

    def cells(self) -> int:
        return len(self.steps) * max(1, len(self.columns))

    def nbytes(self) -> int:
        """What it holds, about: its values, its steps and times, its columns' objects."""
        odd = sum(len(v) for v in self.nonfinite.values())
        return RUN_BYTES + 8 * self.cells() + STEP_BYTES * len(self.steps) + COLUMN_BYTES * len(self.columns) + 64 * odd

    def add(self, step: int, at: float, metrics: Mapping[str, float]) -> bool:
        """The step's values (a second batch of a step held adds the keys it did not have: verl logs a
        validation's in a call of its own); False when nothing changed."""
        if self.steps and step < self.newest[1] and at > self.newest[0]:
            self.new_attempt(step)
        if not self.steps or at >= self.newest[0]:
            self.newest = (at, step)
        i = bisect.bisect_left(self.steps, step)
        if i == len(self.steps) or self.steps[i] != step:
            self.steps.insert(i, step)
            self.times.insert(i, at)
            for held in self.columns.values():
                held.insert(i, math.nan)
            if i != len(self.steps) - 1:
                self.rewrites += 1
        elif not any(self.value(name, i) is None for name in metrics if name != GLOBAL_STEP_METRIC):
            return False
        else:
            self.rewrites += 1  # a step held gets values it did not have
        for name, value in metrics.items():
            if name == GLOBAL_STEP_METRIC:
                continue
            column = self.columns.get(name)
            if column is None:
                column = self.columns[name] = array("d", [math.nan]) * len(self.steps)
            elif self.value(name, i) is not None:
                continue  # the first value of a step stays (a copy sent again is the same step)
            column[i] = value
            if not math.isfinite(value):
                self.nonfinite.setdefault(name, {})[step] = value
        if FINISHED in metrics:
            self.finished = metrics[FINISHED]
        self.version += 1
        return True

    def new_attempt(self, first: int) -> None:
        """The run's name used again from step ``first`` (a step before the newest, logged after it:
        contract.attempts): the steps held from ``first`` on were the older attempt's; they go."""
        keep = bisect.bisect_left(self.steps, first)
        for step in self.steps[keep:]:
            for odd in self.nonfinite.values():
                odd.pop(step, None)
        del self.steps[keep:]
        del self.times[keep:]
        for column in self.columns.values():
            del column[keep:]
        self.rewrites += 1
        self.version += 1

    def drop_oldest(self) -> None:
        if not self.steps:
            return
        step = self.steps.pop(0)
        del self.times[0]
        for name, column in self.columns.items():
            del column[0]
            self.nonfinite.get(name, {}).pop(step, None)
        self.version += 1
        self.dropped += 1

    def value(self, name: str, i: int) -> float | None:
        """The value logged for ``name`` at ``steps[i]`` (NaN and infinities as logged), None: not logged."""
        column = self.columns.get(name)
        if column is None:
            return None
        x = column[i]
        if math.isfinite(x):
            return x
        return self.nonfinite.get(name, {}).get(self.steps[i])

    def series(self, name: str) -> list[tuple[int, float]]:
        """[(step, value)] of the steps that logged ``name`` (what the detectors walk)."""
        column = self.columns.get(name)
        if column is None:
            return []
        odd = self.nonfinite.get(name, {})
        return [
            (step, x if math.isfinite(x) else odd[step])
            for step, x in zip(self.steps, column)
            if math.isfinite(x) or step in odd
        ]

    def latest(self, name: str) -> float | None:
        column = self.columns.get(name)
        if column is None:
            return None
        for x in reversed(column):
            if math.isfinite(x):
                return x
        return None


@dataclasses.dataclass(slots=True)
class HistoryStats(Counters):
    steps: int = 0  # steps added
    dropped_steps: int = 0  # a run's oldest steps dropped at max_cells
    forgotten_runs: int = 0  # runs forgotten at max_bytes (read back from Prometheus when asked)


class Histories:
    """The runs' histories, thread-safe: the hub's pushes add, the API's requests read (under ``lock``)."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_cells: int = MAX_CELLS) -> None:
        self.max_bytes = max_bytes
        self.max_cells = max_cells
        self.lock = threading.Lock()
        self.stats = HistoryStats()
        self._runs: OrderedDict[Run, RunHistory] = OrderedDict()
        self._bytes: dict[Run, int] = {}  # each run's nbytes() when it last changed
        # runs forgotten here (read back when asked), each with the newest step it had then
        self._forgotten: OrderedDict[Run, int | None] = OrderedDict()

    def observe(self, batches: Sequence[StepBatch]) -> None:
        """The hub's listener: each trainer batch with a step (its own stream: labels project and
        experiment_name only)."""
        with self.lock:
            for batch in batches:
                labels = dict(batch.labels)
                if set(labels) != {"project", "experiment_name"}:
                    continue
                run = (labels["project"], labels["experiment_name"])
                if batch.step is not None:
                    self._add(run, batch.step, batch.time, batch.metrics)
                elif FINISHED in batch.metrics and run in self._runs:  # finish(): a batch of its own
                    self._runs[run].finished = batch.metrics[FINISHED]
                    self._runs[run].version += 1

    def _add(self, run: Run, step: int, at: float, metrics: Mapping[str, float]) -> None:
        history = self._runs.get(run)
        if history is None:
            history = self._runs[run] = RunHistory()
            history.partial = run in self._forgotten
            history.awaited = self._forgotten.pop(run, None)
        self._runs.move_to_end(run)
        if history.add(step, at, metrics):
            self.stats.steps += 1
        while history.cells() > self.max_cells and len(history.steps) > 1:
            history.drop_oldest()
            self.stats.dropped_steps += 1
        self._bytes[run] = history.nbytes()
        total = sum(self._bytes.values())
        while len(self._runs) > 1 and total > self.max_bytes:
            gone, forgotten = self._runs.popitem(last=False)  # (never ``run``: it was touched last)
            total -= self._bytes.pop(gone, 0)
            newest = forgotten.steps[-1] if forgotten.steps else None
            if forgotten.awaited is not None:  # forgotten again before it was read back whole
                newest = forgotten.awaited if newest is None else max(newest, forgotten.awaited)
            self._forgotten[gone] = newest
            while len(self._forgotten) > MAX_FORGOTTEN:
                self._forgotten.popitem(last=False)
            self.stats.forgotten_runs += 1

    def fill(
        self, run: Run, steps: Iterable[tuple[int, float, Mapping[str, float]]], finished: float | None = None
    ) -> RunHistory | None:
        """A run read back from Prometheus (steps in any order); what the hub added since stays. The
        run stays ``partial`` (read back again later) while Prometheus has not given back the newest
        step it had when it was forgotten. Returns the run's history (filled, even when the runs
        touched meanwhile have forgotten it again)."""
        with self.lock:
            newest: int | None = None
            latest: float | None = None
            history = None
            for step, at, metrics in steps:
                self._add(run, step, at, metrics)
                history = self._runs.get(run, history)
                newest = step if newest is None else max(newest, step)
                latest = at if latest is None else max(latest, at)
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
        """The run's history (read it under ``lock``), or None."""
        return self._runs.get(run)

    def runs(self) -> list[Run]:
        with self.lock:
            return list(self._runs)

    def forgotten(self, run: Run) -> bool:
        """Whether ``run`` was forgotten here for room (its steps are in Prometheus)."""
        with self.lock:
            return run in self._forgotten

    def forget(self, run: Run) -> None:
        with self.lock:
            self._runs.pop(run, None)
            self._bytes.pop(run, None)
