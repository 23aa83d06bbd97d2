"""The tests of one step, one per failure mode: each reads the run's values up to the step (the
detector's own metric, and for some the run's other series) and says whether that step shows the
failure. Calibrated on real verl runs (``../shared/real_runs``, ``tests/data/real_runs``): the
settings are ``DEFAULTS`` in ``detectors.py``.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from verl_rl_insight.server.health.signals import (
    Series,
    curvature_noise,
    fmt,
    noise,
    quantile,
    robust,
    split,
    theil_sen,
)

Params = Mapping[str, float]
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


Test = Callable[[Series, Extra, Params], "Check | None"]


def _recent(values: list[float]) -> float:
    return statistics.median(values)


def _against(x: float, level: float, steps: int) -> str:
    return f"{fmt(x)} against a median of {fmt(level)} over the {steps} steps before"


def falls_from_level(share: str, mads: str, window: str) -> Test:
    """Flagged when the newest steps' median is below ``share`` of the run's level over the
    ``window`` steps before (their upper quartile: what it was, not one wild step; for a negative
    level, ``1 - share`` of its size below it) and ``mads`` noise deviations under it: a fall over
    tens of steps, not only a cliff."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        parts = split(series, int(p["recent"]), int(p[window]), int(p["min_history"]))
        if parts is None:
            return None
        recent, before = parts
        x, level = _recent(recent), quantile(before, 0.75)
        fall = level - x  # a share of the level's size: a reward in [-1, 0] falls as one in [0, 1] does
        flagged = fall > (1 - p[share]) * abs(level) and fall > p[mads] * noise(before)
        evidence = (
            f"{fmt(x)} (median of the last {len(recent)} steps), down from {fmt(level)} over the "
            f"{len(before)} steps before"
            if flagged
            else ""
        )
        return Check(flagged, x, level, evidence)

    return test


def rises_from_level(
    ratio: str,
    mads: str,
    window: str,
    floor: str | None = None,
    at_least: str | None = None,
    history: str = "min_history",
) -> Test:
    """Flagged when the newest steps (their median) are above ``ratio`` x the median of the
    ``window`` steps before and ``mads`` deviations over it; ``floor``: and above this value;
    ``at_least``: and this far above the median (an absolute rise); ``history``: the steps it
    needs before the newest."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        parts = split(series, int(p["recent"]), int(p[window]), int(p[history]))
        if parts is None:
            return None
        recent, before = parts
        x = _recent(recent)
        level, spread = robust(before)
        flagged = (
            x > p[ratio] * abs(level)
            and x - level > p[mads] * max(spread, noise(before))
            and (floor is None or x > p[floor])
            and (at_least is None or x - level > p[at_least])
        )
        return Check(flagged, x, level, _against(x, level, len(before)) if flagged else "")

    return test


def entropy_blowup(series: Series, extra: Extra, p: Params) -> Check | None:
    """Entropy far above its low over the window before: the policy samples noise (gibberish)."""
    parts = split(series, int(p["recent"]), int(p["entropy_window"]), int(p["min_history"]))
    if parts is None:
        return None
    recent, before = parts
    x, low = _recent(recent), quantile(before, 0.25)
    flagged = (
        x > p["entropy_blowup_ratio"] * low
        and x - low > p["entropy_blowup_rise"]
        and x - low > p["entropy_mads"] * noise(before)
    )
    return Check(
        flagged,
        x,
        low,
        f"{fmt(x)} (median of the last {len(recent)} steps), up from {fmt(low)} over the {len(before)} steps before",
    )


def persistent_spike(series: Series, extra: Extra, p: Params) -> Check | None:
    """Every one of the newest steps above ``spike_ratio`` x the median before and above the
    run's own tail (``spike_tail`` x the 90th percentile of the steps before): single spikes of
    3-10x are normal in real runs, a norm that stays above the run's tail is not."""
    parts = split(series, int(p["spike_steps"]), int(p["spike_window"]), int(p["min_history"]))
    if parts is None:
        return None
    recent, before = parts
    level = statistics.median(before)
    bar = max(p["spike_ratio"] * level, p["spike_tail"] * quantile(before, 0.9))
    x = min(recent)
    evidence = (
        f"the last {len(recent)} steps all at or above {fmt(x)}; the median of the {len(before)} steps before "
        f"{fmt(level)}, their 90th percentile {fmt(quantile(before, 0.9))}"
    )
    return Check(x > bar, x, level, evidence)


