"""The server config's ``alerts:`` section, one typed object (``AlertSettings``): the alert rules'
thresholds, a field each, and the detectors' settings (``detectors``, a ``HealthSettings``), all set
by name in one flat mapping (``alerts: {probs_diff_critical: 0.02, stalled_for: 30m, kl_mads: 7}``).
Each value is checked where its field is defined: a number, a whole number of steps, or a Prometheus
duration (``15m``); a name that is neither kind of setting is a ConfigError naming it.

Read by the rules (``managed/alert_rules.py``) and, through ``detectors``, by the online detectors
(``health/live.py``, given them by ``compose.py``). It imports neither: settings/server.py imports
this module, never the other way round.

One name per setting: the stall's floor is ``stalled_for`` (a duration), for the rule
RLInsightTrainingStalled and the stall detector alike; the detector's field keeps its name on the
wire, ``stall_s`` (``GET /api/v1/info``'s ``"health"``, what diagnose reads), and is set from
``stalled_for`` here. ``stall_s`` under ``alerts:`` (taken before, then overwritten by
``stalled_for``) is a deprecated alias of ``stalled_for`` in seconds: honoured, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Callable, Mapping

from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.server.settings.health import DEFAULTS as DETECTOR_DEFAULTS
from verl_rl_insight.server.settings.health import SETTINGS as DETECTOR_SETTINGS
from verl_rl_insight.server.settings.health import HealthSettings

logger = logging.getLogger("verl_rl_insight.server")

DEPRECATED_STALL_S = "stall_s"  # alerts.stall_s: stalled_for in seconds, before stalled_for was the one name


@dataclasses.dataclass(frozen=True)
class AlertSettings:
    """The ``alerts:`` section. A ``str`` field is a Prometheus duration, an ``int`` one a count of
    steps (at least 1), a ``float`` one a number; ``detectors`` the detectors' settings, whose
    ``stall_s`` is always ``stalled_for`` in seconds."""

    probs_diff_warning: float = 0.005  # training/rollout_probs_diff_mean: engine precision drifting
    probs_diff_critical: float = 0.01  # sustained above: an engine precision problem
    probs_diff_window: str = "15m"
    probs_diff_min_steps: int = 3
    grad_norm_ratio: float = 2.0  # grad norm this many times its earlier level, and still rising
    grad_norm_window: str = "30m"
    grad_norm_for: str = "15m"
    # no step for this long at least, and stall_ratio x the run's median step (finished runs excluded);
    # a completed step that long is the stall detector's warning
    stalled_for: str = "15m"
    replica_down_for: str = "2m"
    gpu_memory_ratio: float = 0.95
    gpu_memory_for: str = "5m"
    throughput_drop_ratio: float = 0.5  # perf/throughput below this share of the previous hour's mean
    throughput_for: str = "10m"
    # the timeline's per-step figures (server/timeline/live.py); each over the window's steps, with
    # at least timeline_min_steps of them, so one slow step does not page anyone
    timeline_window: str = "30m"
    timeline_min_steps: int = 5
    long_tail_share: float = 0.2  # the share of the window's step time spent waiting after the median replica
    trainer_idle_share: float = 0.3  # the share of the window's step time in which the trainer ran nothing
    slowest_replica_share: float = 0.5  # one replica held back more than this share of the window's steps
    # training health (server/health/detectors.py): each RLInsight<Mode> fires while a step of the
    # last health_hold belonged to a finding
    health_hold: str = "10m"
    detectors: HealthSettings = DETECTOR_DEFAULTS  # every other key of alerts: (settings/health.py)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "detectors":
                object.__setattr__(self, f.name, _checked(f.name, f.type, getattr(self, f.name)))
        if not isinstance(self.detectors, HealthSettings):
            raise ConfigError(f"AlertSettings.detectors must be a HealthSettings, got {self.detectors!r}")
        stall_s = duration_s(self.stalled_for)
        if self.detectors.stall_s != stall_s:  # the one stall floor: stalled_for
            object.__setattr__(self, "detectors", dataclasses.replace(self.detectors, stall_s=stall_s))

    @classmethod
    def from_mapping(cls, values: object) -> AlertSettings:
        """The section as the config gives it (``None``: every default): a name that is no setting,
        or a value that is not of its setting's kind, is a ConfigError naming it."""
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise ConfigError(
                f"alerts must be a mapping of setting name to value (probs_diff_critical: 0.02), got {values!r}"
            )
        values = _stall_s_alias(dict(values))
        unknown = sorted(set(values) - set(NAMES), key=str)
        if unknown:
            raise ConfigError(
                f"unknown alert setting(s) {', '.join(map(str, unknown))}; known: {', '.join(sorted(NAMES))}"
            )
        named = {str(k): v for k, v in values.items()}  # every key one of NAMES now
        detectors = HealthSettings.from_mapping({k: v for k, v in named.items() if k in DETECTOR_SETTINGS})
        make: Callable[..., AlertSettings] = cls  # each value checked against its field's kind by _checked
        return make(**{k: v for k, v in named.items() if k in RULE_SETTINGS}, detectors=detectors)

    def as_mapping(self) -> dict[str, object]:
        """The settings that differ from the defaults, by their names in ``alerts:``: what a config
        would say to give this object back (the server process reads its settings so, as JSON)."""
        out: dict[str, object] = {
            name: getattr(self, name) for name in RULE_SETTINGS if getattr(self, name) != getattr(DEFAULTS, name)
        }
        out.update(
            (name, value)
            for name, value in self.detectors.by_name().items()
            if name != "stall_s" and value != getattr(DETECTOR_DEFAULTS, name)
        )
        return out


