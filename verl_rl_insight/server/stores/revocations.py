"""Run credentials revoked one run at a time: ``rl-insight runs revoke`` (``POST /api/v1/runs/revoke``).

A revocation names a run and a time: every credential of that run minted before it is refused
(403) from then on; a job started afterwards mints a new one and writes again. Kept in
``<data>/revoked-runs.json`` (0600, written whole with fsync and rename). A revocation older than
a credential's lifetime (``RUN_CREDENTIAL_DAYS``) is let go: every credential it refused has
expired by then. At most ``MAX_REVOKED`` at once (one more is a 422). A damaged file is moved
aside and every credential minted before that moment is refused (fail closed: a job restarted
writes again), rather than letting the revoked ones write.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from verl_rl_insight.contract.errors import OverCapacity
from verl_rl_insight.contract.run_credential import RUN_CREDENTIAL_DAYS
from verl_rl_insight.server.stores.files import set_aside, write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_REVOKED = 10_000


class Revocations:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], float] = {}
        self._all_before = 0.0  # every credential minted before this is refused
        if path is not None and path.exists():
            try:
                saved = json.loads(path.read_text())
                self._runs = {(str(p), str(e)): float(at) for p, e, at in saved["runs"]}
                self._all_before = float(saved.get("all_before", 0.0))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                set_aside(path, str(exc))
                logger.error(
                    "revoked run credentials unreadable: every run credential minted until now is refused; "
                    "running jobs write again once restarted"
                )
                self._all_before = time.time()
                self._save()

    def revoke(self, project: str, experiment: str) -> float:
        """Refuse every credential of the run minted until now; returns that time."""
        now = time.time()
        with self._lock:
            self._prune(now)
            if (project, experiment) not in self._runs and len(self._runs) >= MAX_REVOKED:
                raise OverCapacity(f"{MAX_REVOKED} runs revoked in the last {RUN_CREDENTIAL_DAYS:.0f} days already")
            self._runs[(project, experiment)] = now
            self._save()
        return now

    def revoked_at(self, project: str, experiment: str) -> float | None:
        """Credentials of the run minted until this time are refused (None: none are)."""
        at = max(self._runs.get((project, experiment), 0.0), self._all_before)
        return at or None

    def _save(self) -> None:
        if self.path is not None:
            runs = [[p, e, at] for (p, e), at in self._runs.items()]
            write_atomically(self.path, json.dumps({"runs": runs, "all_before": self._all_before}))

    def _prune(self, now: float) -> None:
        horizon = now - RUN_CREDENTIAL_DAYS * 86400
        for run in [r for r, at in self._runs.items() if at < horizon]:
            del self._runs[run]
