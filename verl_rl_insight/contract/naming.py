"""Naming rules shared by the trainer side and the server: what Prometheus accepts as a metric
name, a label name and a label value. Every check is a full match: ``"evil\\n"`` is not a name."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import TypeGuard

# Whole-string patterns, read the same by Python (``search``) and by JSON Schema tools: ``(?!\n)$``
# because Python's ``$`` also matches before a final newline ("evil\n"). The wire schema uses them.
METRIC_NAME_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?!\n)$"
LABEL_NAME_PATTERN = r"^(?!__)[a-zA-Z_][a-zA-Z0-9_]*(?!\n)$"  # names starting with __ are Prometheus' own
LABEL_VALUE_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*(?!\n)$"
_LABEL_NAME = re.compile(LABEL_NAME_PATTERN)
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_:]")

_names: dict[tuple[str, str], str] = {}


def metric_name(prefix: str, key: object) -> str:
    """``actor/pg_loss`` -> ``<prefix>actor_pg_loss``: ``/`` and every other character that
    Prometheus does not allow in a name become ``_``."""
    cache_key = (prefix, str(key))
    name = _names.get(cache_key)
    if name is None:
        name = prefix + _INVALID_CHARS.sub("_", str(key))
        if len(_names) < 100_000:
            _names[cache_key] = name
    return name


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# the trainer scalars' series: ``<METRIC_PREFIX><key with / as _>`` (plugin trainer_metrics' default prefix)
METRIC_PREFIX = "rl_insight_monitor_"
GLOBAL_STEP_METRIC = METRIC_PREFIX + "training_global_step"
# the trainer's time of the stream's last step, as a value: how long ago a run last stepped,
# also after a restart (a sample's timestamp is the last scrape's, not the step's)
STEP_TIME_METRIC = METRIC_PREFIX + "training_step_time_seconds"


# NaN and the infinities as the exposition format prints them, and as a push carries them in JSON
SPECIAL_VALUES = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


def format_special(value: float) -> str:
    """How the exposition format spells a value that is not finite (``NaN``, ``+Inf``, ``-Inf``)."""
    if value != value:
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


# what ``/metrics?scraper=NAME`` takes as a scraper's name (and the server's config as one)
SCRAPER_NAME_PATTERN = r"^[a-zA-Z0-9_.:-]{1,64}(?!\n)$"
_SCRAPER_NAME = re.compile(SCRAPER_NAME_PATTERN)


def is_scraper_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and _SCRAPER_NAME.search(name) is not None


def escape_label_value(value: str) -> str:
    """A label value as the exposition format and PromQL string literals both write it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_text(labels: Iterable[tuple[str, str]]) -> str:
    """``k="v",...`` for sorted (name, value) pairs: a label set as the exposition format writes it."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels)


def is_label_name(name: object) -> bool:
    return isinstance(name, str) and _LABEL_NAME.search(name) is not None


def label_value_problem(value: object, max_length: int = 256) -> str | None:
    """Why ``value`` cannot be a label value (None when it can): empty, too long, control
    characters, or text that has no UTF-8 form (lone surrogates)."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > max_length:
        return f"is longer than {max_length} characters"
    if _CONTROL.search(value):
        return "contains control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (lone surrogate)"
    return None


# The timeline's per-step figures that the server makes from spans (server/timeline/live.py).
TIMELINE_SERIES = (
    "rl_insight_timeline_step_seconds",
    "rl_insight_timeline_steps_total",
    "rl_insight_timeline_step_seconds_total",
    "rl_insight_timeline_tail_wait_seconds_total",
    "rl_insight_timeline_generate_calls",
    "rl_insight_timeline_long_tail_ratio",
    "rl_insight_timeline_tail_wait_seconds",
    "rl_insight_timeline_idle_ratio",
    "rl_insight_timeline_idle_seconds_total",
    "rl_insight_timeline_replica_lag_seconds",
    "rl_insight_timeline_replica_slowest",
    "rl_insight_timeline_replica_slowest_steps_total",
)
