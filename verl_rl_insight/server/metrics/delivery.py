"""Delivery confirmed by the store: a confirming scraper's history goes only once its store has it.

Every scrape of a confirming scraper carries ``rl_insight_hub_scrape_number{scraper=NAME}``. A
scrape is stored whole or not at all (Prometheus commits a scrape's samples together, and drops
them all when the body is cut off), so the numbers the store holds are the scrapes it has. Once a
scrape was written ``settle_s`` ago, this reads the numbers back from the store's query API; the
hub sends a scrape it does not find again, with the same timestamps (a copy the store already has
is the same sample: Prometheus keeps one per series and timestamp; its out-of-order window lets a
scrape sent again land behind newer ones). A store that cannot be asked is asked again next round;
the hub gives up after ``history_s`` and counts it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from verl_rl_insight.contract import paths, server_url
from verl_rl_insight.contract.http_client import HttpClient, Unreachable
from verl_rl_insight.server.metrics.exposure import SCRAPE_NUMBER
from verl_rl_insight.server.metrics.hub import MetricHub

logger = logging.getLogger("verl_rl_insight.server")

QUERY_MARGIN_S = 60  # the query's window reaches this far before the oldest scrape asked about


class DeliveryCheck:
    def __init__(
        self,
        hub: MetricHub,
        stores: dict[str, str],
        settle_s: float,
        jobs: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hub = hub
        self.stores = dict(stores)  # scraper name -> the base URL of its store's Prometheus query API
        # scraper name -> the job its scrapes of the hub are stored under: another target of that
        # Prometheus cannot then fake the hub's scrape numbers (its own job label is renamed)
        self.jobs = dict(jobs or {})
        self.settle_s = settle_s
        self.clock = clock
        self.client = HttpClient(timeout_s=10.0)
        self._unreachable: set[str] = set()  # stores said so once already

    def check(self) -> None:
        """One round: ask each store about the scrapes written at least ``settle_s`` ago."""
        now = self.clock()
        for name, waiting in self.hub.awaiting(now - self.settle_s).items():
            url = self.stores.get(name)
            if url is None:
                continue
            stored = self.stored(url, name, now - waiting.oldest + QUERY_MARGIN_S)
            if stored is not None:
                self.hub.confirm(name, waiting.numbers, stored)

    def stored(self, url: str, name: str, window_s: float) -> set[int] | None:
        """The scrape numbers of ``name`` the store at ``url`` holds from the last ``window_s``;
        None when it cannot be asked."""
        job = f',job="{self.jobs[name]}"' if name in self.jobs else ""
        query = f'{SCRAPE_NUMBER}{{scraper="{name}"{job}}}[{int(window_s) + 1}s]'
        try:
            reply = self.client.request("GET", url + paths.PROMETHEUS_QUERY, params={"query": query})
            if not reply.ok:
                raise Unreachable(f"answered {reply.status}: {reply.error()}")
            result = reply.json()["data"]["result"]
            numbers = {int(float(value)) for series in result for _, value in series["values"]}
        except (Unreachable, ValueError, KeyError, TypeError) as exc:
            if name not in self._unreachable:
                self._unreachable.add(name)
                logger.warning(
                    "metric hub: cannot ask %s whether it stored %s's scrapes (%s); their history is kept",
                    server_url.redact(url),
                    name,
                    exc,
                )
            return None
        self._unreachable.discard(name)
        return numbers

    def run(self, stop: threading.Event, every_s: float = 1.0) -> None:
        """Check every ``every_s`` until ``stop`` is set (the server's thread)."""
        while not stop.wait(every_s):
            try:
                self.check()
            except Exception:  # the check never stops the server; the next round tries again
                logger.exception("metric hub: delivery check failed")
