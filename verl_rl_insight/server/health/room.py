"""What the live walk (``live.py``) holds beside the run histories it reads, in bytes, and what it
counted: the series made and not taken yet by the hub (``derived_batch``: labels, values, the
batch), booked under the hub's memory bound (``Bound.book_other``, owner ``"health"``; checked
against tracemalloc by ``tests/server/test_health_room.py``). A step's values are held once, in the
explorer's history (``explorer/history.py``, under its own share of the bound): the walk holds no
copy of them.
"""

from __future__ import annotations

import dataclasses

MADE_BYTES = 1024  # a series batch made (measured: 840)


@dataclasses.dataclass(slots=True)
class HealthStats:
    """What the live walk counted since the server started (``HealthMonitor.stats``, a copy)."""

    steps: int = 0  # trainer steps fed to the runs' walks (a walk again from the start counted again)
    findings: int = 0  # the detectors' verdicts emitted that were findings
    booked_bytes: int = 0  # now: what the series made and not taken yet hold (booked)
    rewalks: int = 0  # runs walked again from their first step (a late step or batch, a mark, late keys)
    made_unbooked: int = 0  # series batches made with no room to book: the hub takes them at once
