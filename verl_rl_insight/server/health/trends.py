"""The slow side of each detector: a change that builds over tens of steps.

A cliff test (``checks.py``) compares the newest 3 steps with the 20-50 before them, so a change
spread over 20-60 steps never leaves that window's spread. Here the run's level now (the median of
its newest ``trend_recent`` steps) is compared with its own level ``trend_near``-``trend_far``
steps ago (the median of those steps), and the change must be

- large for what it is (a share of the earlier level, the detector's setting),
- beyond the noise of such a difference: the noise of one step is taken from the run's own
  step-to-step changes (a trend does not count as noise there), and the difference of two medians
  of ``a`` and ``b`` steps has about ``noise * sqrt(pi/2 * (1/a + 1/b))``,
- a monotone trend by Mann-Kendall over the newest ``trend_near + trend_recent`` steps (an
  oscillation that happens to be low now is not a trend; the run's own drift before them, such as
  entropy's healthy decay, does not hide a turn).

Each finding names the steps it compared, both medians, the change and its noise, computed alike.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from verl_rl_insight.contract.verl_keys import SCORE_KEYS
from verl_rl_insight.server.health.checks import Check, Extra, Params, Setting, Steps, Test
from verl_rl_insight.server.health.signals import Series, fmt, mann_kendall, median, noise, steps


@dataclass(frozen=True)
class Shift:
    """The run's level now against its level ``trend_near``-``trend_far`` steps before."""

    now: float
    then: float
    series: Series
    first: int  # the index of ``earlier``'s first step in ``series``
    newest_from: int  # the index of the first of the newest trend_near + trend_recent steps
    recent: Series
    earlier: Series

    @property
    def window(self) -> Series:
        """Every step from ``earlier``'s first to now (sliced where it is read: the walk runs every step)."""
        return self.series[self.first :]

    @property
    def newest(self) -> Series:
        """The newest trend_near + trend_recent steps."""
        return self.series[self.newest_from :]

    @functools.cached_property
    def error(self) -> float:
        """The noise of ``now - then`` (one standard deviation), from the step-to-step changes of
        ``window``; computed where the level test passed (the walk runs every step)."""
        one = max(noise([v for _, v in self.window]), 1e-12)
        return one * math.sqrt(math.pi / 2 * (1 / len(self.recent) + 1 / len(self.earlier)))

    @functools.cached_property
    def trend_z(self) -> float:
        """Mann-Kendall's z over ``newest`` (computed where the rest of the test passed: it is n^2)."""
        return mann_kendall([v for _, v in self.newest])

    @property
    def change(self) -> float:
        return self.now - self.then

    def text(self) -> str:
        share = f" ({self.change / abs(self.then):+.0%})" if self.then else ""
        return (
            f"median {fmt(self.now)} over {steps(self.recent)} against the median {fmt(self.then)} over "
            f"{steps(self.earlier)}: {self.change:+.4g}{share}, {abs(self.change) / self.error:.1f}x the noise "
            f"of that difference (+-{fmt(self.error)}, from the step-to-step changes), Mann-Kendall z "
            f"{self.trend_z:+.1f} over the newest {len(self.newest)} steps"
        )


MadsZ = Callable[[Params], tuple[float, float]]  # beyond's (mads, z), read off the settings


def trend_mads_z(p: Params) -> tuple[float, float]:
    """Every detector's (mads, z) but throughput's."""
    return p.trend_mads, p.trend_z


def throughput_mads_z(p: Params) -> tuple[float, float]:
    return p.trend_throughput_mads, p.trend_throughput_z


def shift(series: Series, p: Params, moved: Callable[[float, float], bool] | None = None) -> Shift | Check | None:
    """None while the run has fewer than ``trend_min_history`` steps ``trend_near``-``trend_far`` back;
    with ``moved`` (now, then): an unflagged Check of the two medians where it says no, before any
    Shift is made (the walk runs every trend at every step)."""
    last = series[-1][0]
    recent = series[-p.trend_recent :]
    if len(recent) < p.trend_recent:
        return None
    # (step, value) pairs order by their step first and their values are finite: (s, -inf) comes before
    # every pair of step s and (s, inf) after them (bisect without a key function called at each probe)
    first = bisect.bisect_left(series, (last - p.trend_far, -math.inf))
    end = bisect.bisect_right(series, (last - p.trend_near, math.inf))
    if end - first < p.trend_min_history:
        return None
    earlier = series[first:end]
    now, then = median([v for _, v in recent]), median([v for _, v in earlier])
    if moved is not None and not moved(now, then):
        return Check(False, now, then)
    newest = bisect.bisect_right(series, (last - p.trend_near - p.trend_recent, math.inf))
    return Shift(now, then, series, first, newest, recent, earlier)


