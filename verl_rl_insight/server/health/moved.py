"""What moved with a slow step: for each range of steps where ``timing_s/step`` (or one phase's
``timing_s/<phase>``) leaves the run's own level, the other series whose change over the same steps
is most associated with it, ranked.

The method, chosen on the public verl runs in tests/data/real_runs (docs/profile-analyze.md says
what it found there):
- the run's own level is the median of the last ``WINDOW`` steps that were themselves at level,
  its noise the MAD (scaled); a step leaves it when it is ``LEAVE_Z`` noises and ``LEAVE_REL`` of the
  level away; neighbouring such steps (one step at level between them at most) make one range; a
  range longer than ``WINDOW`` is a new level, and the next ranges are judged against it;
- a candidate series moved with the range when its mean over the range is ``MOVED_Z`` of its own
  noises away from its own level over the same ``WINDOW`` steps before;
- association: Spearman's rank correlation between the timing and the candidate over the window
  and the range together (robust to the outliers that made the range, blind to units); ranked by its
  size, the sign saying whether the candidate rose or fell with the time.
Series computed from the step time itself (throughput, time per step, time per token) are left
out: they move with it by construction and say nothing about why."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, METRIC_PREFIX, STEP_TIME_METRIC
from verl_rl_insight.contract.verl_phases import TIMED
from verl_rl_insight.server.health.signals import Series, robust

WINDOW = 20
LEAVE_Z = 4.0
LEAVE_REL = 0.2
MOVED_Z = 3.0
MIN_PAIRS = 8
# the phases verl times (timing_s/<name>: the fit loop's and older rollout workers'); timing_s/agent_loop/*
# are per-sample statistics (some of them lengths), not phases of the step
PHASES = TIMED
PHASE_FLOOR = 0.05  # a phase's range counts when it moved by 5 % of the run's median step time
MIN_ASSOCIATION = 0.3  # |rho| under this is no association worth a line
TOP = 5
STEP_TIMING = METRIC_PREFIX + "timing_s_step"
TIMING = METRIC_PREFIX + "timing_s_"
DERIVED = (STEP_TIME_METRIC, GLOBAL_STEP_METRIC, METRIC_PREFIX + "timing_per_token_ms_")
# verl's perf/time_per_step and perf/throughput, and the same figures under other names in the
# public runs (time_per_step, Tokens_Sec_GPU): the step time divided into or out of a count
DERIVED_PARTS = ("time_per_step", "throughput", "tokens_sec")


class Excursion(NamedTuple):
    series: str
    first_step: int
    last_step: int
    level: float  # the median before
    during: float  # the mean over the range
    baseline_steps: tuple[int, ...]
    steps: tuple[int, ...]


class Moved(NamedTuple):
    series: str
    association: float  # Spearman's rho with the timing over the window and the range
    direction: str  # "up" or "down": how the candidate changed over the range
    level: float
    during: float
    z: float


def short(series: str) -> str:
    """A series as a person reads it: its verl key's underscore form without the hub's prefix."""
    return series.removeprefix(METRIC_PREFIX)


def _close(points: Series, flagged: list[int], level: list[int]) -> Excursion | None:
    if not flagged:
        return None
    base = [points[i][1] for i in level[-WINDOW:]]
    during = [points[i][1] for i in flagged]
    return Excursion(
        "",
        points[flagged[0]][0],
        points[flagged[-1]][0],
        statistics.median(base),
        statistics.fmean(during),
        tuple(points[i][0] for i in level[-WINDOW:]),
        tuple(points[i][0] for i in flagged),
    )


def excursions(points: Series) -> list[Excursion]:
    """The ranges of steps where ``points`` leave their own level (see the module's docstring)."""
    found: list[Excursion] = []
    level: list[int] = []  # indices of points at level
    flagged: list[int] = []
    for i, (_, value) in enumerate(points):
        if len(level) < WINDOW:
            level.append(i)
            continue
        med, noise = robust([points[j][1] for j in level[-WINDOW:]])
        away = abs(value - med)
        if away > LEAVE_Z * noise and away > LEAVE_REL * abs(med):
            if flagged and i - flagged[-1] > 2:
                closed = _close(points, flagged, level)
                found += [closed] if closed else []
                flagged = []
            flagged.append(i)
            if len(flagged) >= WINDOW:  # a new level, not an excursion from the old one
                closed = _close(points, flagged, level)
                found += [closed] if closed else []
                level, flagged = list(flagged), []
            continue
        level.append(i)
    closed = _close(points, flagged, level[: level.index(flagged[0]) if flagged and flagged[0] in level else None])
    return found + ([closed] if closed else [])


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank); 0 when either side is constant."""

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def _candidate(name: str, values: Mapping[int, float], target: Mapping[int, float], exc: Excursion) -> Moved | None:
    before = [values[s] for s in exc.baseline_steps if s in values]
    during = [values[s] for s in exc.steps if s in values]
    if len(before) < MIN_PAIRS // 2 or not during:
        return None
    med, noise = robust(before)
    z = (statistics.fmean(during) - med) / noise
    if abs(z) < MOVED_Z:
        return None
    steps = [s for s in (*exc.baseline_steps, *exc.steps) if s in values and s in target]
    if len(steps) < MIN_PAIRS:
        return None
    rho = spearman([target[s] for s in steps], [values[s] for s in steps])
    return Moved(name, rho, "up" if z > 0 else "down", med, statistics.fmean(during), z)


def associated(history: Mapping[str, Series], exc: Excursion, top: int = TOP) -> list[Moved]:
    """The series that moved with ``exc``, the most associated first."""
    target = dict(history[exc.series])
    found = []
    for name, points in history.items():
        if (
            name in (exc.series, STEP_TIMING)
            or name.startswith(DERIVED)
            or (name.startswith(METRIC_PREFIX) and any(p in name.lower() for p in DERIVED_PARTS))
        ):
            continue
        values = {s: v for s, v in points if math.isfinite(v)}
        if name.startswith(TIMING):  # verl logs a phase's time only on steps that ran it (testing, ...)
            values = {s: values.get(s, 0.0) for s in target}
        moved = _candidate(name, values, target, exc)
        if moved is not None and abs(moved.association) >= MIN_ASSOCIATION:
            found.append(moved)
    found.sort(key=lambda m: (-_weight(exc, m), -abs(m.z)))
    return found[:top]


def _weight(exc: Excursion, moved: Moved) -> float:
    """How a candidate ranks: its association, or for a phase of the step the part of the step
    time's change it accounts for when that is larger (a one-step spike has few points for a rank
    correlation, but the step time is the sum of its phases)."""
    share = share_of_rise(exc, moved)
    return max(abs(moved.association), min(abs(share), 1.0) if share is not None else 0.0)


def what_moved(history: Mapping[str, Series], top: int = TOP) -> list[tuple[Excursion, list[Moved]]]:
    """Each range where the step time (or, on steps where it stayed, one phase's time) left its
    level, with what moved with it; the step time's ranges first, then in step order."""
    out: list[tuple[Excursion, list[Moved]]] = []
    covered: set[int] = set()
    names = [STEP_TIMING] + sorted(n for n in history if n.removeprefix(TIMING) in PHASES)
    step_times = [v for _, v in history.get(STEP_TIMING, ()) if math.isfinite(v)]
    floor = PHASE_FLOOR * statistics.median(step_times) if step_times else 0.0
    for name in names:
        points = [(s, v) for s, v in history.get(name, ()) if math.isfinite(v)]
        for exc in excursions(points):
            if name != STEP_TIMING and (covered.intersection(exc.steps) or abs(exc.during - exc.level) < floor):
                continue
            exc = exc._replace(series=name)
            covered.update(exc.steps) if name == STEP_TIMING else None
            out.append((exc, associated(history, exc, top)))
    return out


def share_of_rise(exc: Excursion, moved: Moved) -> float | None:
    """For a phase's time under the step time: the part of the step time's change it accounts for
    (the step time is the sum of its phases); None for any other series."""
    if exc.series != STEP_TIMING or not moved.series.startswith(TIMING) or exc.during == exc.level:
        return None
    return (moved.during - moved.level) / (exc.during - exc.level)


def largest(found: list[tuple[Excursion, list[Moved]]], count: int) -> list[tuple[Excursion, list[Moved]]]:
    """The ``count`` ranges that cost or saved the most seconds a step, in step order."""
    size = sorted(found, key=lambda f: -abs(f[0].during - f[0].level))
    return sorted(size[:count], key=lambda f: (f[0].first_step, f[0].series))


def as_json(exc: Excursion, moved: list[Moved]) -> dict[str, object]:
    return {
        "series": short(exc.series),
        "first_step": exc.first_step,
        "last_step": exc.last_step,
        "level": exc.level,
        "during": exc.during,
        "moved_with": [
            {
                "series": short(m.series),
                "association": m.association,
                "direction": m.direction,
                "level": m.level,
                "during": m.during,
                "share_of_rise": share_of_rise(exc, m),
            }
            for m in moved
        ],
    }


def describe(exc: Excursion, moved: list[Moved]) -> list[str]:
    """Lines a person reads: the range, then each series that moved with it."""
    steps = f"step {exc.first_step}" if exc.first_step == exc.last_step else f"steps {exc.first_step}-{exc.last_step}"
    lines = [f"{short(exc.series)} {steps}: {exc.level:.3g} -> {exc.during:.3g} (the run's level -> the range's mean)"]
    if not moved:
        lines.append("    nothing else left its own level with it")
    for m in moved:
        share = share_of_rise(exc, m)
        part = f", {share * 100:.0f} % of the change" if share is not None else ""
        lines.append(
            f"    {short(m.series):38} {m.direction:4} {m.level:.3g} -> {m.during:.3g}  "
            f"association {m.association:+.2f}{part}"
        )
    return lines
