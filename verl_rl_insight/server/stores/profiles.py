"""Profile requests: ``rl-insight profile`` asks, the trainer picks the request up at its next step
boundary and says how it went. Kept in ``<data>/profiles.json`` (0600), bounded.

A request goes requested -> armed (in verl's ``global_profiler.steps``) -> running -> finished,
or ends missed (its steps had begun when the trainer saw it) or refused (the job's profiler
cannot do it: the detail says which launch override would).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from verl_rl_insight.contract.errors import BadInput, NotFound
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import (
    MAX_PROFILE_STEPS,
    ProfileBody,
    ProfileReportBody,
    field_problem,
)
from verl_rl_insight.server.stores.files import write_atomically

MAX_REQUESTS = 1000  # all runs together; the oldest ended ones go first
MAX_OPEN_PER_RUN = 20
MAX_RUNS_WITH_CAPABILITY = 1000
ENDED = ("finished", "missed", "refused")


class ProfileError(BadInput):
    """A profile request or report that breaks a rule; the message names the field."""


class ProfileStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._requests: dict[str, dict[str, Any]] = {}
        self._capability: dict[Run, dict[str, Any]] = {}
        if path is not None:
            try:
                saved = json.loads(path.read_text())
                self._requests = {r["id"]: r for r in saved.get("requests", []) if isinstance(r, dict) and "id" in r}
            except (OSError, ValueError, TypeError, KeyError):
                self._requests = {}

    def _save(self) -> None:
        if self.path is not None:
            write_atomically(self.path, json.dumps({"requests": list(self._requests.values())}), mode=0o600)

    def request(self, body: bytes) -> dict[str, Any]:
        """A new request from a ``ProfileBody``; returns it."""
        try:
            ask = msgspec.json.decode(body, type=ProfileBody)
        except msgspec.ValidationError as exc:
            raise ProfileError(
                field_problem(exc, "a profile request: project, experiment_name, first_step, ...")
            ) from None
        except msgspec.DecodeError as exc:
            raise ProfileError(f"body is not JSON: {exc}") from None
        last = ask.last_step if ask.last_step is not None else ask.first_step
        if last < ask.first_step:
            raise ProfileError(f"last_step {last} is before first_step {ask.first_step}")
        if last - ask.first_step + 1 > MAX_PROFILE_STEPS:
            raise ProfileError(f"last_step: at most {MAX_PROFILE_STEPS} steps in one request")
        now = time.time()
        request_id = secrets.token_hex(6)
        record: dict[str, Any] = {
            "id": request_id,
            "project": ask.project,
            "experiment_name": ask.experiment_name,
            "first_step": ask.first_step,
            "last_step": last,
            "role": ask.role,
            "ranks": ask.ranks,
            "state": "requested",
            "detail": "waiting for the trainer's next step boundary",
            "trace_dir": None,
            "steps": [],
            "created": now,
            "updated": now,
        }
        with self._lock:
            open_here = [
                r
                for r in self._requests.values()
                if (r["project"], r["experiment_name"]) == (ask.project, ask.experiment_name)
                and r["state"] not in ENDED
            ]
            if len(open_here) >= MAX_OPEN_PER_RUN:
                raise ProfileError(f"{MAX_OPEN_PER_RUN} requests of this run are still open; wait for them to end")
            self._requests[request_id] = record
            self._trim()
            self._save()
        return dict(record)

    def _trim(self) -> None:
        while len(self._requests) > MAX_REQUESTS:
            ended = [r for r in self._requests.values() if r["state"] in ENDED] or list(self._requests.values())
            oldest: dict[str, Any] = min(ended, key=lambda r: r["updated"])
            del self._requests[oldest["id"]]

    def summary(self, project: str, experiment: str, step: int) -> dict[str, Any] | None:
        """The per-rank summary of ``step`` the run's trainer sent, or None."""
        found = self._profiled(project, experiment, step)
        return dict(found[0]) if found else None

    def trace_dir(self, project: str, experiment: str, step: int) -> str | None:
        """Where the traces of a profiled step are (the trainer's word), or None."""
        found = self._profiled(project, experiment, step)
        return found[1] if found else None

    def _profiled(self, project: str, experiment: str, step: int) -> tuple[dict[str, Any], str | None] | None:
        with self._lock:
            for record in self._requests.values():
                if (record["project"], record["experiment_name"]) == (project, experiment):
                    found = (record.get("summaries") or {}).get(str(step))
                    if found is not None:
                        return found, record.get("trace_dir")
        return None

    def list(self, project: str | None = None, experiment: str | None = None) -> dict[str, Any]:
        """The requests (newest first) and, for one run, what its profiler can do."""
        with self._lock:
            found = [
                dict(r)
                for r in self._requests.values()
                if (project is None or r["project"] == project)
                and (experiment is None or r["experiment_name"] == experiment)
            ]
            capability = self._capability.get((project, experiment)) if project and experiment else None
        found.sort(key=lambda r: -r["created"])
        return {"profiles": found, "capability": capability}

    def report(self, body: bytes) -> dict[str, Any]:
        """The trainer's word: updates of this run's requests, and its capability (a run credential's
        run the router has checked)."""
        try:
            report = msgspec.json.decode(body, type=ProfileReportBody)
        except msgspec.ValidationError as exc:
            raise ProfileError(field_problem(exc, "a profile report: project, experiment_name, updates")) from None
        except msgspec.DecodeError as exc:
            raise ProfileError(f"body is not JSON: {exc}") from None
        run = (report.project, report.experiment_name)
        with self._lock:
            for update in report.updates:
                record = self._requests.get(update.id)
                if record is None or (record["project"], record["experiment_name"]) != run:
                    raise NotFound(f"updates: no request {update.id} of {run[0]}/{run[1]}")
            for update in report.updates:
                record = self._requests[update.id]
                record.update(state=update.state, detail=update.detail, updated=time.time())
                if update.trace_dir is not None:
                    record["trace_dir"] = update.trace_dir
                if update.steps:
                    record["steps"] = sorted(set(record["steps"]) | set(update.steps))
                for summary in update.summaries:  # the per-rank summary of a profiled step, by step
                    if summary.step in record["steps"] or record["first_step"] <= summary.step <= record["last_step"]:
                        record.setdefault("summaries", {})[str(summary.step)] = msgspec.to_builtins(summary)
            if report.capability is not None:
                self._capability[run] = dict(report.capability)
                while len(self._capability) > MAX_RUNS_WITH_CAPABILITY:
                    del self._capability[next(iter(self._capability))]
            if report.updates:
                self._save()
        return {"updated": len(report.updates)}
