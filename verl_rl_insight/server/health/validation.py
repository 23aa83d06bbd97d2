"""Validation under any of verl's names, judged against the noise of a validation set.

verl logs validation as ``val-core/<data source>/<var>/mean@N`` (the score a run is judged on),
``val-aux/...`` (the other variables and best/worst/majority of N), older verl as
``val/test_score/<source>``, agent recipes as ``val/<task>/success_rate``, and users under their own
names (``validation_keys``). Which way is good comes from the name: a loss, error or perplexity
falls, everything else (accuracy, success, reward, score, pass@k) rises. ``mean@N`` is a mean over
N samples of each prompt; the set's size is read off the values themselves (``questions``: a share
of n questions is a whole number of n-ths), and a drop is judged against the binomial noise of that
many questions where it is known, else against the run's own validation noise.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence

from verl_rl_insight.contract.verl_keys import SCORE_KEYS
from verl_rl_insight.server.health.checks import Check, Extra, Params
from verl_rl_insight.server.health.signals import Series, curvature_noise, fmt, noise, steps

FAMILIES = ("val-core/", "val-aux/", "val/", "test_score/")  # verl's, then older verl's and agents' names
_GOOD = ("acc", "success", "reward", "score", "pass", "correct", "solve", "match", "f1", "win")
_BAD = ("loss", "error", "perplexity", "ppl")
# read off series names, where verl's / and @ are _: std@N, best@k, worst@k, maj@k are not the level
_NOT_A_LEVEL = ("std", "best", "worst", "maj", "_min", "_max", "length", "count", "time")


def lower_is_better(name: str) -> bool:
    """A loss, error or perplexity is better low; anything else a validation logs is better high."""
    return any(w in name.lower() for w in _BAD)


def member(prefix: str, names: Iterable[str]) -> str | None:
    """The validation series of a family to follow: a mean of a score, accuracy, success rate or
    reward first (``mean@N`` over ``best@k``/``worst@k``/``std``), then a loss or error."""

    def rank(name: str) -> tuple[int, int, str]:
        low = name.lower()  # the family too: test_score/<data source> is a score
        kind = 0 if any(w in low for w in _GOOD) else 1 if any(w in low for w in _BAD) else 9
        plain = 2 if any(w in low for w in _NOT_A_LEVEL) else 0 if "mean" in low else 1
        return kind, plain, name

    found = sorted((rank(n) for n in names if n.startswith(prefix)), key=lambda r: r)
    found = [r for r in found if r[0] < 9 and r[1] < 2]
    return found[0][2] if found else None


def questions(values: Sequence[float], most: int = 200) -> int | None:
    """How many questions a validation score in [0, 1] is the share of: the fewest ``n`` for which
    each of the last 10 values is a whole number of ``n``-ths (as printed: within 3 decimals); None
    when none up to ``most`` is (a large validation set, or not a share), or when any ``n`` would
    be (fewer than three different values)."""
    return _questions(tuple(values[-10:]), most)


@functools.lru_cache(maxsize=4096)
def _questions(values: tuple[float, ...], most: int) -> int | None:
    if len(set(values)) < 3 or any(not 0 <= v <= 1 for v in values):
        return None  # two values or fewer: too many n fit (1 and 0.4 are 5 and 2 fifths, and 100 and 40 hundredths)
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


def _earlier(series: Series, p: Params) -> Series:
    """The validations ``trend_near``-``trend_far`` steps before the newest, where there are two or
    more, else the (up to) three before it."""
    last = series[-1][0]
    far = [(s, v) for s, v in series[:-1] if last - p.trend_far <= s <= last - p.trend_near]
    return far if len(far) >= 2 else series[-4:-1]


def validation_drop(series: Series, extra: Extra, p: Params) -> Check | None:
    """The newest validations against the run's validation level before them: a fall of 90 % or
    more between two validations from the second (critical: a collapse); from the third, the
    newest ones (two, three from the fifth validation: their median, so one wild validation of a
    run that then recovers is not a drop) below the level, the better of the median of the (up
    to) three validations before them and the median of those 20-60 steps back, beyond a share of
    it and ``validation_mads`` x the noise of that difference (from one validation's: the set's
    binomial noise where its size is known, else the run's own validation noise)."""
    sign = -1.0 if p.lower_is_better else 1.0
    points = series[-p.validation_window :]
    if len(points) < 2:
        return None
    (prev_step, prev), (step, x) = points[-2], points[-1]
    bound = questions([v for _, v in points])
    binomial = math.sqrt(max(prev * (1 - prev), 1 / bound) / bound) if bound and 0 <= prev <= 1 else 0.0
    fall = sign * (prev - x)
    if fall >= p.validation_collapse * abs(prev) and fall > max(0.01, 3 * binomial):
        evidence = f"step {step}: {fmt(x)} against step {prev_step}: {fmt(prev)}, {fall:.4g} worse (90 % or more)"
        return Check(True, x, prev, evidence, severity="critical")
    if len(points) < 3:
        return Check(False, x, prev)
    recent = points[-3:] if len(points) >= 5 else points[-2:]
    now = statistics.median(v for _, v in recent) if len(recent) == 3 else min(prev, x, key=lambda v: -sign * v)
    before = points[: -len(recent)]
    candidates = [before[-3:], _earlier([*before, recent[-1]], p)[: len(before)]]
    level_points = max((c for c in candidates if c), key=lambda c: sign * statistics.median(v for _, v in c))
    level = statistics.median(v for _, v in level_points)
    # the noise of the difference of two medians of a and b validations: sqrt(pi / 2 * (1 / a + 1 / b)) of one's
    one = max(validation_noise([v for _, v in before]), binomial)
    spread = one * math.sqrt(math.pi / 2 * (1 / len(recent) + 1 / len(level_points)))
    drop = sign * (level - now)
    # no noise known yet (too few validations before for their changes, too few values for the set's size):
    # a drop must then be a larger share of the level (validation_blind_drop) rather than beyond a noise of 0
    flagged = (
        drop > (p.validation_drop if spread > 0 else p.validation_blind_drop) * abs(level)
        and drop > p.validation_mads * spread
        and drop > 0.01
        and sign * (level - x) > 0
    )
    said = "the median" if len(recent) == 3 else "the better"
    evidence = (
        f"{said} {fmt(now)} of the validations at steps {', '.join(str(s) for s, _ in recent)} (step {step}: "
        f"{fmt(x)}) against the median {fmt(level)} of those at steps {', '.join(str(s) for s, _ in level_points)}: "
        f"{-sign * drop:+.4g}, {_noises(drop, spread)} the noise of that difference (+-{fmt(spread)}"
        f"{f', binomial of {bound} questions' if bound else ''})"
    )
    if flagged:
        # the noise not known yet (too few validations before): worth knowing, not yet a warning
        return Check(True, x, level, evidence + ("; the validation noise is not known yet" if spread <= 0 else ""),
                     mild=spread <= 0)  # fmt: skip
    return _decline(points, one, sign, p) or _one_low(points, level, one, sign, p) or Check(False, x, level)


def _noises(drop: float, spread: float) -> str:
    return f"{drop / spread:.1f}x" if spread > 0 else "(noise not known yet)"


def _decline(points: Series, one: float, sign: float, p: Params) -> Check | None:
    """A steady decline: each of the newest ``validation_decline_points`` validations worse than the
    one before, by ``validation_mads`` x the noise of a difference of two validations in all: a
    warning at the third."""
    n = p.validation_decline_points
    if one <= 0 or len(points) < n + 2:
        return None
    run = points[-n - 1 :]
    steps_down = all(sign * (b - a) < 0 for (_, a), (_, b) in zip(run, run[1:]))
    (start_step, start), (_, x) = run[0], run[-1]
    fall = sign * (start - x)
    enough = max(p.validation_mads * one * math.sqrt(2), p.validation_drop * abs(start), 0.01)
    if not steps_down or fall <= enough:
        return None
    said = ", ".join(f"{fmt(v)} ({s})" for s, v in run)
    noises = fall / (one * math.sqrt(2))
    evidence = (
        f"{n} validations in a row each worse than the one before: {said}; {-sign * fall:+.4g} from step "
        f"{start_step}, {noises:.1f}x the noise of a difference of two validations (+-{fmt(one)} one)"
    )
    return Check(True, x, start, evidence)


def _one_low(points: Series, level: float, one: float, sign: float, p: Params) -> Check | None:
    """The newest validation alone below its level (the ones before it are not): worth knowing, a
    warning only beyond ``validation_single_mads`` x one validation's noise."""
    if one <= 0 or len(points) < 4:
        return None
    (_, prev), (step, x) = points[-2], points[-1]
    drop = sign * (level - x)
    prev_low = sign * (level - prev) > p.validation_mads * one  # then it is not one point alone
    if prev_low or drop <= max(p.validation_mads * one, p.validation_drop * abs(level), 0.01):
        return None
    mild = drop < p.validation_single_mads * one
    evidence = (
        f"step {step}: {fmt(x)}, one validation below the level {fmt(level)}: {-sign * drop:+.4g}, "
        f"{drop / one:.1f}x one validation's noise (+-{fmt(one)})"
        + ("; one point: worth knowing, not a warning" if mild else "")
    )
    return Check(True, x, level, evidence, mild=mild)


def train_val_divergence(series: Series, extra: Extra, p: Params) -> Check | None:
    """Validation sliding from its best of the last ``divergence_steps`` steps while the training
    score rose over the same steps, each beyond its own noise: the policy learns the training
    reward, not the task (reward hacking, overfitting to the training prompts)."""
    if p.lower_is_better:
        return None
    last = series[-1][0]
    val = [(s, v) for s, v in series if s > last - p.divergence_steps]
    score = next((extra[k] for k in SCORE_KEYS if extra.get(k)), None)
    if len(val) < 5 or score is None:
        return None
    values = [v for _, v in val]
    rolling = [(val[i][0], statistics.median(values[i - 1 : i + 2])) for i in range(1, len(val) - 2)]
    if not rolling:
        return None
    peak_step, peak = max(rolling, key=lambda sv: sv[1])
    now = statistics.median(values[-3:])
    at_peak = [v for s, v in score if peak_step - 5 <= s <= peak_step + 5]
    lately = score[-10:]
    if len(at_peak) < 5 or score[-1][0] < last - 5:
        return None
    rise = statistics.median(v for _, v in lately) - statistics.median(at_peak)
    train_noise = max(noise([v for _, v in score[-50:]]), 1e-12)
    fall = peak - now
    val_noise = validation_noise([v for _, v in series][-p.validation_window :])
    flagged = (
        fall > p.divergence_mads * val_noise
        and fall > p.divergence_share * abs(peak)
        and rise > p.divergence_mads * 0.6 * train_noise
    )
    evidence = (
        f"validation median {fmt(now)} over the validations at {', '.join(str(s) for s, _ in val[-3:])}, down "
        f"from {fmt(peak)} (the median of the validations around step {peak_step}), while the training score's "
        f"median over {steps(lately)} is {rise:+.3g} against the steps {peak_step - 5}-{peak_step + 5}"
    )
    return Check(flagged, now, peak, evidence)
