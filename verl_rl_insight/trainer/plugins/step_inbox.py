"""Metrics a plugin computed from a step's batch, held until that step's ``Tracking.log`` takes them.

verl computes some figures where the batch is seen (``compute_advantage``) and logs the step's dict
later; a plugin puts what it computed here and the ``rl_insight_log_metrics`` hook merges it into that
step's one logged dict, so the step stays one batch (verl's own values win). At most ``keep`` steps
wait: a step that was never logged does not hold memory.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping


class StepInbox:
    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._waiting: dict[tuple[Hashable, int | None], Mapping[str, float]] = {}
        self._lock = threading.Lock()

    def put(self, run: Hashable, step: int | None, metrics: Mapping[str, float]) -> None:
        with self._lock:
            self._waiting[(run, step)] = metrics
            while len(self._waiting) > self.keep:  # steps that never got logged
                self._waiting.pop(next(iter(self._waiting)))

    def merge_into(self, run: Hashable, step: int | None, metrics: dict[str, object]) -> None:
        """Add what waits for ``step`` (or for a step unknown when it was computed: it belongs to the
        next log) to the logged ``metrics``; a key verl logged itself keeps verl's value."""
        if not self._waiting:  # the common case, on the training thread: no lock
            return
        with self._lock:
            computed = self._waiting.pop((run, step), None) or self._waiting.pop((run, None), None)
        for key, value in (computed or {}).items():
            metrics.setdefault(key, value)

    def clear(self) -> None:
        with self._lock:
            self._waiting.clear()
