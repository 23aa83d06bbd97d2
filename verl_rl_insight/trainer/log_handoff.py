"""LogHandOff: ``Tracking.log``'s dicts on their way to the plugins, off the training thread.

The training thread appends (run, its copy of verl's dict, step, time) to a deque and returns:
no plugin runs there (the step inbox merges, the batch building, a third-party plugin's hook).
A daemon thread takes the deque every ``poll_s`` (it is not woken per log: a wake-up would take
the GIL from the training thread inside its log call) and calls ``rl_insight_log_metrics`` for
each, in order. ``drain()`` does the same on the caller's thread, for whoever needs every log
handed over so far to have reached the plugins (a flush, the exit, a figure put for the next
step). At most ``max_pending`` logs wait; more are dropped and counted, never held.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from verl_rl_insight.trainer.hook_types import RunInfo

logger = logging.getLogger("verl_rl_insight")


@dataclass(slots=True)
class Log:
    """One ``Tracking.log`` on its way: the run, its copy of verl's dict, the step, the time it was
    logged. Made on the training thread: a slotted dataclass is built in about half a NamedTuple's time."""

    run: RunInfo
    metrics: dict[str, object]
    step: int | None
    timestamp: float


Deliver = Callable[[RunInfo, dict[str, object], "int | None", float], None]
_hand_offs: weakref.WeakSet[LogHandOff] = weakref.WeakSet()


class LogHandOff:
    def __init__(self, deliver: Deliver, poll_s: float = 0.05, max_pending: int = 4096) -> None:
        self._deliver = deliver
        self.poll_s = poll_s
        self.max_pending = max_pending
        self.dropped = 0  # logs dropped because max_pending waited (only ever written on the training thread)
        self._pending: collections.deque[Log] = collections.deque()  # append/popleft are atomic in CPython
        self._drain_lock = threading.Lock()  # one drain at a time: the plugins see the logs in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        _hand_offs.add(self)

    # -- training thread -------------------------------------------------------------------
    def put(self, run: RunInfo, metrics: dict[str, object], step: int | None, timestamp: float) -> None:
        """Hand one log over; never blocks, never raises."""
        if self._thread is None:
            self._start()
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
            return
        self._pending.append(Log(run, metrics, step, timestamp))

    # -- any thread ------------------------------------------------------------------------
    def drain(self) -> None:
        """Deliver every log handed over so far, on this thread, in order."""
        with self._drain_lock:
            while self._pending:
                log = self._pending.popleft()
                try:
                    self._deliver(log.run, log.metrics, log.step, log.timestamp)
                except Exception:
                    if not self._failed:
                        self._failed = True
                        logger.exception("rl-insight: a plugin failed while logging metrics; training goes on")

    def close(self) -> None:
        """Deliver what waits and stop the thread."""
        self._stop.set()
        self.drain()

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="rl-insight-log", daemon=True)
        self._thread = thread
        thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self._pending:
                self.drain()


def _after_fork_in_child() -> None:
    for hand_off in list(_hand_offs):  # the parent's thread does not exist here: the child starts its own
        hand_off._thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
