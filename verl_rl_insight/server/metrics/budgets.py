"""Each run's share of the hub's memory bound: one run (one run credential) can never take what another needs.

The rule: with ``n`` runs holding memory in the hub (the pushing one counted), a run may hold at most

    share = memory_limit x max(MIN_SHARE, min(SOLO_SHARE, 1 / n))

- alone, a run may use three quarters of the bound (most of it), and a quarter is always left for
  the next run to arrive, even when the first one's latest values (which cannot be dropped) fill
  its share;
- two runs may hold half each, three a third, four or more a quarter each: a run never holds less
  than a quarter because others exist (100 runs are bounded by the whole bound, and none of them by
  a hundredth of it), and never more than its fair share once the bound is full.

A push that would grow its run (new streams or series: latest values, which cannot be dropped
later) past its share first drops that run's own oldest history; when its latest values leave no
room, the push is refused with ``RunShareFull`` (429, Retry-After: the sender keeps the batches and
sends them again later, nothing is dropped as bad data). History is held to the shares when the
whole bound is full: the oldest history of the runs over their share goes first, then the pushing
run's own; a run under its share never loses a batch to another run's push, and a run alone may
fill the whole bound with history.

The series limit (``max_series``: the latest values' count, what every scrape renders) is shared
by the same rule: a push that would take its run past its share of it is refused with
``RunShareFull`` too, and one whose new series alone are more than a run may ever hold is bad data
(422). A run cannot fill the limit so that another run's new keys (its first step, a validation)
are refused.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from verl_rl_insight.contract.errors import Busy
from verl_rl_insight.contract.runs import Run as Run  # re-exported: memory.py names it budgets.Run
from verl_rl_insight.server.metrics.positions import StreamKey

MIN_SHARE = 0.25  # a run may always hold this much of the bound, however many runs there are
SOLO_SHARE = 0.75  # ... and at most this much, even alone: the rest is the next run's
RETRY_AFTER_S = 5  # what a run refused for its share is told to wait before it sends again


class RunShareFull(Busy):
    """A run holds its whole share of the hub's memory bound: it retries later, nothing is dropped."""

    retry_after_s = RETRY_AFTER_S


class BoundFull(Busy):
    """The whole bound is held by latest values every run still needs: a full budget, not bad data,
    so the sender keeps the batch and retries (429 with Retry-After), as for a run's share."""

    retry_after_s = RETRY_AFTER_S


def share_of(limit: int, runs: int) -> int:
    """What one of ``runs`` runs may hold of ``limit``: max(MIN_SHARE, min(SOLO_SHARE, 1 / runs)) of it."""
    return int(limit * max(MIN_SHARE, min(SOLO_SHARE, 1 / max(runs, 1))))


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

    def series_share(self, max_series: int, pushing: Iterable[Run] = ()) -> int:
        """The series one run may hold under ``max_series`` now, the runs of a push counted."""
        return share_of(max_series, len(self.series) + sum(1 for run in pushing if run not in self.series))

    def charge(self, run: Run, nbytes: int) -> None:
        """Book ``nbytes`` (negative: give back) to ``run``."""
        _add(self.held, run, nbytes)

    def share(self, limit: int, pushing: Iterable[Run] = ()) -> int:
        """What one run may hold under ``limit`` now, with the runs of a push (``pushing``) counted."""
        return share_of(limit, len(self.held) + sum(1 for run in pushing if run not in self.held))

    def over_share(self, share: int) -> set[Run]:
        """The runs that hold more than ``share``: theirs is the history that goes first."""
        return {run for run, held in self.held.items() if held > share}


def series_refusal(run: Run, held: int, share: int, max_series: int) -> RunShareFull:
    project, experiment = run
    return RunShareFull(
        f"run {project[:80]!r} / {experiment[:80]!r} holds {held} series, its whole share of the hub's series "
        f"limit ({share} of max_series {max_series}: a run holds at most max({MIN_SHARE:g}, min({SOLO_SHARE:g}, "
        "1 / runs)) of it); retry later, or raise max_series, or delete finished runs (rl-insight runs delete)"
    )


def refusal(run: Run, share: int, limit: int) -> RunShareFull:
    project, experiment = run
    return RunShareFull(
        f"run {project[:80]!r} / {experiment[:80]!r} holds its whole share of the hub's memory "
        f"({share / 2**20:.1f} of memory_limit_mb {limit / 2**20:.0f} MiB: a run holds at most "
        f"max({MIN_SHARE:g}, min({SOLO_SHARE:g}, 1 / runs)) of it) in latest values; retry later, or raise "
        "memory_limit_mb, or use fewer label sets"
    )
