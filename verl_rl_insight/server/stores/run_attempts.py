"""Which attempt of its run each trainer step is, as a series of the run's own stream, so that
Grafana's panels tell the attempts apart (the rule of ``contract/attempts.py``).

``RunAttempts.mark`` is given to the hub at construction and called under its lock, in the order
batches are applied, before they are: each batch of a run's trainer stream (labels project and
experiment_name only) with a step gets ``rl_insight_run_attempt`` = the run's attempt (1, 2, ...)
among its values. The attempt moves on when a step earlier than the run's newest arrives with a
later trainer time (a restart from step 1, a resume from an older checkpoint); a resume (N+1...)
and a batch sent late (an older time: it has its place before the newest) do not move it. Being
a value of the batch, it reaches Prometheus with the same timestamp as the batch's global step
(promise 2 unchanged: the pushed series keep their values, step and time), and stays live with
the run's other values.

Kept with the run's files, ``<data>/run-attempts.json`` (0600, whole), so a restarted server goes
on counting: written after a push that moved a run's attempt, else at most every ``SAVE_S``
seconds while steps arrive (a crash loses at most that much of the newest step). Bounded at
``MAX_RUNS`` runs, the run changed longest ago leaving first; ``forget`` on ``runs delete``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.contract.runs import Run, trainer_run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.stores.files import write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_RUNS = 10_000
SAVE_S = 1.0


class Attempt(NamedTuple):
    number: int  # 1 for a run's first
    step: int  # the newest step (by trainer time)
    time: float  # its trainer time


def next_attempt(held: Attempt | None, step: int, at: float) -> Attempt:
    """The run's attempt after a step logged at ``at`` (``contract.attempts``: a step earlier than
    the newest, later in time, begins a new one)."""
    if held is None:
        return Attempt(1, step, at)
    if at < held.time:  # sent late: before the newest in time, it changes nothing
        return held
    return Attempt(held.number + (step < held.step), step, at)


class RunAttempts:
    def __init__(
        self, path: Path | None = None, max_runs: int = MAX_RUNS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path, self.max_runs, self.clock = path, max_runs, clock
        self._runs: OrderedDict[Run, Attempt] = OrderedDict()  # changed longest ago first
        self._lock = threading.Lock()
        self._dirty, self._urgent, self._saved = False, False, clock()
        if path is not None and path.exists():
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            for project, experiment, number, step, at in json.loads(path.read_text())["runs"]:
                self._runs[(str(project), str(experiment))] = Attempt(int(number), int(step), float(at))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            logger.warning("run attempts %s are unreadable (%s): counting from 1 again", path, exc)

    def get(self, run: Run) -> int | None:
        with self._lock:
            held = self._runs.get(run)
            return held.number if held is not None else None

    def mark(self, batches: list[Batch]) -> list[Batch]:
        """``batches`` (the push's own, decoded for it) with each trainer step's attempt set among
        its values (the hub's lock is held)."""
        with self._lock:
            for batch in batches:
                run = trainer_run(batch.labels)
                if batch.step is None or run is None:
                    continue
                held = self._runs.get(run)
                now = next_attempt(held, batch.step, batch.time)
                if now != held:
                    self._runs[run] = now
                    self._runs.move_to_end(run)
                    self._dirty = True
                    self._urgent = self._urgent or held is None or now.number != held.number
                batch.set_value(ATTEMPT_METRIC, float(now.number))
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
        return batches

    def saved(self, added: object = None) -> None:
        """``save``, as a listener of the hub (called after each push, outside its lock)."""
        self.save()

    def save(self) -> None:
        """Write the file when a run's attempt moved, or every ``SAVE_S`` while steps arrive
        (called after each push, outside the hub's lock)."""
        with self._lock:
            if self.path is None or not self._dirty or not (self._urgent or self.clock() - self._saved >= SAVE_S):
                return
            rows = [[p, e, a.number, a.step, a.time] for (p, e), a in self._runs.items()]
            self._dirty = self._urgent = False
            self._saved = self.clock()
        try:
            write_atomically(self.path, json.dumps({"runs": rows}), mode=0o600)
        except OSError as exc:
            logger.warning("run attempts not written to %s: %s", self.path, exc)

    def forget(self, run: Run) -> None:
        with self._lock:
            if self._runs.pop(run, None) is not None:
                self._dirty = self._urgent = True
        self.save()
