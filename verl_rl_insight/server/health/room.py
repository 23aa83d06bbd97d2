"""What the live walk (``live.py``) holds beside the run histories it reads, in bytes, and what it
counted, all booked under the hub's memory bound (``Bound.book_other``, owner ``"health"``; checked
against tracemalloc by ``tests/server/health/test_room.py``): the series made and not taken yet by
the hub (``derived_batch``: labels, values, the batch), each run's walk (its detectors' last ``KEEP``
values, the names it logged, its findings) and each run's record (what it emitted, its resets and
validation keys). A step's values are held once, in the explorer's history
(``history/histories.py``, under its own share of the bound): the walk keeps only each detector's
last values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sized
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl_rl_insight.server.health.detectors import RunHealth

MADE_BYTES = 1024  # a series batch made (measured: 840)
HEALTH_BYTES = 24 * 1024  # a run's detectors with nothing in them (measured: 15 KB)
VALUE_BYTES = 96  # a (step, value) a detector keeps: the tuple and the float copied out of the history
NAME_BYTES = 64  # a name in the run's set of names logged (the string itself is the history's)
FINDING_BYTES = 1024  # a finding: its steps, its words
RECORD_BYTES = 1024  # a run's record with nothing in it
EMITTED_BYTES = 256  # a (detector, metric) emitted: its newest time, its count
ITEM_BYTES = 64  # a reset step or a validation key named


def walk_bytes(health: RunHealth) -> int:
    """What a run's walk holds: its detectors' kept values, the run's names, the findings."""
    values = len(health.times.durations)
    findings = len(health.non_finite) + len(health.times.findings)
    for streak in health.streaks:
        values += len(streak.series) + len(streak.flagged) + sum(map(len, streak.extra.values()))
        findings += len(streak.findings)
    return HEALTH_BYTES + VALUE_BYTES * values + NAME_BYTES * len(health.seen) + FINDING_BYTES * findings


def record_bytes(emitted: Sized, counts: Sized, resets: Sized, named: Sized) -> int:
    """What a run's record holds: the (detector, metric) pairs and detectors emitted, its resets and keys."""
    return RECORD_BYTES + EMITTED_BYTES * (len(emitted) + len(counts)) + ITEM_BYTES * (len(resets) + len(named))


@dataclasses.dataclass(slots=True)
class HealthStats:
    """What the live walk counted since the server started (``HealthMonitor.stats``, a copy)."""

    steps: int = 0  # trainer steps fed to the runs' walks (a walk again from the start counted again)
    findings: int = 0  # the detectors' verdicts emitted that were findings
    booked_bytes: int = 0  # now: what the series made and not taken yet hold (booked)
    rewalks: int = 0  # runs walked again from their first step (a late step or batch, a mark, late keys)
    made_unbooked: int = 0  # series batches made with no room to book: the hub takes them at once
    held_bytes: int = 0  # now: what the runs' walks and records hold (booked)
    walks_let_go: int = 0  # runs' walks let go for room (walked again from the history when asked)
    held_unbooked: int = 0  # times a walk found no room and no idle walk to let go: kept unbooked
