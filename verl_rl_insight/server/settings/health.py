"""The detectors' settings, one typed field each: calibrated on real verl runs (``../shared/real_runs``,
``tests/data/real_runs``); the server config's ``alerts:`` mapping overrides them by name
(``HealthSettings.from_mapping``, which refuses a name it does not know and a value that is not a number).

The server sends them to ``rl-insight diagnose`` in ``GET /api/v1/info`` (``"health": as_dict()``, every
value a float) and diagnose reads them back with ``from_wire``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

from verl_rl_insight.contract.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class HealthSettings:
    """What each detector judges by (``checks.py``, ``trends.py``, ``validation.py``, ``detectors.py``)."""

    window: int = 20  # baseline steps before the newest ones
    min_history: int = 10  # fewer baseline steps than this: no verdict yet
    recent: int = 3  # the newest steps tested together (their median): one wild step is not a trend
    entropy_window: int = 50  # entropy's level: the upper quartile of this many steps before ...
    entropy_collapse_share: float = 0.15  # ... and a collapse below this share of it
    entropy_mads: float = 4.0  # ... and this many noise deviations beyond it (a collapse, a blowup)
    entropy_blowup_ratio: float = 2.5  # entropy above this many times its lower quartile before ...
    entropy_blowup_rise: float = 0.3  # ... and this many nats above it
    reward_collapse_share: float = 0.7  # score below this share of its level over reward_window steps ...
    reward_mads: float = 4.0  # ... and this many noise deviations under it
    reward_window: int = 50  # the steps whose upper quartile is the score's level
    plateau_steps: int = 40  # the score's trend over this many steps ...
    plateau_ratio: float = 2.0  # ... within this many standard errors of no trend at all: a plateau (info)
    plateau_sustain: int = 3  # plateau steps in a row before it is a finding
    kl_ratio: float = 3.0  # KL to the reference above this many times its median before ...
    kl_mads: float = 6.0  # ... and this many deviations above it ...
    kl_rise: float = 0.1  # ... and this far above it (nats): KL grows from 0 in every run
    kl_min_history: int = 3  # a KL that runs away in a run's first 10 steps is found there
    spike_steps: int = 3  # this many steps in a row ...
    spike_window: int = 50  # (the steps before them that the median and the 90th percentile are of)
    spike_ratio: float = 3.0  # ... all above this many times the median before ...
    spike_tail: float = 1.2  # ... and this many times the 90th percentile before (the run's own tail)
    clip_ratio: float = 2.0  # the clip fraction above this many times its median over window steps before ...
    clip_mads: float = 5.0  # ... and this many deviations above it (and above clip_min)
    clip_min: float = 0.05  # a clip fraction below this is never a runaway
    length_ratio: float = 1.5  # mean response length above this many times its median before ...
    length_mads: float = 5.0  # ... and this many deviations above it
    length_window: int = 30  # the steps before that a length explosion is measured against
    length_collapse_share: float = 0.5  # mean response length below this share of its level before
    length_mads_collapse: float = 4.0  # ... and this many noise deviations under it
    truncation_window: int = 30  # the steps before that a truncation rise is measured against
    truncation_rise: float = 0.15  # response_length/clip_ratio up by this much (absolute) ...
    truncation_ratio: float = 2.0  # ... and this many times its median before
    truncation_level: float = 0.3  # a third of the responses cut (each of truncation_level_steps steps): a warning
    truncation_level_steps: int = 5  # whatever its trend (their rewards and advantages are wrong)
    # the slow side of each detector (trends.py): the median of the newest trend_recent steps against the
    # median of the steps trend_near-trend_far before, beyond trend_mads x the noise of that difference and
    # with a Mann-Kendall trend (z beyond trend_z) over those steps; and beyond each mode's share of the level
    trend_recent: int = 5  # the newest steps, whose median is the level now
    trend_near: int = 20  # the earlier level: the steps from trend_near ...
    trend_far: int = 60  # ... to trend_far steps before the newest
    trend_min_history: int = 10  # fewer earlier steps than this: no trend verdict yet
    trend_mads: float = 4.0  # the change beyond this many times the noise of the difference ...
    trend_z: float = 3.0  # ... and a Mann-Kendall z beyond this
    trend_score_fall: float = 0.05  # the training score down this share with an entropy / length change: critical
    trend_entropy_fall: float = 0.6  # entropy below 40 % of its level 20-60 steps before
    trend_entropy_rise: float = 0.4  # entropy 1.4x its level ... (healthy public runs: at most 1.21x)
    trend_entropy_abs: float = 0.1  # ... and this many nats above it (healthy public runs: at most 0.006)
    trend_reward_fall: float = 0.12  # healthy public runs: at most 3 % in 20-60 steps
    trend_kl_rise: float = 2.0  # 3x ...
    # ... and this many nats above (healthy public runs: at most 0.06 in 20-60 steps; an in-reward KL grows
    # from 0 to 0.17 over the notebook run's 60 healthy steps)
    trend_kl_abs: float = 0.15
    trend_grad_rise: float = 2.0  # the gradient norm's median 3x
    trend_clip_rise: float = 2.0  # the clip fraction 3x (and clip_min above)
    trend_length_rise: float = 0.6  # mean response length 1.6x its level 20-60 steps before
    trend_length_fall: float = 0.2  # a fifth shorter, the score not rising
    trend_truncation_share: float = 1.0  # the truncated share 2x ...
    trend_truncation_rise: float = 0.1  # ... and up by this much (absolute)
    trend_throughput_fall: float = 0.18  # healthy public runs: at most 14 %
    trend_throughput_mads: float = 3.0  # throughput's trend_mads ...
    trend_throughput_z: float = 2.6  # ... and trend_z
    # joint_break (leading.py): two leading signals broke together, the score not rising; judged on the public
    # runs in tests/data/real_runs (found 3-7 steps after the onset of the three tool-call collapses, no healthy run)
    leading_mads: float = 2.2  # each beyond this many times the noise of the difference ...
    leading_turns_share: float = 0.2  # ... tool calls (num_turns - 2) a fifth below their level
    leading_length_share: float = 0.1  # ... response length a tenth above or below
    leading_entropy_share: float = 0.25  # ... entropy a quarter above or below
    leading_kl_share: float = 1.0  # ... the KL twice its level
    leading_score_fall: float = 0.05  # critical where the score fell this share of its level, beyond the noise
    validation_collapse: float = 0.9  # a validation this share below the one before: critical from 2 points
    validation_window: int = 20  # validations whose changes are the validation set's noise
    validation_drop: float = 0.08  # a validation score this share below its level (validation.py) ...
    validation_blind_drop: float = 0.25  # ... this share where its noise is not known yet (3-4 validations)
    validation_mads: float = 2.5  # ... and this many times the noise of the newest validations' median
    validation_decline_points: int = 3  # this many validations in a row each worse than the last, by validation_drop
    validation_single_mads: float = 10.0  # one validation alone below its level: a warning beyond this many noises
    # (the GPG run, healthy, has one at 6.9: 0.389 among 0.5s at step 115, back at 0.51 the next)
    divergence_steps: int = 100  # validation down from its best of this many steps, the training score up ...
    divergence_mads: float = 3.0  # ... each beyond this many times its noise
    divergence_share: float = 0.1  # ... validation down by this share of its level
    throughput_ratio: float = 0.5  # throughput below this share of its level over entropy_window steps before ...
    throughput_mads: float = 4.0  # ... and this many noise deviations under it
    mismatch_warning: float = 0.005  # training/rollout_probs_diff_mean, as RLInsightRolloutProbsDiff*
    mismatch_critical: float = 0.01  # ... and above this: critical (engine precision)
    stall_ratio: float = 5.0  # a step this many times the run's median step time ...
    stall_s: float = 900.0  # ... and at least this long (RLInsightTrainingStalled's stalled_for)
    signal_sustain: int = 3  # no learning signal for this many steps
    zero_variance_share: float = 0.8  # this share of the groups or more with all-equal rewards ...
    zero_variance_sustain: int = 5  # ... for this many steps in a row
    # not a setting (never read from a config nor sent): which way the validation series a walk follows
    # is better, from its name (validation.lower_is_better); the walk sets it with dataclasses.replace
    lower_is_better: bool = dataclasses.field(default=False, metadata={"setting": False})

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> HealthSettings:
        """The defaults with ``values`` (setting name -> number) in their place: a name that is no
        setting, a value that is not a finite number, or a count of steps that is not whole is a
        ConfigError naming it (a typo in the server config is an error, never silently ignored)."""
        unknown = sorted(set(values) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"unknown detector setting(s) {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
        make: Callable[..., HealthSettings] = cls  # each value checked against its field's type by _number
        return make(**{name: _number(name, value) for name, value in values.items()})

    @classmethod
    def from_wire(cls, values: Mapping[str, object]) -> HealthSettings:
        """The settings a server sent (``/api/v1/info``'s ``"health"``): a name this version does not
        know (a newer server's setting) is ignored, every other one as ``from_mapping``; so a diagnose
        reads an older server's settings and a newer one's alike."""
        return cls.from_mapping({k: v for k, v in values.items() if k in SETTINGS})

    def as_dict(self) -> dict[str, float]:
        """The settings by name, each a float: the wire format of ``/api/v1/info``'s ``"health"``."""
        return {name: float(getattr(self, name)) for name in SETTINGS}

    def by_name(self) -> dict[str, int | float]:
        """The settings by name, as typed (a count of steps an int)."""
        return {name: getattr(self, name) for name in SETTINGS}


SETTINGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HealthSettings) if f.metadata.get("setting", True))
_WHOLE = frozenset(f.name for f in dataclasses.fields(HealthSettings) if f.type in (int, "int"))


def _number(name: str, value: object) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"detector setting {name} must be a number, not {value!r}")
    if name not in _WHOLE:
        return float(value)
    if not float(value).is_integer():
        raise ConfigError(f"detector setting {name} is a count of steps: a whole number, not {value!r}")
    return int(value)


DEFAULTS = HealthSettings()  # every setting at its calibrated value