def rising_share(series: Series, extra: Extra, p: Params) -> Check | None:
    """Truncation on its trend: the share of cut responses up by ``truncation_rise`` (absolute)
    and ``truncation_ratio`` x against the window before; a steady 10-25 % while lengths grow is not."""
    parts = split(series, int(p["recent"]), int(p["truncation_window"]), int(p["min_history"]))
    if parts is None:
        return None
    recent, before = parts
    x, level = _recent(recent), statistics.median(before)
    flagged = x - level > p["truncation_rise"] and x > p["truncation_ratio"] * level
    return Check(
        flagged,
        x,
        level,
        f"{fmt(x)} of the responses cut at the length limit, up from {fmt(level)} over the {len(before)} steps before",
    )


def plateau(series: Series, extra: Extra, p: Params) -> Check | None:
    n = int(p["plateau_steps"])
    if len(series) < n:
        return None
    window = series[-n:]
    trend = theil_sen(window) * (window[-1][0] - window[0][0])
    med, spread = robust([v for _, v in window])
    error = spread * math.sqrt(12 / n)  # the standard error of a fitted trend over n noisy steps, about
    flagged = abs(trend) < p["plateau_ratio"] * error
    return Check(
        flagged,
        window[-1][1],
        med,
        since=window[0][0],
        evidence=f"changed {trend:+.3g} over the last {n} steps, within its noise (+-{fmt(error)}) around {fmt(med)}",
    )


def questions(values: Sequence[float], most: int = 200) -> int | None:
    """How many questions a validation score in [0, 1] is the share of: the fewest ``n`` for which
    each of the last 10 values is a whole number of ``n``-ths (as printed: within 3 decimals); None
    when none up to ``most`` is (a large validation set, or not a share)."""
    return _questions(tuple(values[-10:]), most)


@functools.lru_cache(maxsize=4096)
def _questions(values: tuple[float, ...], most: int) -> int | None:
    if not values or any(not 0 <= v <= 1 for v in values):
        return None
    for n in range(2, most + 1):
        tolerance = n * 5e-4 + 1e-9  # a value printed with 3 decimals
        if tolerance >= 0.25:
            return None
        if all(abs(v * n - round(v * n)) <= tolerance for v in values):
            return n
    return None


def validation_noise(values: Sequence[float]) -> float:
    """A validation score's noise: its step-to-step changes, and never below the binomial noise of
    a share of ``questions(values)`` questions (a 30-question set moves by 0.09 between two
    validations of the same policy)."""
    spread = curvature_noise(values)
    n = questions(values)
    if n is not None:
        p = min(max(statistics.median(values), 1 / n), 1 - 1 / n)
        spread = max(spread, math.sqrt(p * (1 - p) / n))
    return spread


def validation_drop(series: Series, extra: Extra, p: Params) -> Check | None:
    """The latest validation against the median of the three before it, beyond both a share of
    it and the validation set's own noise (``validation_noise`` of the validations before)."""
    values = [v for _, v in series][-int(p["validation_window"]) :]
    if len(values) < 5:
        return None
    before = statistics.median(values[-4:-1])
    x = values[-1]
    spread = validation_noise(values[:-1])
    drop = before - x
    flagged = drop > p["validation_drop"] * abs(before) and drop > p["validation_mads"] * spread and drop > 0.01
    return Check(
        flagged,
        x,
        before,
        f"{fmt(x)} against {fmt(before)}, the median of the three validations before (their noise +-{fmt(spread)})",
    )


