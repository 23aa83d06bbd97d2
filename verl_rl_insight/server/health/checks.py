"""The tests of one step, one per failure mode: each reads the run's values up to the step (the
detector's own metric, and for some the run's other series) and says whether that step shows the
failure. Calibrated on real verl runs (``../shared/real_runs``, ``tests/data/real_runs``): the
settings are ``HealthSettings`` in ``server/settings/health.py``; a test made for several detectors
(``falls_from_level``) is given the settings it reads as a function of them (``lambda p:
(p.reward_collapse_share, ...)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from verl_rl_insight.contract.verl_keys import (
    ADVANTAGES_MAX,
    ADVANTAGES_MIN,
    CRITIC_VF_LOSS,
    GRAD_NORM,
    PG_LOSS,
    REWARDS_MAX,
    REWARDS_MIN,
    SCORE_MAX,
    SCORE_MIN,
)
from verl_rl_insight.server.health.signals import Series, fmt, median, noise, quantile, robust, steps, theil_sen
from verl_rl_insight.server.settings.health import HealthSettings

Params = HealthSettings
Extra = Mapping[str, Series]  # verl key -> its series up to the step (the detector's other keys)


@dataclass(frozen=True)
class Check:
    """What a test says of one step: flagged or not, and the evidence."""

    flagged: bool
    value: float
    baseline: float | None = None
    evidence: str = ""
    since: int | None = None  # the step the flagged state began, where the test knows it (a plateau)
    critical: bool = False  # this step is worse than the detector's own severity (mismatch above 0.01)
    mild: bool = False  # this step is only worth knowing (a streak of mostly mild steps is information)
    severity: str | None = None  # this step's own severity where it is not the detector's (a slow trend)
    sustained: bool = False  # the check already covers many steps (a trend): a finding from this step alone
    signals: tuple[str, ...] = ()  # what moved, where the test reads several signals (joint_break), first first


Test = Callable[[Series, Extra, Params], "Check | None"]
Setting = Callable[[Params], float]  # one setting of a test made for several detectors: lambda p: p.clip_min
Steps = Callable[[Params], int]  # one count of steps, as Setting


class Fall(NamedTuple):
    """What ``falls_from_level`` judges by: the share of the level a run must keep, the noise
    deviations a fall must pass, and the steps the level is read over."""

    share: float
    mads: float
    window: int


Level = Callable[[Params], Fall]  # falls_from_level's settings, read from the detectors' params


class Rise(NamedTuple):
    """What ``rises_from_level`` judges by (its docstring)."""

    ratio: float
    mads: float
    window: int
    history: int | None = None  # None: min_history
    floor: float | None = None
    at_least: float | None = None


def _parts(series: Series, recent: int, window: int, min_history: int) -> tuple[Series, Series] | None:
    """(the newest ``recent`` points, the up to ``window`` points before them), as ``split``."""
    if len(series) < recent + min_history:  # as ``split``, without building its lists
        return None
    points = series[-recent - window :]
    return points[-recent:], points[:-recent]


def _values(points: Series) -> list[float]:
    return [v for _, v in points]


def _now(recent: Series) -> str:
    """The newest steps' median, named as one, with the newest step's own value."""
    x = median(_values(recent))
    return f"median {fmt(x)} over {steps(recent)} (step {recent[-1][0]}: {fmt(recent[-1][1])})"


def falls_from_level(settings: Level) -> Test:
    """Flagged when the newest steps' median is below ``share`` of the run's level over the
    ``window`` steps before (their upper quartile: what it was, not one wild step; for a negative
    level, ``1 - share`` of its size below it) and ``mads`` noise deviations under it; ``settings``:
    its ``Fall`` of the settings."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        share, mads, window = settings(p)
        parts = _parts(series, p.recent, window, p.min_history)
        if parts is None:
            return None
        recent, before = parts
        x, level = median(_values(recent)), quantile(_values(before), 0.75)
        fall = level - x  # a share of the level's size: a reward in [-1, 0] falls as one in [0, 1] does
        flagged = fall > (1 - share) * abs(level) and fall > mads * noise(_values(before))
        if not flagged:  # evidence only where a finding can quote it (the walk runs every step)
            return Check(False, x, level)
        evidence = (
            f"{_now(recent)}, down from {fmt(level)}, the upper quartile of {steps(before)} (their median "
            f"{fmt(median(_values(before)))})"
        )
        return Check(flagged, x, level, evidence)

    return test


