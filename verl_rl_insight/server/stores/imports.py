"""The runs imported from files (``rl-insight runs import``): one record a run, in
``<data>/imports.json`` (0600, written whole). The record is what makes an import idempotent (the
same file under the same name again adds nothing; another file under that name is refused) and what
marks the run "imported" wherever it is shown: it is never taken for a live run.

At most ``MAX_IMPORTS`` runs (one more is a 422). A damaged file is moved aside: the runs' data stay
in Prometheus, and importing a file again writes it again (the records were lost, not the blocks).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import NamedTuple

from verl_rl_insight.contract.errors import OverCapacity
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.stores.files import set_aside, write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_IMPORTS = 10_000


class Imported(NamedTuple):
    """One imported run: where it came from and what of it Prometheus holds."""

    project: str
    experiment: str
    source: str  # the file's name
    format: str
    sha256: str
    times: str  # "original", "synthesized" or "shifted N days"
    steps: int
    first_step: int
    last_step: int
    keys: int
    first_time: float  # as Prometheus holds them (after a shift)
    last_time: float
    imported_at: float
    blocks: int

    def as_json(self) -> dict[str, object]:
        fields = self._asdict()
        fields["experiment_name"] = fields.pop("experiment")
        return fields


class ImportStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.writing = threading.Lock()  # held while an import's blocks are made and moved: one at a time
        self._runs: dict[Run, Imported] = {}
        if path is not None and path.exists():
            try:
                for row in json.loads(path.read_text())["runs"]:
                    record = Imported(**{k: row[k] for k in Imported._fields})
                    self._runs[(record.project, record.experiment)] = record
            except (OSError, ValueError, KeyError, TypeError) as exc:
                set_aside(path, str(exc))
                self._runs.clear()

    def get(self, run: Run) -> Imported | None:
        with self._lock:
            return self._runs.get(run)

    def runs(self) -> list[Imported]:
        with self._lock:
            return list(self._runs.values())

    def add(self, record: Imported) -> None:
        with self._lock:
            run = (record.project, record.experiment)
            if run not in self._runs and len(self._runs) >= MAX_IMPORTS:
                raise OverCapacity(f"the server holds {MAX_IMPORTS} imported runs; delete some: rl-insight runs delete")
            self._runs[run] = record
            self._save()

    def forget(self, run: Run) -> bool:
        with self._lock:
            gone = self._runs.pop(run, None) is not None
            if gone:
                self._save()
            return gone

    def _save(self) -> None:
        if self.path is None:
            return
        rows = [r._asdict() for r in self._runs.values()]
        try:
            write_atomically(self.path, json.dumps({"runs": rows}))
        except OSError as exc:
            logger.warning("imported runs: cannot write %s: %s", self.path, exc)
