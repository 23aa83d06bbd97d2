"""Whose eyes the tools read with: the server's token (every run), a run credential (its own run
only, and less than the token even there: no run card, no profile request) or nothing (a server
without a token). Over stdio the credential is the user's, found as every command finds it; over
HTTP it is each request's ``Authorization: Bearer``, passed through: the MCP server holds none.

A credential is checked with the server before its first read (a wrong token is an error that says
so, not an empty list), and again after ``CHECKED_FOR_S``: a revoked credential stops reading."""

from __future__ import annotations

import hashlib
import threading
import time
import urllib.parse
from dataclasses import dataclass

from verl_rl_insight.commands import http_fetch
from verl_rl_insight.commands.printable import printable
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.run_credential import claimed_run, is_run_credential
from verl_rl_insight.contract.runs import Run

CHECKED_FOR_S = 30.0
MAX_CHECKED = 256  # credentials remembered as good (a digest each), the oldest forgotten first
PROBE_RUN = ("rl-insight-mcp", "credential-check")  # a run asked for to learn whether the token is right


class Refused(Exception):
    """A tool's refusal, in the CLI's one line (the tool error the agent reads)."""


@dataclass(frozen=True)
class Credential:
    secret: str | None
    over_http: bool  # each request's own (a remote agent's), or the user's here: what it may read, where a fix points

    @property
    def run(self) -> Run | None:
        """The one run a run credential reads; None for the token (or nothing)."""
        return claimed_run(self.secret) if self.secret and is_run_credential(self.secret) else None

    @property
    def is_run_credential(self) -> bool:
        return bool(self.secret) and is_run_credential(self.secret)

    def who(self) -> str:
        """Who wrote, for the write log (never the secret)."""
        if self.run is not None:
            return f"a run credential of {self.run[0]}/{self.run[1]}"
        return "the token" if self.secret else "no credential"

    def fix(self) -> str:
        if self.over_http:
            return "send Authorization: Bearer <the server's token or a run credential> with the MCP requests"
        return "set RL_INSIGHT_SERVER_URL (the URL `rl-insight server url` prints) in the MCP server's environment"

    def own(self, run: Run) -> None:
        """Refused unless this credential may read ``run``."""
        mine = self.run
        if self.is_run_credential and mine is None:
            raise Refused("the run credential is damaged: it names no run")
        if mine is not None and mine != run:
            raise Refused(
                f"this run credential reads {printable(mine[0])}/{printable(mine[1])} only, "
                f"not {printable(run[0])[:100]}/{printable(run[1])[:100]}"
            )


def from_header(value: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer X`` header (None: none sent)."""
    scheme, _, given = (value or "").partition(" ")
    return (given.strip() or None) if scheme.lower() == "bearer" else None


class Checks:
    """Which credentials the server said yes to lately (digests, not the secrets)."""

    def __init__(self) -> None:
        self._good: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, base: str, credential: Credential) -> None:
        digest = hashlib.sha256((credential.secret or "").encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            if now - self._good.get(digest, -CHECKED_FOR_S) < CHECKED_FOR_S:
                return
        _probe(base, credential)
        with self._lock:
            self._good[digest] = now
            while len(self._good) > MAX_CHECKED:
                self._good.pop(next(iter(self._good)))


def _probe(base: str, credential: Credential) -> None:
    """Refused unless the server takes ``credential``: a token-only route for the token (its 404:
    the probe run is not there, so the token was taken), the run's own profiles for a run credential."""
    run = credential.run
    if credential.is_run_credential and run is None:
        raise Refused("the run credential is damaged: it names no run")
    project, experiment = run if run is not None else PROBE_RUN
    path = paths.PROFILES if run is not None else paths.RUN_CARD
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    try:
        reply = http_fetch.fetch("GET", f"{base}{path}?{query}", token=credential.secret)
    except http_fetch.NoAnswer as exc:
        raise Refused(f"cannot reach the server at {base}: {exc}") from None
    if reply.status in (401, 403):
        what = "run credential" if run is not None else ("token" if credential.secret else "request without a token")
        raise Refused(f"the server refused the {what} ({reply.status}): {printable(reply.error())}; {credential.fix()}")