def rises_from_level(settings: Callable[[Params], Rise]) -> Test:
    """Flagged when the newest steps (their median) are above ``ratio`` x the median of the
    ``window`` steps before and ``mads`` deviations over it; ``floor``: and above this value;
    ``at_least``: and this far above the median (an absolute rise); ``history``: the steps it
    needs before the newest (each a field of the ``Rise`` that ``settings`` reads off the settings)."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        ratio, mads, window, history, floor, at_least = settings(p)
        parts = _parts(series, p.recent, window, p.min_history if history is None else history)
        if parts is None:
            return None
        recent, before = parts
        x, values = median(_values(recent)), _values(before)
        level = median(values)  # robust's median: its spread only where the ratio passed
        if not x > ratio * abs(level):
            return Check(False, x, level)
        level, spread = robust(values)
        flagged = (
            x > ratio * abs(level)
            and x - level > mads * max(spread, noise(values))
            and (floor is None or x > floor)
            and (at_least is None or x - level > at_least)
        )
        evidence = f"{_now(recent)}, against the median {fmt(level)} of {steps(before)}" if flagged else ""
        return Check(flagged, x, level, evidence)

    return test


def entropy_blowup(series: Series, extra: Extra, p: Params) -> Check | None:
    """Entropy far above its low over the window before: the policy samples noise (gibberish)."""
    parts = _parts(series, p.recent, p.entropy_window, p.min_history)
    if parts is None:
        return None
    recent, before = parts
    x, low = median(_values(recent)), quantile(_values(before), 0.25)
    flagged = (
        x > p.entropy_blowup_ratio * low
        and x - low > p.entropy_blowup_rise
        and x - low > p.entropy_mads * noise(_values(before))
    )
    evidence = f"{_now(recent)}, up from {fmt(low)}, the lower quartile of {steps(before)}" if flagged else ""
    return Check(flagged, x, low, evidence)


def persistent_spike(series: Series, extra: Extra, p: Params) -> Check | None:
    """Every one of the newest steps above ``spike_ratio`` x the median before and above the
    run's own tail (``spike_tail`` x the 90th percentile of the steps before): single spikes of
    3-10x are normal in real runs, a norm that stays above the run's tail is not."""
    parts = _parts(series, p.spike_steps, p.spike_window, p.min_history)
    if parts is None:
        return None
    recent, before = parts
    level = median(_values(before))
    tail = quantile(_values(before), 0.9)
    bar = max(p.spike_ratio * level, p.spike_tail * tail)
    x = min(_values(recent))
    if not x > bar:
        return Check(False, x, level)
    evidence = (
        f"each of {steps(recent)} at or above {fmt(x)} (step {recent[-1][0]}: {fmt(recent[-1][1])}); the median "
        f"{fmt(level)} of {steps(before)}, their 90th percentile {fmt(tail)}"
    )
    return Check(True, x, level, evidence)


def rising_share(series: Series, extra: Extra, p: Params) -> Check | None:
    """Truncation on its trend: the share of cut responses up by ``truncation_rise`` (absolute)
    and ``truncation_ratio`` x against the window before; a steady 10-25 % while lengths grow is not."""
    parts = _parts(series, p.recent, p.truncation_window, p.min_history)
    if parts is None:
        return None
    recent, before = parts
    x, level = median(_values(recent)), median(_values(before))
    flagged = x - level > p.truncation_rise and x > p.truncation_ratio * level
    if not flagged:
        return Check(False, x, level)
    evidence = (
        f"{_now(recent)} of the responses cut at the length limit, against the median {fmt(level)} of {steps(before)}"
    )
    return Check(True, x, level, evidence)


def plateau(series: Series, extra: Extra, p: Params) -> Check | None:
    n = p.plateau_steps
    if len(series) < n:
        return None
    window = series[-n:]
    trend = theil_sen(window) * (window[-1][0] - window[0][0])
    med, spread = robust(_values(window))
    error = spread * math.sqrt(12 / n)  # the standard error of a fitted trend over n noisy steps, about
    bar = p.plateau_ratio * error
    flagged = abs(trend) < bar
    return Check(
        flagged,
        window[-1][1],
        med,
        since=window[0][0],
        evidence=f"changed {trend:+.3g} over {steps(window)} (Theil-Sen), within {p.plateau_ratio:g} standard "
        f"errors of no change (+-{fmt(bar)}), around a median of {fmt(med)}",
    )


_ZERO = 1e-12


