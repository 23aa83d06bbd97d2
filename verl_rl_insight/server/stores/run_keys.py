"""The keys as the trainer logged them, per run: what a push's ``keys`` says (Prometheus name ->
logged key, ``val-aux/num_turns/max`` for ``..._val_aux_num_turns_max``), kept so that the explorer
and ``diagnose`` name a run's keys as logged after a server restart too, not only once it logs again.

A hub listener: a batch's pairs the run did not have are added and the run's file written
(``<data>/run-keys/<sha256 of the run>.json``, 0600, whole; a run's keys arrive with its first
steps, so writes are few). Bounded: at most ``MAX_PER_RUN`` keys a run (more are counted, not
kept), ``MAX_RUNS`` runs and ``MAX_TOTAL_BYTES`` in all, the run changed longest ago leaving first;
what is held is booked against the hub's memory (``book``), like the marks: keys that do not fit
there are counted and not kept. Without a folder (tests, an API built bare) it is kept in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from verl_rl_insight.contract.runs import Run, trainer_run
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.stores.files import private_folder, write_atomically
from verl_rl_insight.server.stores.stats import RunKeysStats

logger = logging.getLogger("verl_rl_insight.server")

MAX_PER_RUN = 4096
MAX_RUNS = 10_000
MAX_TOTAL_BYTES = 32 * 1024 * 1024
ENTRY_BYTES = 200  # a pair's dict slot and string objects, beside its text
RUN_BYTES = 400


def file_name(run: Run) -> str:
    return hashlib.sha256(json.dumps(list(run)).encode()).hexdigest()[:40] + ".json"


def _cost(keys: Mapping[str, str]) -> int:
    return RUN_BYTES + sum(ENTRY_BYTES + len(n) + len(k) for n, k in keys.items())


class RunKeys:
    def __init__(
        self,
        folder: Path | None = None,
        max_runs: int = MAX_RUNS,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        max_per_run: int = MAX_PER_RUN,
    ) -> None:
        self.folder = folder
        self.max_runs, self.max_total_bytes, self.max_per_run = max_runs, max_total_bytes, max_per_run
        self.book: Callable[[int], bool] = lambda nbytes: True
        self.stats = RunKeysStats()
        self._lock = threading.Lock()
        self._runs: OrderedDict[Run, dict[str, str]] = OrderedDict()  # changed longest ago first
        self._bytes = 0
        if folder is not None:
            private_folder(folder)
            self._read(folder)

    def _read(self, folder: Path) -> None:
        found = []
        for entry in os.scandir(folder):
            if entry.is_file() and entry.name.endswith(".json") and len(entry.name) == 45:
                found.append((entry.stat().st_mtime, entry.path))
        for _, path in sorted(found):
            try:
                kept = json.loads(Path(path).read_text())
                run = (str(kept["project"]), str(kept["experiment_name"]))
                keys = {str(n): str(k) for n, k in dict(kept["keys"]).items()}
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                logger.warning("run keys %s are unreadable (%s): left out", path, exc)
                continue
            self._runs[run] = dict(list(keys.items())[: self.max_per_run])
            self._bytes += _cost(self._runs[run])
        self._trim()

    def book_all(self, book: Callable[[int], bool]) -> None:
        """Book what was read back, and every key from now on, with ``book``."""
        with self._lock:
            self.book = book
            book(self._bytes)

    def observe(self, batches: Sequence[Batch]) -> None:
        """The hub's listener: the keys of each trainer batch (its own stream: project and experiment_name)."""
        for batch in batches:
            run = trainer_run(batch.labels)
            if batch.keys and run is not None:
                self.add(run, batch.keys)

    def add(self, run: Run, keys: Mapping[str, str]) -> None:
        with self._lock:
            held = self._runs.get(run, {})
            new = {n: k for n, k in keys.items() if held.get(n) != k}
            if not new:
                return
            room = max(0, self.max_per_run - len(held))
            added = [n for n in new if n not in held][:room]
            merged = {**held, **{n: k for n, k in new.items() if n in held or n in added}}
            cost = _cost(merged) - (_cost(held) if run in self._runs else 0)
            if merged == held or not self.book(cost):
                self.stats.refused_keys += len(new)
                return
            self.stats.refused_keys += len(new) - (len(merged) - len(held)) - sum(n in held for n in new)
            self._runs[run] = merged
            self._runs.move_to_end(run)
            self._bytes += cost
            self._write(run, merged)
            self._trim()

    def get(self, run: Run) -> dict[str, str]:
        """The run's series name -> logged key ({} when none was said)."""
        with self._lock:
            return dict(self._runs.get(run, {}))

    def forget(self, run: Run) -> None:
        with self._lock:
            self._drop(run)

    def _write(self, run: Run, keys: Mapping[str, str]) -> None:
        if self.folder is None:
            return
        text = json.dumps({"project": run[0], "experiment_name": run[1], "keys": keys})
        try:
            write_atomically(self.folder / file_name(run), text)
        except OSError as exc:  # a full disk: the keys stay held, the explorer names them until a restart
            self.stats.write_errors += 1
            logger.warning("cannot write the run keys of %s/%s: %s", run[0][:100], run[1][:100], exc)

    def _drop(self, run: Run) -> None:
        gone = self._runs.pop(run, None)
        if gone is None:
            return
        self._bytes -= _cost(gone)
        self.book(-_cost(gone))
        if self.folder is not None:
            (self.folder / file_name(run)).unlink(missing_ok=True)

    def _trim(self) -> None:
        while len(self._runs) > self.max_runs or (len(self._runs) > 1 and self._bytes > self.max_total_bytes):
            self._drop(next(iter(self._runs)))
        self.stats.runs, self.stats.bytes = len(self._runs), self._bytes