def train_val_divergence(series: Series, extra: Extra, p: Params) -> Check | None:
    """Validation sliding from its best of the last ``divergence_steps`` steps while the training
    score rose over the same steps, each beyond its own noise: the policy learns the training
    reward, not the task (reward hacking, overfitting to the training prompts)."""
    last = series[-1][0]
    val = [(s, v) for s, v in series if s > last - int(p["divergence_steps"])]
    score = next((extra[k] for k in ("critic/score/mean", "critic/rewards/mean") if extra.get(k)), None)
    if len(val) < 5 or score is None:
        return None
    values = [v for _, v in val]
    rolling = [(val[i][0], statistics.median(values[i - 1 : i + 2])) for i in range(1, len(val) - 2)]
    if not rolling:
        return None
    peak_step, peak = max(rolling, key=lambda sv: sv[1])
    now = statistics.median(values[-3:])
    at_peak = [v for s, v in score if peak_step - 5 <= s <= peak_step + 5]
    lately = [v for _, v in score[-10:]]
    if len(at_peak) < 5 or score[-1][0] < last - 5:
        return None
    rise = statistics.median(lately) - statistics.median(at_peak)
    train_noise = max(noise([v for _, v in score[-50:]]), 1e-12)
    fall = peak - now
    val_noise = validation_noise([v for _, v in series][-int(p["validation_window"]) :])
    flagged = (
        fall > p["divergence_mads"] * val_noise
        and fall > p["divergence_share"] * abs(peak)
        and rise > p["divergence_mads"] * 0.6 * train_noise
    )
    evidence = (
        f"validation {fmt(now)} (median of the last 3), down from {fmt(peak)} at step {peak_step}, while the "
        f"training score rose {rise:+.3g} since then"
    )
    return Check(flagged, now, peak, evidence)


_ZERO = 1e-12


def no_learning_signal(series: Series, extra: Extra, p: Params) -> Check | None:
    """Nothing to learn from at this step: every advantage 0, a zero gradient, or the same reward
    for every sample of the batch (GRPO's advantages are then all 0)."""
    step = series[-1][0]

    def at(key: str) -> float | None:
        values = extra.get(key)
        return values[-1][1] if values and values[-1][0] == step else None

    why = []
    adv_max, adv_min = at("critic/advantages/max"), at("critic/advantages/min")
    if adv_max is not None and adv_min is not None and abs(adv_max) <= _ZERO and abs(adv_min) <= _ZERO:
        why.append("every advantage is 0")
    grad = at("actor/grad_norm")
    if grad is not None and abs(grad) <= _ZERO:
        why.append("actor/grad_norm is 0")
    for name in ("score", "rewards"):
        high, low = at(f"critic/{name}/max"), at(f"critic/{name}/min")
        if high is not None and low is not None and high - low <= _ZERO:
            why.append(f"every sample's {name} is {fmt(high)}")
            break
    value = series[-1][1]
    return Check(bool(why), value, None, "; ".join(why) if why else "advantages, gradient and rewards vary")


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
        high, low = _at(extra, "critic/score/max", step), _at(extra, "critic/score/min", step)
        if high is None or low is None or _at(extra, "critic/vf_loss", step) is not None:
            return None
        if high - low > _ZERO:
            return Check(False, math.nan, p["zero_variance_share"])  # some group varies: no share to tell
        share, evidence = 1.0, f"every group is uniform: every response scored {fmt(high)} (critic/score/max = min)"
    flagged = share >= p["zero_variance_share"]
    mild = solved is not None and failed is not None and solved > failed and solved >= share / 2
    return Check(flagged, share, p["zero_variance_share"], evidence if flagged else "", mild=flagged and mild)


def mismatch(series: Series, extra: Extra, p: Params) -> Check | None:
    x = series[-1][1]
    return Check(
        x > p["mismatch_warning"],
        x,
        None,
        f"{fmt(x)} (normal below 0.005; above 0.01: engine precision)",
        critical=x > p["mismatch_critical"],
    )


def never(series: Series, extra: Extra, p: Params) -> Check | None:
    """The test of a detector that has its own walk (non_finite, stall)."""
    return None