def no_learning_signal(series: Series, extra: Extra, p: Params) -> Check | None:
    """Nothing to learn from at this step: every advantage 0, a zero gradient, the same reward
    for every sample of the batch (GRPO's advantages are then all 0), or no update at all (the step
    logs its scores but not the update keys the run logged before: verl skipped the update)."""
    step = series[-1][0]

    def at(key: str) -> float | None:
        values = extra.get(key)
        return values[-1][1] if values and values[-1][0] == step else None

    why = []
    adv_max, adv_min = at(ADVANTAGES_MAX), at(ADVANTAGES_MIN)
    if adv_max is not None and adv_min is not None and abs(adv_max) <= _ZERO and abs(adv_min) <= _ZERO:
        why.append("every advantage is 0")
    grad = at(GRAD_NORM)
    if grad is not None and abs(grad) <= _ZERO:
        why.append(f"{GRAD_NORM} is 0")
    update = (GRAD_NORM, PG_LOSS)
    if all(extra.get(k) for k in update) and all(at(k) is None for k in update):
        why.append(f"no {GRAD_NORM} or {PG_LOSS} at this step, which the run logged before: verl skipped the update")
    for name, most, least in (("score", SCORE_MAX, SCORE_MIN), ("rewards", REWARDS_MAX, REWARDS_MIN)):
        high, low = at(most), at(least)
        if high is not None and low is not None and high - low <= _ZERO:
            why.append(f"every sample's {name} is {fmt(high)}")
            break
    value = series[-1][1]
    return Check(bool(why), value, None, f"step {step}: " + "; ".join(why) if why else "")


GROUP = "rl_insight/group/"  # plugin group_stats' keys


def _at(extra: Extra, key: str, step: int) -> float | None:
    """The value of one of the detector's other keys at ``step``, where the step has it."""
    values = extra.get(key)
    return values[-1][1] if values and values[-1][0] == step else None


def zero_variance(series: Series, extra: Extra, p: Params) -> Check | None:
    """Most GRPO groups carry no gradient: the share of groups (verl's ``uid``) whose rewards are all
    equal (``rl_insight/group/zero_variance_share``) at or above ``zero_variance_share``, in a run
    whose groups have two or more responses (``reward_std/mean`` is logged: with ``rollout.n`` 1 every
    group is one response). A run without the plugin's keys: every group is uniform where every
    response got the same score (``critic/score/max`` = ``min``) in a run without a critic (GRPO
    and its kin; PPO's critic still gives advantages). Mostly all-solved groups are information (the
    training prompts are solved), mostly none-solved (or equal, neither) a warning."""
    step = series[-1][0]
    share = _at(extra, GROUP + "zero_variance_share", step)
    solved, failed = _at(extra, GROUP + "solve_all_share", step), _at(extra, GROUP + "solve_none_share", step)
    if share is not None:
        if _at(extra, GROUP + "reward_std/mean", step) is None:
            return None  # groups of one response (PPO, rollout.n = 1): no group has a variance
        evidence = f"{share:.0%} of the groups have all-equal rewards (GRPO gives them no gradient)"
        if solved is not None and failed is not None and solved + failed > share + _ZERO:
            evidence += ": every response of the batch got the same reward"  # its highest is its lowest
        elif solved is not None and failed is not None:
            evidence += f": {solved:.0%} all solved, {failed:.0%} none solved"
    else:
        high, low = _at(extra, SCORE_MAX, step), _at(extra, SCORE_MIN, step)
        if high is None or low is None or _at(extra, CRITIC_VF_LOSS, step) is not None:
            return None
        if high - low > _ZERO:
            return Check(False, math.nan, p.zero_variance_share)  # some group varies: no share to tell
        share, evidence = 1.0, f"every group is uniform: every response scored {fmt(high)} (critic/score/max = min)"
    flagged = share >= p.zero_variance_share
    evidence = f"step {step}: {evidence}"
    mild = solved is not None and failed is not None and solved > failed and solved >= share / 2
    return Check(flagged, share, p.zero_variance_share, evidence if flagged else "", mild=flagged and mild)


def mismatch(series: Series, extra: Extra, p: Params) -> Check | None:
    step, x = series[-1]
    return Check(
        x > p.mismatch_warning,
        x,
        None,
        f"step {step}: {fmt(x)} (normal below 0.005; above 0.01: engine precision)",
        critical=x > p.mismatch_critical,
    )


def never(series: Series, extra: Extra, p: Params) -> Check | None:
    """The test of a detector that has its own walk (non_finite, stall)."""
    return None
