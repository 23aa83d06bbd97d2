"""TargetAnnouncer: tells the server which endpoints to scrape, from a background thread.

Every target is registered with a TTL and registered again (a heartbeat) every TTL/3, so the
server forgets the targets of a run that has ended or crashed; ``close`` removes them at once.
``announce`` never blocks and never raises: the training job does not wait on the server. The
process has one (``Services.targets``, trainer/services.py), which the plugins announce through.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.counters import Counters
from verl_rl_insight.contract.http_client import HttpClient

if TYPE_CHECKING:
    from verl_rl_insight.trainer.config import ServerUrl

logger = logging.getLogger("verl_rl_insight")


@dataclasses.dataclass(slots=True)
class AnnouncerStats(Counters):
    announced: int = 0  # requests to the server's targets API it answered with success (announce, withdraw)
    failed: int = 0  # those it refused or never answered


class TargetAnnouncer:
    def __init__(self, server: ServerUrl, ttl_s: float = 90.0, timeout_s: float = 5.0) -> None:
        self.url = server.at(paths.TARGETS)
        self.ttl_s = float(ttl_s)
        self.timeout_s = timeout_s
        self._targets: dict[tuple[str, str], dict[str, str]] = {}  # (job, address) -> labels
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = HttpClient(server.token)
        self._warned = False
        self.stats = AnnouncerStats()

    def announce(self, address: str, job: str, labels: dict[str, str]) -> None:
        key = (job, address)
        with self._lock:
            if self._targets.get(key) == labels:
                return
            self._targets[key] = dict(labels)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rl-insight-targets", daemon=True)
                self._thread.start()
        self._wake.set()

    def targets(self) -> dict[tuple[str, str], dict[str, str]]:
        with self._lock:
            return dict(self._targets)

    def _run(self) -> None:
        while not self._stop.is_set():
            for (job, address), labels in self.targets().items():
                self._request("POST", {"address": address, "job": job, "labels": labels, "ttl_s": self.ttl_s})
            self._wake.wait(max(1.0, self.ttl_s / 3))
            self._wake.clear()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the heartbeats and remove the announced targets, all within ``timeout_s``: what is not
        removed by then expires on the server with its TTL (``ttl_s``). A server that does not answer
        costs the process's exit ``timeout_s``, not one wait per target (a driver announces every
        replica of the job)."""
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for job, address in self.targets():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._request("DELETE", None, params={"job": job, "address": address}, timeout_s=min(left, 2.0))

    def _request(
        self,
        method: str,
        body: dict[str, Any] | None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> bool:
        try:
            reply = self._client.request(
                method,
                self.url,
                data=json.dumps(body) if body else None,
                params=params,
                timeout_s=timeout_s or self.timeout_s,
                max_bytes=2**20,  # the answer is a small record: any server can be at the URL
            )
            ok = reply.status < 300
            message = reply.text[:300]
        except Exception as exc:
            ok, message = False, f"{type(exc).__name__}: {exc}"
        if ok:
            self.stats.announced += 1
        else:
            self.stats.failed += 1
        if not ok and not self._warned:
            self._warned = True
            logger.warning(
                "rl-insight: cannot register scrape targets with %s (%s); retrying in the background", self.url, message
            )
        return ok
