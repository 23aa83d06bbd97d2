"""The server config's ``alerts:`` section: the alert thresholds and the detectors' settings,
checked when the settings are read (``ServerSettings``) and used by the rules
(``managed/alert_rules.py``) and the online detectors (``server/health/live.py``).

It imports neither of them: settings/server.py imports this module, never the other way round.
"""

import dataclasses
import re
from collections.abc import Mapping

from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.server.settings.health import SETTINGS, HealthSettings

Threshold = float | int | str  # a number, or a Prometheus duration ("15m")

DEFAULTS: dict[str, Threshold] = {
    "probs_diff_warning": 0.005,  # training/rollout_probs_diff_mean: engine precision drifting
    "probs_diff_critical": 0.01,  # sustained above: an engine precision problem
    "probs_diff_window": "15m",
    "probs_diff_min_steps": 3,
    "grad_norm_ratio": 2.0,  # grad norm this many times its earlier level, and still rising
    "grad_norm_window": "30m",
    "grad_norm_for": "15m",
    "stalled_for": "15m",  # no step for this long at least, and stall_ratio x the run's median step (finished excluded)
    "replica_down_for": "2m",
    "gpu_memory_ratio": 0.95,
    "gpu_memory_for": "5m",
    "throughput_drop_ratio": 0.5,  # perf/throughput below this share of the previous hour's mean
    "throughput_for": "10m",
    # the timeline's per-step figures (server/timeline/live.py); each over the window's steps, with
    # at least timeline_min_steps of them, so one slow step does not page anyone
    "timeline_window": "30m",
    "timeline_min_steps": 5,
    "long_tail_share": 0.2,  # the share of the window's step time spent waiting after the median replica
    "trainer_idle_share": 0.3,  # the share of the window's step time in which the trainer ran nothing
    "slowest_replica_share": 0.5,  # one replica held back more than this share of the window's steps
    # training health (server/health/detectors.py): each RLInsight<Mode> fires while a step of the
    # last health_hold belonged to a finding; the detectors' own settings are theirs (HealthSettings)
    "health_hold": "10m",
}


def thresholds(overrides: Mapping[str, Threshold] | None = None) -> dict[str, Threshold]:
    """The alert thresholds and the detectors' settings by name, ``overrides`` in place: a name that
    is neither, or a detector setting that is not a number (``HealthSettings.from_mapping``), is a
    ConfigError naming it."""
    values: dict[str, Threshold] = {**DEFAULTS, **HealthSettings().by_name()}
    unknown = sorted(set(overrides or {}) - set(values))
    if unknown:
        raise ConfigError(f"unknown alert setting(s) {', '.join(unknown)}; known: {', '.join(sorted(values))}")
    HealthSettings.from_mapping({k: v for k, v in (overrides or {}).items() if k in SETTINGS})
    values.update(overrides or {})
    return values


def health_settings(overrides: Mapping[str, Threshold] | None = None) -> HealthSettings:
    """The detectors' settings from the server config's ``alerts:`` (the stall limit is ``stalled_for``)."""
    settings = HealthSettings.from_mapping({k: v for k, v in (overrides or {}).items() if k in SETTINGS})
    return dataclasses.replace(settings, stall_s=duration_s(str(thresholds(overrides)["stalled_for"])))


def duration_s(text: str) -> float:
    """A Prometheus duration (``90s``, ``15m``, ``1h30m``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"{text!r} is not a duration (90s, 15m, 1h30m)")
    return sum(int(n) * units[u] for n, u in parts)
