"""What the live walk (``live.py``) holds beside the hub, in bytes, and what it counted: the
figures it books under the hub's memory bound (``Bound.book_other``, owner ``"health"``; checked
against tracemalloc by ``tests/server/test_health_room.py``).

- a queued step: its record, and the hub's values tuple with its floats, booked whole (the hub may
  drop its history while the step waits: the queue then keeps them alive alone); its names tuple
  (the stream's own: the hub hands listeners the one it keeps) with its strings, once for the steps
  of a run queued one after another that share it;
- a step held for a late card: its record and a copy of its values in one array; the names tuple of
  a run of held steps that share it once, with its strings;
- a series batch made and not taken yet by the hub (``derived_batch``: labels, values, the batch).
"""

from __future__ import annotations

import dataclasses

STEP_BYTES = 320  # a queued step's record, its run's names pair, its list slot, the values tuple's header
STEP_VALUE_BYTES = 48  # a value of a queued step: its tuple slot, its float (32 bytes as allocated), a names slot
HELD_BYTES = 384  # a held step's record, its deque slots, the array's header
HELD_VALUE_BYTES = 8  # a value of a held step (a double in the array)
NAMES_BYTES = 64  # a names tuple's header
NAME_BYTES = 60  # a name's tuple slot and its string's header (its characters beside)
MADE_BYTES = 1024  # a series batch made (measured: 840)


def step_bytes(values: int) -> int:
    """A step queued for the walk."""
    return STEP_BYTES + STEP_VALUE_BYTES * values


def held_bytes(values: int) -> int:
    """A step held (a copy) for the run's card, its names aside (``names_bytes``)."""
    return HELD_BYTES + HELD_VALUE_BYTES * values


def names_bytes(names: tuple[str, ...]) -> int:
    """A names tuple with its strings."""
    return NAMES_BYTES + NAME_BYTES * len(names) + sum(map(len, names))


@dataclasses.dataclass(slots=True)
class HealthStats:
    """What the live walk counted since the server started (``HealthMonitor.stats``, a copy)."""

    steps: int = 0  # trainer steps walked
    findings: int = 0  # the detectors' verdicts on them that were findings
    booked_bytes: int = 0  # now: what the queue, the held steps and the series made hold (booked)
    walked_on_push: int = 0  # steps a push walked itself: no room to queue them (back-pressure)
    pushes_walked: int = 0  # the pushes that did
    held_refused: int = 0  # runs that stopped holding steps for their card: no room (counts from the steps after)
    made_unbooked: int = 0  # series batches made with no room to book: the hub takes them at once
