"""One run's trainer scalars by step, as the explorer reads them and the detectors walk them: one
column of floats per series, aligned on the run's steps, each step with its own time. A step already
held keeps its first values (a resent copy is the same step); a step older than the newest is put in
its place; a new newest step's values are appended by a plan made once per names tuple. A value is a
C double (8 bytes); a NaN or an infinity the trainer logged is kept beside its column, so that "not
logged that step" (NaN in the column) and "logged NaN" stay apart. ``history.Histories`` holds the
runs and bounds them."""

from __future__ import annotations

import bisect
import dataclasses
import math
from array import array
from collections.abc import Callable, Mapping, Sequence

from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC
from verl_rl_insight.contract.runs import RUN_FINISHED

FINISHED = RUN_FINISHED
RUN_BYTES = 2048  # what a run holds besides its steps: its objects, its dicts
STEP_BYTES = 8 + 8 + 32  # a step's time, its place in the list and its int
COLUMN_BYTES = 256  # a column's array and name


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
        self._plan: _Plan | None = None  # where the last names' values go (made again for other names)

    def cells(self) -> int:
        return len(self.steps) * max(1, len(self.columns))

    def nbytes(self) -> int:
        """What it holds, about: its values, its steps and times, its columns' objects."""
        odd = sum(len(v) for v in self.nonfinite.values())
        return RUN_BYTES + 8 * self.cells() + STEP_BYTES * len(self.steps) + COLUMN_BYTES * len(self.columns) + 64 * odd

    def add(self, step: int, at: float, names: tuple[str, ...], values: Sequence[float]) -> bool:
        """The step's values (a second batch of a step held adds the keys it did not have: verl logs a
        validation's in a call of its own); False when nothing changed."""
        if self.steps and step > self.steps[-1] and at >= self.newest[0]:
            self._append(step, at, names, values)  # a new step after the others: every push's steps
            return True
        return self._place(step, at, dict(zip(names, values)))

    def _append(self, step: int, at: float, names: tuple[str, ...], values: Sequence[float]) -> None:
        """A new newest step, its values appended to their columns by a plan made once per names
        tuple (a trainer's stream sends the same names step after step), not looked up value by value."""
        plan = self._plan
        if plan is None or (plan.names is not names and plan.names != names):
            plan = self._plan = _Plan.of(names, self.columns, len(self.steps))
        self.steps.append(step)
        self.times.append(at)
        for append, value in zip(plan.appends, values):
            append(value)
        for column in plan.absent:
            column.append(math.nan)
        if not math.isfinite(sum(values)):  # a NaN or an infinity among them (or a sum that overflows)
            for name, value in zip(names, values):
                if not math.isfinite(value) and name != GLOBAL_STEP_METRIC:
                    self.nonfinite.setdefault(name, {})[step] = value
        if plan.finished is not None:
            self.finished = values[plan.finished]
        self.newest = (at, step)
        self.version += 1

    def _place(self, step: int, at: float, metrics: Mapping[str, float]) -> bool:
        """``add`` of a step before the newest, or of a step held: put in its place."""
        if self.steps and step < self.newest[1] and at > self.newest[0]:
            self.new_attempt(step)
        if not self.steps or at >= self.newest[0]:
            self.newest = (at, step)
        i = bisect.bisect_left(self.steps, step)
        new = i == len(self.steps) or self.steps[i] != step
        if new:
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
                self._plan = None  # a column the plan does not know: it leaves it out
            elif not new and self.value(name, i) is not None:
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


def _discard(value: float) -> None:
    """Where the step key's value goes: the step is held as ``steps``, not as a column."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """Where a batch with ``names`` puts its values: ``appends`` in names' order (the step key's
    value: discarded), ``absent`` the columns it does not log (NaN that step), ``finished`` the
    place of ``rl_insight_run_finished`` in it."""

    names: tuple[str, ...]
    appends: tuple[Callable[[float], None], ...]
    absent: tuple[array[float], ...]
    finished: int | None

    @classmethod
    def of(cls, names: tuple[str, ...], columns: dict[str, array[float]], steps: int) -> _Plan:
        """The plan for ``names``; a name without a column gets one (NaN at the ``steps`` held)."""
        appends: list[Callable[[float], None]] = []
        for name in names:
            if name == GLOBAL_STEP_METRIC:
                appends.append(_discard)
                continue
            column = columns.get(name)
            if column is None:
                column = columns[name] = array("d", [math.nan]) * steps
            appends.append(column.append)
        logged = set(names)
        absent = tuple(column for name, column in columns.items() if name not in logged)
        return cls(names, tuple(appends), absent, names.index(FINISHED) if FINISHED in logged else None)
