"""What the hub tells about itself and its streams (``GET /api/v1/hub``, ``GET /api/v1/streams``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypedDict

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.metrics.memory import Memory
from verl_rl_insight.server.metrics.model import Stream
from verl_rl_insight.server.metrics.positions import Scraper
from verl_rl_insight.server.metrics.stats import HUB_PREFIX, HubStats, Stat


class StreamSummary(TypedDict):
    labels: dict[str, str]
    step: int | None
    series: int
    batches_kept: int
    idle_s: float
    last_step_s_ago: float | None  # the age of its newest step by the trainer's own time (`runs list`)


def stream_summary(s: Stream, now: float) -> StreamSummary:
    return StreamSummary(
        labels=dict(s.key),
        step=s.step,
        series=len(s.latest),
        batches_kept=len(s.history),
        idle_s=round(now - s.updated, 3),
        last_step_s_ago=round(now - s.newest_time, 3) if math.isfinite(s.newest_time) else None,
    )


def summary(
    scrapers: Mapping[str, Scraper],
    memory: Memory,
    stats: HubStats,
    series: tuple[Stat, ...],
    instance: str,
    now: float,
) -> dict[str, Json]:
    """The hub's own series by name (without the prefix; a labelled family as {label value: n}),
    its named scrapers, and what its memory bound holds besides (under the hub lock)."""
    figures: dict[str, Json] = {}
    labelled: dict[str, dict[str, Json]] = {}
    for stat in series:
        family, _, label = stat.name[len(HUB_PREFIX) :].partition("{")
        if label:  # keys_dropped_total{reason="reserved"} -> keys_dropped_total: {"reserved": n}
            figures[family] = labelled.setdefault(family, {})
            labelled[family][label.split('"')[1]] = stat.value
        else:
            figures[family] = stat.value
    named: dict[str, Json] = {}
    for name, s in scrapers.items():
        scraper: dict[str, Json] = {"last_scrape_s_ago": round(now - s.seen_at, 1), "streams": len(s.marks)}
        if s.confirm:
            scraper["scrapes_awaiting_store"] = len(s.inflight)
            scraper["batches_to_resend"] = sum(map(len, s.resend.values()))
        named[name] = scraper
    figures["scraper_names"] = named
    figures["instance"] = instance
    figures["memory_booked_by_others"] = dict(memory.others)
    figures["memory_run_share_bytes"] = memory.run_share()  # what one run may hold
    figures["pushes_refused_run_share"] = stats.rejected_run_share
    return figures