def _checked(name: str, kind: object, value: object) -> object:
    """``value`` as its field's kind (``kind``: the annotation's text), or a ConfigError naming it."""
    if kind in ("str", str):
        if not isinstance(value, str) or not _is_duration(value):
            raise ConfigError(f"alert setting {name} must be a Prometheus duration (90s, 15m, 1h30m), not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"alert setting {name} must be a number, not {value!r}")
    if kind in ("int", int):
        if not float(value).is_integer() or value < 1:
            raise ConfigError(f"alert setting {name} is a count of steps: a whole number from 1, not {value!r}")
        return int(value)
    return float(value)


def _stall_s_alias(values: dict[object, object]) -> dict[object, object]:
    """``stall_s`` (seconds, deprecated) taken as ``stalled_for``, with a warning; both: an error."""
    if DEPRECATED_STALL_S not in values:
        return values
    seconds = values.pop(DEPRECATED_STALL_S)
    if "stalled_for" in values:
        raise ConfigError("alerts: stall_s and stalled_for are the same setting; keep stalled_for (a duration: 15m)")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < 1e9:
        raise ConfigError(f"alerts.stall_s (deprecated: stalled_for) must be a number of seconds, not {seconds!r}")
    values["stalled_for"] = f"{int(seconds)}s" if float(seconds).is_integer() else f"{max(1, round(seconds * 1000))}ms"
    logger.warning(
        "alerts.stall_s is deprecated: write stalled_for: %s (a Prometheus duration) instead", values["stalled_for"]
    )
    return values


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _is_duration(text: str) -> bool:
    parts = _DURATION.findall(text)
    return bool(parts) and "".join(n + u for n, u in parts) == text


def duration_s(text: str) -> float:
    """A Prometheus duration (``90s``, ``15m``, ``1h30m``) in seconds."""
    if not _is_duration(text):
        raise ConfigError(f"{text!r} is not a duration (90s, 15m, 1h30m)")
    return sum(int(n) * _UNIT_S[u] for n, u in _DURATION.findall(text))


RULE_SETTINGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AlertSettings) if f.name != "detectors")
# every name alerts: takes: the rules' and the detectors', stall_s set from stalled_for (one name each)
NAMES: tuple[str, ...] = RULE_SETTINGS + tuple(n for n in DETECTOR_SETTINGS if n != "stall_s")
if len(set(NAMES)) != len(NAMES):  # a rule's name that is a detector's too would set both (grad_norm_ratio did)
    raise RuntimeError(f"alert and detector settings share a name: {sorted(n for n in NAMES if NAMES.count(n) > 1)}")
DEFAULTS = AlertSettings()
