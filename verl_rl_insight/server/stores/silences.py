"""What the hub's API does with alerts: lists what fires and manages silences through the
Alertmanager it runs (v2 API, on loopback).

Silences made here are also kept in ``<data>/silences.json``: Alertmanager writes its own to
disk only every minute, so after a crash the hub puts back those still running (under new IDs;
the ones people were given keep working for ``unsilence``).

Bounded: at most ``MAX_SILENCES`` running silences made here (each at most some 2 KB: its fields
are bounded by the wire schema); one more is refused (422) until some end or are expired.
"""

import datetime
import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import BadInput, NotFound, OverCapacity, Unavailable
from verl_rl_insight.contract.http_client import HttpClient, Unreachable
from verl_rl_insight.contract.wire import SilenceBody, field_problem
from verl_rl_insight.server.stores.files import write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_SILENCES = 1000


class AlertingError(BadInput):
    """A silence request or ID that breaks a rule, or that Alertmanager refused."""


class SilenceNotFound(AlertingError, NotFound):
    """No silence with that ID."""


class AlertmanagerDown(Unavailable):
    """The server's Alertmanager does not answer."""


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _timestamp(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def silence_request(item: object) -> dict[str, Any]:
    """A silence request ({project, experiment_name, alertname?, duration_s, comment?, created_by?})
    as Alertmanager's matchers, checked against the wire schema's SilenceBody."""
    try:
        body = msgspec.convert(item, SilenceBody)
    except msgspec.ValidationError as exc:
        raise AlertingError(
            field_problem(exc, "{project, experiment_name, duration_s, alertname?, comment?, created_by?}")
        ) from None
    matchers = [
        {"name": name, "value": value, "isRegex": False, "isEqual": True}
        for name, value in (("project", body.project), ("experiment_name", body.experiment_name))
    ]
    if body.alertname is not None:
        matchers.append({"name": "alertname", "value": body.alertname, "isRegex": False, "isEqual": True})
    now = time.time()
    return {
        "matchers": matchers,
        "startsAt": _iso(now),
        "endsAt": _iso(now + body.duration_s),
        "createdBy": body.created_by or "rl-insight",
        "comment": body.comment or "silenced with rl-insight alerts silence",
    }


class Alerting:
    def __init__(
        self, url: str, state_path: Path, timeout_s: float = 5.0, login: tuple[str, str] | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.state_path = state_path
        self.timeout_s = timeout_s
        self._client = HttpClient(basic_auth=login)  # Alertmanager's login (credentials.py)
        self._lock = threading.Lock()
        try:
            self._kept = json.loads(state_path.read_text())[-MAX_SILENCES:]
        except (OSError, ValueError, TypeError, KeyError):
            self._kept = []

    # -- Alertmanager's API ------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            reply = self._client.request(method, self.url + path, json_body=body, timeout_s=self.timeout_s)
        except Unreachable as exc:
            raise AlertmanagerDown(
                f"Alertmanager at {self.url} does not answer ({exc}); it is restarted automatically, try again in a "
                "few seconds"
            ) from None
        if not reply.ok:
            raise (SilenceNotFound if reply.status == 404 else AlertingError)(
                f"Alertmanager refused it: {reply.text.strip()[:300]}"
            )
        return reply.json() if reply.body else None

    # -- what the API serves -----------------------------------------------------------------
    def firing(self) -> dict[str, list[dict[str, Any]]]:
        alerts = self._call("GET", paths.ALERTMANAGER_ALERTS + "?active=true&silenced=true&inhibited=true")
        return {
            "alerts": [
                {
                    "alertname": a["labels"].get("alertname"),
                    "labels": a["labels"],
                    "annotations": a.get("annotations", {}),
                    "since": a.get("startsAt"),
                    "state": a.get("status", {}).get("state"),
                    "silenced_by": a.get("status", {}).get("silencedBy", []),
                }
                for a in alerts
            ]
        }

    def silences(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "silences": [
                s
                for s in self._call("GET", paths.ALERTMANAGER_SILENCES)
                if s.get("status", {}).get("state") != "expired"
            ]
        }

    def silence(self, item: object) -> dict[str, Any]:
        request = silence_request(item)
        with self._lock:
            self._kept = [k for k in self._kept if _timestamp(k["endsAt"]) > time.time()]
            if len(self._kept) >= MAX_SILENCES:
                raise OverCapacity(
                    f"{MAX_SILENCES} silences are running already; end some with `rl-insight alerts unsilence ID` "
                    "(`rl-insight alerts silences` lists them)"
                )
        created = self._call("POST", paths.ALERTMANAGER_SILENCES, request)
        with self._lock:
            self._kept = [k for k in self._kept if _timestamp(k["endsAt"]) > time.time()]
            self._kept.append({**request, "id": created["silenceID"], "ids": [created["silenceID"]]})
            self._save()
        return {"id": created["silenceID"], "ends": request["endsAt"], "matchers": request["matchers"]}

    def unsilence(self, silence_id: object) -> dict[str, str]:
        if not isinstance(silence_id, str) or not re.fullmatch(r"[0-9a-fA-F-]{1,64}", silence_id):
            raise AlertingError("id must be a silence ID (as `rl-insight alerts silence` printed it)")
        with self._lock:
            kept = next((k for k in self._kept if silence_id in k["ids"]), None)
            current = kept["id"] if kept else silence_id
            self._call("DELETE", f"{paths.ALERTMANAGER_SILENCE}/{current}")
            if kept:
                self._kept.remove(kept)
                self._save()
        return {"expired": silence_id}

    def restore(self) -> int:
        """After Alertmanager restarted: put back the silences made here that it lost."""
        with self._lock:
            live = [k for k in self._kept if _timestamp(k["endsAt"]) > time.time() + 1]
            if not live:
                return 0
            known = {
                s["id"]
                for s in self._call("GET", paths.ALERTMANAGER_SILENCES)
                if s.get("status", {}).get("state") == "active"
            }
            restored = 0
            for kept in live:
                if kept["id"] in known:
                    continue
                request = {k: kept[k] for k in ("matchers", "endsAt", "createdBy", "comment")}
                created = self._call("POST", paths.ALERTMANAGER_SILENCES, {**request, "startsAt": _iso(time.time())})
                kept["id"] = created["silenceID"]
                kept["ids"].append(kept["id"])
                restored += 1
            self._kept = live
            self._save()
        return restored

    def restore_when_ready(self, timeout_s: float = 60.0) -> None:
        """``restore`` on a thread of its own, once Alertmanager answers again."""

        def run() -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    restored = self.restore()
                    if restored:
                        logger.warning("put back %d silence(s) Alertmanager lost when it restarted", restored)
                    return
                except (AlertingError, AlertmanagerDown):
                    time.sleep(0.5)
            logger.warning("Alertmanager did not come back within %.0f s; silences not put back", timeout_s)

        threading.Thread(target=run, name="rl-insight-silences", daemon=True).start()

    def _save(self) -> None:
        write_atomically(self.state_path, json.dumps(self._kept), mode=0o600)
