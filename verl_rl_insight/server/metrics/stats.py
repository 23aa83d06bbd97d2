"""The hub's own counters: written by the hub's parts under its lock, read as a copy (``MetricHub.stats``)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

HUB_PREFIX = "rl_insight_hub_"
KEYS_DROPPED = HUB_PREFIX + "keys_dropped_total"


@dataclasses.dataclass(slots=True)
class HubStats:
    """What the hub counted since it started."""

    pushes: int = 0  # pushes applied (a push refused whole is not one)
    batches: int = 0  # batches applied
    duplicates: int = 0  # batches the hub held already (a resent copy), skipped
    rejected: int = 0  # pushes refused as bad input or over a bound (the API counts through count_rejected)
    rejected_series_limit: int = 0
    rejected_memory: int = 0
    rejected_run_share: int = 0
    rejected_other_memory: int = 0  # what others asked to book beside the hub and did not fit
    scrapes_refused_memory: int = 0
    history_evicted: int = 0
    history_evicted_unsent: int = 0  # of them, batches a named scraper had not been sent
    scrapes_not_stored: int = 0
    batches_resent: int = 0
    scrapes_unconfirmed: int = 0
    batches_lost: int = 0
    keys_dropped_reserved: int = 0
    keys_dropped_not_a_step: int = 0
    keys_dropped_too_long: int = 0
    step_disagreements: int = 0
    listener_errors: int = 0


class Stat(NamedTuple):
    """One of the hub's own series, as every scrape ends with it."""

    name: str  # with its labels, if any
    kind: str  # gauge or counter
    value: float


@dataclasses.dataclass(slots=True, frozen=True)
class Gauges:
    """What the hub holds now."""

    streams: int
    series: int
    memory_bytes: int
    memory_limit_bytes: int
    history_snapshots: int
    scrapers: int


def hub_series(gauges: Gauges, stats: HubStats) -> tuple[Stat, ...]:
    """The hub's own series, in exposition order."""
    return (
        *(Stat(HUB_PREFIX + f.name, "gauge", getattr(gauges, f.name)) for f in dataclasses.fields(Gauges)),
        Stat(HUB_PREFIX + "batches_total", "counter", stats.batches),
        Stat(HUB_PREFIX + "duplicate_batches_total", "counter", stats.duplicates),
        Stat(HUB_PREFIX + "rejected_pushes_total", "counter", stats.rejected),
        Stat(HUB_PREFIX + "history_evicted_total", "counter", stats.history_evicted),
        Stat(HUB_PREFIX + "history_evicted_unsent_total", "counter", stats.history_evicted_unsent),
        Stat(HUB_PREFIX + "scrapes_not_stored_total", "counter", stats.scrapes_not_stored),
        Stat(HUB_PREFIX + "batches_resent_total", "counter", stats.batches_resent),
        Stat(HUB_PREFIX + "scrapes_unconfirmed_total", "counter", stats.scrapes_unconfirmed),
        Stat(HUB_PREFIX + "batches_lost_total", "counter", stats.batches_lost),
        # a pushed key left out of its batch (the rest applied), by why; a step key unlike the step field
        Stat(KEYS_DROPPED + '{reason="reserved"}', "counter", stats.keys_dropped_reserved),
        Stat(KEYS_DROPPED + '{reason="not_a_step"}', "counter", stats.keys_dropped_not_a_step),
        Stat(KEYS_DROPPED + '{reason="too_long"}', "counter", stats.keys_dropped_too_long),
        Stat(HUB_PREFIX + "step_disagreements_total", "counter", stats.step_disagreements),
    )


def stat_lines(stats: tuple[Stat, ...]) -> list[str]:
    """The exposition lines of ``stats``: one TYPE line for the labelled lines of one family."""
    lines: list[str] = []
    family = ""
    for stat in stats:
        if stat.name.partition("{")[0] != family:
            family = stat.name.partition("{")[0]
            lines.append(f"# TYPE {family} {stat.kind}")
        lines.append(f"{stat.name} {stat.value}")
    return lines
