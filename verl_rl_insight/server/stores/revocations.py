"""Run credentials revoked one run at a time: ``rl-insight runs revoke`` (``POST /api/v1/runs/revoke``).

A revocation names a run and a time: every credential of that run minted before it is refused
(403) from then on; a job started afterwards mints a new one and writes again. Kept in
``<data>/revoked-runs.json`` (0600, written whole with fsync and rename). A revocation older than
a credential's lifetime (``RUN_CREDENTIAL_DAYS``) is let go: every credential it refused has
expired by then. At most ``MAX_REVOKED`` at once (one more is a 422). A damaged file is moved
aside and every credential minted before that moment is refused (fail closed: a job restarted
writes again), rather than letting the revoked ones write.

By the server's own clock: a credential says when it was minted by the clock of the node that
minted it, and a node whose clock is fast makes one that seems minted after a revoke. The server
trusts a mint time only within ``future_s`` (its ``max_future_s``) of its own clock: one further
ahead is refused (403 naming the skew). One ahead by less is remembered (a digest, not the
credential) from the moment it is first seen until the server's clock passes its mint time; a
revoke refuses every such credential of its run seen until then, whatever it says, and one first
seen after the revoke that says it was minted within ``future_s`` after it (it may have been
minted before, by that fast clock). Those refusals are kept in the same file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from verl_rl_insight.contract.errors import OverCapacity
from verl_rl_insight.contract.run_credential import RUN_CREDENTIAL_DAYS
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire_limits import MAX_FUTURE_S
from verl_rl_insight.server.stores.files import set_aside, write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_REVOKED = 10_000
MAX_AHEAD = 100_000  # credentials remembered at once as minted ahead of this server's clock
MINT_ROUNDING_S = 0.001  # a credential's mint time is rounded to the millisecond


class Revocations:
    def __init__(
        self, path: Path | None = None, future_s: float = MAX_FUTURE_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.future_s = future_s
        self.clock = clock
        self._lock = threading.Lock()
        self._runs: dict[Run, float] = {}
        self._all_before = 0.0  # every credential minted before this is refused
        # credential id -> (its run, the mint time it says, when this server first saw it), while
        # that mint time is ahead of this server's clock
        self._ahead: dict[str, tuple[Run, float, float]] = {}
        self._refused: dict[Run, set[str]] = {}  # run -> ids refused whatever they say
        if path is not None and path.exists():
            try:
                saved = json.loads(path.read_text())
                for p, e, at, *ids in saved["runs"]:
                    self._runs[(str(p), str(e))] = float(at)
                    if ids:
                        self._refused[(str(p), str(e))] = {str(i) for i in ids[0]}
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
        """Refuse every credential of the run minted until now, and every one seen until now
        whatever it says; returns that time."""
        now = self.clock()
        run = (project, experiment)
        with self._lock:
            self._prune(now)
            if run not in self._runs and len(self._runs) >= MAX_REVOKED:
                raise OverCapacity(f"{MAX_REVOKED} runs revoked in the last {RUN_CREDENTIAL_DAYS:.0f} days already")
            self._runs[run] = now
            seen = {cid for cid, (of, _, _) in self._ahead.items() if of == run}
            if seen:
                self._refused.setdefault(run, set()).update(seen)
            self._save()
        return now

    def refusal(self, project: str, experiment: str, minted: float, credential_id: str) -> str | None:
        """Why a credential of the run that says it was minted at ``minted`` is refused, by this
        server's clock (None: it is not)."""
        now = self.clock()
        run = (project, experiment)
        if minted > now + self.future_s:
            return (
                f"says it was minted {minted - now:.0f} s ahead of this server's clock (more than "
                f"max_future_s, {self.future_s:.0f} s): set the clock of the node that started the job right, "
                "then restart the job"
            )
        with self._lock:
            ahead = minted > now + MINT_ROUNDING_S
            if ahead:
                self._remember_ahead(credential_id, run, minted, now)
            else:
                self._ahead.pop(credential_id, None)
            at = self.revoked_at(project, experiment)
            if at is None:
                return None
            revoked = f"was revoked at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))}"
            if credential_id in self._refused.get(run, ()):
                return f"{revoked} (by this server's clock: it was in use then); a job started since carries a new one"
            if minted <= at:
                return f"{revoked}; a job started since then carries a new one"
            if credential_id in self._ahead and minted <= at + self.future_s:
                self._refused.setdefault(run, set()).add(credential_id)  # it stays refused once its time has come
                self._save()
                return (
                    f"{revoked}: it says it was minted {minted - at:.0f} s after that, by a clock ahead of this "
                    f"server's, so perhaps before; a job started more than {self.future_s:.0f} s after the revoke "
                    "writes again"
                )
        return None

    def _remember_ahead(self, credential_id: str, run: Run, minted: float, now: float) -> None:
        if credential_id in self._ahead:
            return
        for cid in [c for c, (_, at, _) in self._ahead.items() if at <= now]:  # their time has come
            del self._ahead[cid]
        if len(self._ahead) >= MAX_AHEAD:  # the one whose time comes first goes
            del self._ahead[min(self._ahead, key=lambda c: self._ahead[c][1])]
        self._ahead[credential_id] = (run, minted, now)

    def revoked_at(self, project: str, experiment: str) -> float | None:
        """Credentials of the run minted until this time are refused (None: none are)."""
        at = max(self._runs.get((project, experiment), 0.0), self._all_before)
        return at or None

    def _save(self) -> None:
        if self.path is not None:
            runs = [[p, e, at, sorted(self._refused.get((p, e), ()))] for (p, e), at in self._runs.items()]
            write_atomically(self.path, json.dumps({"runs": runs, "all_before": self._all_before}))

    def _prune(self, now: float) -> None:
        horizon = now - RUN_CREDENTIAL_DAYS * 86400
        for run in [r for r, at in self._runs.items() if at < horizon]:
            del self._runs[run]
            self._refused.pop(run, None)