def score_or_none(series: Series, p: Params) -> Shift | None:
    found = shift(series, p)
    return found if isinstance(found, Shift) else None


def beyond(
    found: Shift,
    direction: int,
    share: float,
    p: Params,
    at_least: float = 0.0,
    mads_z: MadsZ = trend_mads_z,
) -> bool:
    """The change goes ``direction`` (+1 up, -1 down) by more than ``share`` of the earlier level,
    ``at_least`` in absolute terms, ``mads`` x its noise, with a Mann-Kendall trend (beyond ``z``):
    ``mads_z`` reads (mads, z) off the settings."""
    mads, z = mads_z(p)
    change = direction * found.change
    return (
        change > share * abs(found.then)
        and change > at_least
        and change > mads * found.error
        and direction * found.trend_z > z
    )


def score_shift(extra: Extra, p: Params) -> Shift | None:
    """The training score's shift over the same steps, where the run logs one."""
    score = next((extra[k] for k in SCORE_KEYS if extra.get(k)), None)
    return score_or_none(score, p) if score else None


def score_rises(found: Shift | None) -> bool:
    """The score rose beyond twice the noise of its difference: the run learns (entropy falls and
    responses grow or shrink in healthy runs while it learns their format)."""
    return found is not None and found.change > 2 * found.error


def trend(
    direction: int,
    share: Setting,
    at_least: Setting | None = None,
    consequence: bool = False,
    severity: str = "warning",
    mads_z: MadsZ = trend_mads_z,
) -> Test:
    """Flagged when the level moved ``direction`` beyond ``beyond``'s bar: a ``severity`` step, and
    with ``consequence`` a critical one where the training score fell too over the same steps."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        least, least_share = at_least(p) if at_least else 0.0, share(p)

        def moved(now: float, then: float) -> bool:  # beyond's first two tests
            change = direction * (now - then)
            return change > least_share * abs(then) and change > least

        found = shift(series, p, moved)
        if not isinstance(found, Shift):
            return found
        flagged = beyond(found, direction, least_share, p, least, mads_z)
        score = score_shift(extra, p) if consequence and flagged else None
        if not flagged or score_rises(score):
            return Check(False, found.now, found.then)
        evidence = found.text()
        fell = score is not None and beyond(score, -1, p.trend_score_fall, p)
        if score is not None:
            evidence += f"; the training score {'fell' if fell else 'did not rise'}: {score.text()}"
        level = "critical" if fell else severity
        return Check(
            True, found.now, found.then, evidence, since=found.earlier[-1][0] + 1, severity=level, sustained=True
        )

    return test


def level_at_most(setting: Setting, steps_setting: Steps) -> Test:
    """A share above ``setting`` over each of the newest ``steps_setting`` steps, whatever its trend."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        count, bar = steps_setting(p), setting(p)
        recent = series[-count:]
        if len(recent) < count:
            return None
        low = min(v for _, v in recent)
        flagged = low > bar
        evidence = (
            f"at least {fmt(low)} over each of {steps(recent)} (step {recent[-1][0]}: {fmt(recent[-1][1])}), above "
            f"the level {fmt(bar)} that a run's rewards can bear"
        )
        return Check(flagged, recent[-1][1], bar, evidence if flagged else "", severity="warning")

    return test


def any_of(*tests: Test) -> Test:
    """The first flagged check of ``tests``, else the first one's."""

    def test(series: Series, extra: Extra, p: Params) -> Check | None:
        first: Check | None = None
        for one in tests:
            check = one(series, extra, p)
            if check is not None and check.flagged:
                return check
            first = first or check
        return first

    return test
