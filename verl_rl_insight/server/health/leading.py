"""The leading signals of a collapse, read together: an agent that stops calling its tools, responses
that grow or shrink, entropy that rises, more responses cut at the length limit, a KL that climbs.
Each moves before the score does, and each alone moves in healthy runs too; two of them breaking
together, while the score does not rise, is a collapse under way (judged on the public runs in
``tests/data/real_runs``: found 3-7 steps after the onset there, never on a healthy run).

A signal *breaks* at a step when the median of its newest ``RECENT`` values left its level (the
median of up to ``BASELINE`` values before them, ``GAP`` values back: a slide that has begun does
not drag the level with it) in its bad direction, by at least its share of the level and
``leading_mads`` times the noise of that difference (one value's noise from the level's own
step-to-step changes; the difference of two medians of ``a`` and ``b`` values has
``noise * sqrt(pi/2 * (1/a + 1/b))``).

Tool calls are read off verl's ``num_turns/mean`` (a turn a tool call and its answer, two turns with
no call at all): the share is of the calls, ``num_turns - 2``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from verl_rl_insight.contract.verl_keys import (
    ENTROPY_KEYS,
    KL_LOSS,
    RESPONSE_LENGTH_CLIP_RATIO,
    RESPONSE_LENGTH_MEAN,
    REWARD_KL_PENALTY,
)
from verl_rl_insight.server.health.checks import Check, Extra, Params
from verl_rl_insight.server.health.signals import Series, fmt, median, noise

RECENT = 3
GAP = 3
BASELINE = 20
MIN_BASELINE = 5
TURNS = "num_turns/mean"
NO_CALL_TURNS = 2.0  # the prompt and one answer: no tool call


class Signal(NamedTuple):
    """A leading signal: the keys it is read from (the first the run logs), which way is bad (-1
    down, +1 up, 0 either), the share of its level a break must be, and the floor of the level a
    share is taken of (tool calls: the turns past the two of no call)."""

    name: str
    keys: tuple[str, ...]
    direction: int
    share: Callable[[Params], float]
    floor: float = 0.0
    at_least: float = 0.0  # and this much in absolute terms (a share of responses cut)


SIGNALS = (
    Signal("tool calls", (TURNS,), -1, lambda p: p.leading_turns_share, NO_CALL_TURNS),
    Signal("response length", (RESPONSE_LENGTH_MEAN,), 0, lambda p: p.leading_length_share),
    # entropy up only: falling is what a policy does as it learns (a base model's first tens of steps);
    # a collapse to one answer is entropy_collapse's, with the score falling
    Signal("entropy", ENTROPY_KEYS, 1, lambda p: p.leading_entropy_share),
    Signal("truncation", (RESPONSE_LENGTH_CLIP_RATIO,), 1, lambda p: 0.0, at_least=0.03),
    Signal("KL", (KL_LOSS, REWARD_KL_PENALTY), 1, lambda p: p.leading_kl_share, at_least=0.05),
)
KEYS = tuple(k for s in SIGNALS for k in s.keys)


class Level(NamedTuple):
    """The newest values' median against the level before them, and the noise of that difference."""

    now: float
    level: float
    error: float
    steps: tuple[int, int]  # the first and last step of the newest values
    level_steps: tuple[int, int]  # the first and last step of the values the level is the median of


def level_change(series: Series, big_enough: Callable[[float, float], bool] | None = None) -> Level | None:
    """The newest ``RECENT`` values against the level ``GAP`` values back; None while fewer than
    ``MIN_BASELINE`` values come before them, or where ``big_enough(now, level)`` says the change
    is not worth its noise (the walk runs every step: the noise is computed only past that)."""
    if len(series) < RECENT + GAP + MIN_BASELINE:
        return None
    recent = series[-RECENT:]
    before = series[-RECENT - GAP - BASELINE : -RECENT - GAP]
    level_points = [v for _, v in before]
    a, b, c = recent[0][1], recent[1][1], recent[2][1]  # RECENT is 3: their median without a sort
    now, level = max(min(a, b), min(max(a, b), c)), median(level_points)
    if big_enough is not None and not big_enough(now, level):
        return None
    one = noise(level_points)
    # a level without noise (every step 0, or printed alike): a thousandth of the values is the least it moves
    floor = max(1e-3 * max(abs(now), abs(level)), 1e-12)
    error = max(one * math.sqrt(math.pi / 2 * (1 / RECENT + 1 / len(level_points))), floor)
    return Level(now, level, error, (recent[0][0], recent[-1][0]), (before[0][0], before[-1][0]))


class Break(NamedTuple):
    signal: str
    level: Level
    z: float  # the change the bad way, in noises of the difference


def broke(signal: Signal, points: Series, p: Params) -> Break | None:
    """The signal's break at the newest step, or None: not enough values, or not past its bounds."""
    share = signal.share(p)

    def bad(now: float, level: float) -> float:
        return abs(now - level) if signal.direction == 0 else signal.direction * (now - level)

    def big_enough(now: float, level: float) -> bool:
        return bad(now, level) >= share * abs(level - signal.floor) and bad(now, level) >= signal.at_least

    found = level_change(points, big_enough)
    if found is None:
        return None
    z = bad(found.now, found.level) / found.error
    return Break(signal.name, found, z) if z >= p.leading_mads else None


def joint_break(series: Series, extra: Extra, p: Params) -> Check | None:
    """Two or more leading signals broke together, the score not rising: a warning; critical where
    the score fell with them by ``leading_score_fall`` of its level and ``leading_mads`` noises.
    ``series`` is the training score."""
    score = level_change(series)
    if score is None:
        return None
    if score.now - score.level > score.error:  # up by more than its noise: the run is learning
        return Check(False, score.now, score.level)
    found = [
        b
        for signal in SIGNALS
        if (points := next((extra[k] for k in signal.keys if extra.get(k)), None)) is not None
        and (b := broke(signal, points, p)) is not None
    ]
    if len(found) < 2:
        return Check(False, score.now, score.level)
    fall = score.level - score.now
    critical = fall >= p.leading_score_fall * abs(score.level) and fall >= p.leading_mads * score.error
    found.sort(key=lambda b: -b.z)

    def said(b: Break) -> str:
        (low, high), (first, last) = b.level.level_steps, b.level.steps
        return (
            f"{b.signal} {fmt(b.level.level)} (the median of steps {low}-{high}) -> {fmt(b.level.now)} (of "
            f"steps {first}-{last}), {b.z:.1f}x the noise"
        )

    names = " and ".join(b.signal for b in found)
    (low, high), (first, last) = score.level_steps, score.steps
    evidence = (
        f"{names} broke together: {'; '.join(said(b) for b in found)}; the score {fmt(score.level)} (steps "
        f"{low}-{high}) -> {fmt(score.now)} (steps {first}-{last})"
    )
    return Check(True, score.now, score.level, evidence, critical=critical, signals=tuple(b.signal for b in found))
