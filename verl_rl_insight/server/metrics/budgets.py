"""Each run's share of the hub's memory bound and of its series limit: one run (one run
credential) can never take what another needs, and the shares never add up past the whole.

What a run may hold of a bound (``allowance``), with ``n`` runs holding something (the pushing ones
counted) and ``others`` what the other runs hold:

    allowance = min(limit / n, (limit - others) / 2)

- a run may hold at most half of what the others leave: whatever it takes, as much stays free, the
  room of the runs not yet seen. A new run always finds room (half of what is free), however many
  credentials pushed before it, and the shares of the runs already there shrink as others arrive;
- and never more than its fair part ``limit / n`` once others hold some.

What a run already holds is never taken from it for this (its latest values cannot be dropped): a
run over its allowance keeps logging its steps on the series it has, and a push that would grow it
(new streams or series) is refused with ``RunShareFull`` (429, Retry-After: the sender keeps the
batches and sends them again, nothing is dropped as bad data), after its own oldest history and
the history of the runs over their fair part were dropped for the room. One push more than a run
could ever hold (half of the bound) is bad data (422).

History is held to the fair part ``limit / n`` when the whole bound is full: the oldest history of
the runs over it goes first, then the pushing run's own; a run alone may fill the whole bound with
history.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from verl_rl_insight.contract.errors import Busy
from verl_rl_insight.contract.runs import Run as Run  # re-exported: memory.py names it budgets.Run
from verl_rl_insight.server.metrics.positions import StreamKey

MOST = 0.5  # a run holds at most this much of what the other runs leave free: the rest is the next run's
RETRY_AFTER_S = 5  # what a run refused for its share is told to wait before it sends again


class RunShareFull(Busy):
    """A run holds its whole share of the hub's memory bound: it retries later, nothing is dropped."""

    retry_after_s = RETRY_AFTER_S


class BoundFull(Busy):
    """The whole bound is held by latest values every run still needs: a full budget, not bad data,
    so the sender keeps the batch and retries (429 with Retry-After), as for a run's share."""

    retry_after_s = RETRY_AFTER_S


def share_of(limit: int, runs: int) -> int:
    """One of ``runs`` runs' fair part of ``limit`` (the timeline's waiting spans are shared so
    too): max(1/4, min(3/4, 1 / runs)) of it."""
    return int(limit * max(0.25, min(0.75, 1 / max(runs, 1))))


def allowance(
    counts: collections.Counter[Run], run: Run, limit: int, pushing: Iterable[Run] = (), evictable: bool = False
) -> int:
    """What ``run`` may hold of ``limit`` now: min(limit / n, (limit - others) / 2) (the module's rule).
    ``evictable``: what another run holds past its fair part is history that gives way when the
    bound is full, so it is not counted against ``run``."""
    n = max(1, len(counts) + sum(1 for other in set(pushing) if other not in counts))
    fair = limit / n
    others = sum(min(held, fair) if evictable else held for other, held in counts.items() if other != run)
    return int(min(fair, MOST * max(limit - others, 0)))


def run_of(key: StreamKey) -> Run:
    """The run a stream belongs to (every pushed stream has both labels)."""
    labels = dict(key)
    return (labels.get("project", ""), labels.get("experiment_name", ""))


def _add(counts: collections.Counter[Run], run: Run, n: int) -> None:
    """``counts[run] += n``, the run gone from ``counts`` at nothing held (the runs counted are those
    holding something: the shares divide by their number)."""
    held = counts[run] + n
    if held > 0:
        counts[run] = held
    else:
        del counts[run]


class RunBudgets:
    """The bytes each run holds in the hub (its streams' booked bytes and history), and its series."""

    def __init__(self) -> None:
        self.held: collections.Counter[Run] = collections.Counter()
        self.series: collections.Counter[Run] = collections.Counter()

    def count_series(self, run: Run, n: int) -> None:
        """``n`` series more (negative: fewer) of ``run``."""
        _add(self.series, run, n)

    def series_allowance(self, run: Run, max_series: int, pushing: Iterable[Run] = ()) -> int:
        """The series ``run`` may hold under ``max_series`` now, the runs of a push counted."""
        return allowance(self.series, run, max_series, pushing)

    def charge(self, run: Run, nbytes: int) -> None:
        """Book ``nbytes`` (negative: give back) to ``run``."""
        _add(self.held, run, nbytes)

    def share(self, limit: int, pushing: Iterable[Run] = ()) -> int:
        """One run's fair part of ``limit`` now (``limit / n``), with the runs of a push counted."""
        return int(limit / max(1, len(self.held) + sum(1 for run in set(pushing) if run not in self.held)))

    def allowance(self, run: Run, limit: int, pushing: Iterable[Run] = ()) -> int:
        """The bytes ``run`` may hold under ``limit`` now, the runs of a push counted."""
        return allowance(self.held, run, limit, pushing, evictable=True)

    def over_share(self, share: int) -> set[Run]:
        """The runs that hold more than ``share``: theirs is the history that goes first."""
        return {run for run, held in self.held.items() if held > share}


RULE = "a run holds at most min(1 / runs, half of what the other runs leave) of it, the rest kept for new runs"


def series_refusal(run: Run, held: int, share: int, max_series: int) -> RunShareFull:
    project, experiment = run
    return RunShareFull(
        f"run {project[:80]!r} / {experiment[:80]!r} holds {held} series, its whole share of the hub's series "
        f"limit ({share} of max_series {max_series}: {RULE}); retry later, or raise max_series, or delete "
        "finished runs (rl-insight runs delete)"
    )


def refusal(run: Run, share: int, limit: int) -> RunShareFull:
    project, experiment = run
    return RunShareFull(
        f"run {project[:80]!r} / {experiment[:80]!r} holds its whole share of the hub's memory "
        f"({share / 2**20:.1f} of the hub's {limit / 2**20:.0f} MiB of memory_limit_mb: {RULE}) in latest values; "
        "retry later, or raise memory_limit_mb, or use fewer label sets"
    )
