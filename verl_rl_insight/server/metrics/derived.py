"""The server's own series made from what the trainers send (the detectors' findings, the
timeline's figures): parts the hub asks for what they made (the server every second), never a push
through the front door (``hub.MetricHub.take_derived``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from verl_rl_insight.contract.wire import Batch


class Derived(Protocol):
    """A part that makes series of the server's own from what the trainers send (the detectors, the
    timeline): asked for what it made since it was last asked, in order."""

    def collect(self) -> list[Batch]: ...

    def backlog(self) -> int:
        """How many batches it made, not collected yet, that hold memory no bound booked (the hub
        takes them at once past ``hub.MAX_DERIVED_BACKLOG``)."""
        ...


def derived_batch(labels: Mapping[str, str], at: float, metrics: Mapping[str, float]) -> Batch:
    """One batch of the server's own series (no step: only the trainer's own stream carries it),
    stamped ``at``, as the hub keeps a validated push's (labels sorted, values as floats; a value
    that is not finite is left out: the server makes none)."""
    values = {name: float(x) for name, x in metrics.items() if math.isfinite(x)}
    return Batch(tuple(sorted(labels.items())), None, float(at), True, values)
