"""Training health: the RL failure modes that cost teams days, found in what verl logs.

Each detector is defined once, here, step by step: its test reads the run's values up to a step
(robust statistics over the steps before it: median and MAD, not fixed thresholds alone) and
says whether that step shows the failure. The server runs every detector on each step it
receives (``server/health/live.py``: the online findings, which the ``RLInsight<Mode>`` alert
rules read) and ``rl-insight diagnose`` runs the very same walk over a run's history read back
from Prometheus (offline): on the same history they find the same steps.

A finding is a streak of at least ``sustain`` flagged steps: its first and last step, the metric,
the value against the run's own baseline.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from verl_rl_insight.contract.naming import metric_name

Series = Sequence[tuple[int, float]]  # (step, value), steps increasing, finite values
PREFIX = "rl_insight_monitor_"  # the trainer scalars' series (plugin trainer_metrics' default prefix)
VALIDATION = metric_name(PREFIX, "val-core/")  # verl logs val-core/<data source>/<metric>
MAD_SCALE = 1.4826  # MAD to a standard deviation for normal noise


@dataclass(frozen=True)
class Check:
    """What a test says of one step: flagged or not, and the evidence."""

    flagged: bool
    value: float
    baseline: float | None = None
    evidence: str = ""
    since: int | None = None  # the step the flagged state began, where the test knows it (a plateau)


@dataclass(frozen=True)
class Detector:
    name: str
    keys: tuple[str, ...]  # verl's keys, the first one the run logs is used
    severity: str  # "warning" | "critical"
    sustain: int  # consecutive flagged steps before it is a finding
    test: Callable[[Series, Mapping[str, float]], Check | None]  # None: not enough history yet
    means: str  # what it means in RL terms
    look: str  # what to look at first
    usually: str  # what people usually try
    panel: str  # the dashboard panel to open
    online: bool = True  # the server evaluates it per step (stall and mismatch have their own rules)

    @property
    def alert(self) -> str:
        return "RLInsight" + "".join(part.capitalize() for part in self.name.split("_"))


@dataclass
class Finding:
    detector: str
    severity: str
    first_step: int
    last_step: int
    metric: str
    evidence: str
    value: float | None = None
    baseline: float | None = None
    panel: str = ""
    found_at: int | None = None  # the step at which the detector could first say so (online: when it did)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


DEFAULTS: dict[str, float] = {
    "window": 20,  # baseline steps before the step tested
    "min_history": 10,  # fewer baseline steps than this: no verdict yet
    "entropy_drop": 0.5,  # entropy below this share of its baseline median ...
    "entropy_mads": 4,  # ... and this many robust deviations below it
    "reward_drop": 0.3,  # score down by this share of its baseline (or of the baseline spread) ...
    "reward_mads": 4,
    "plateau_steps": 40,  # the score's trend over this many steps ...
    "plateau_ratio": 2.0,  # ... within this many standard errors of no trend at all: a plateau
    "plateau_sustain": 3,
    "kl_ratio": 3.0,  # KL above this many times its baseline median ...
    "kl_mads": 6,
    "grad_norm_ratio": 5.0,
    "grad_norm_mads": 8,
    "clip_ratio": 2.0,
    "clip_mads": 5,
    "clip_min": 0.05,  # a clip fraction below this is never a runaway
    "length_ratio": 1.5,
    "length_mads": 5,
    "truncation_share": 0.1,  # response_length/clip_ratio: responses cut at the length limit
    "validation_drop": 0.15,  # a validation score this share below the median of the three before
    "throughput_ratio": 0.5,
    "throughput_mads": 4,
    "mismatch_warning": 0.005,  # training/rollout_probs_diff_mean, as RLInsightRolloutProbsDiff*
    "mismatch_critical": 0.01,
    "stall_s": 900,  # no step for this long (RLInsightTrainingStalled's stalled_for)
}


def robust(values: Sequence[float]) -> tuple[float, float]:
    """(median, spread): the spread is the MAD scaled to a standard deviation, never zero."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values) * MAD_SCALE
    return med, max(mad, 1e-3 * abs(med), 1e-12)


def _baseline(series: Series, p: Mapping[str, float]) -> list[float] | None:
    before = [v for _, v in series[:-1]][-int(p["window"]) :]
    return before if len(before) >= int(p["min_history"]) else None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _against_baseline(
    series: Series, p: Mapping[str, float], flagged: Callable[[float, float, float], bool]
) -> Check | None:
    """The newest value tested by ``flagged(value, baseline median, spread)``; None without enough history."""
    base = _baseline(series, p)
    if base is None:
        return None
    med, spread = robust(base)
    x = series[-1][1]
    evidence = f"{_fmt(x)} against a median of {_fmt(med)} over the {len(base)} steps before"
    return Check(flagged(x, med, spread), x, med, evidence)


def falls(share: str, mads: str) -> Callable[[Series, Mapping[str, float]], Check | None]:
    """Flagged when the value is below (1 - share) x the baseline median and ``mads`` deviations under it."""

    def test(series: Series, p: Mapping[str, float]) -> Check | None:
        return _against_baseline(
            series, p, lambda x, med, spread: med - x > p[share] * abs(med) and med - x > p[mads] * spread
        )

    return test


def rises(ratio: str, mads: str, floor: str | None = None) -> Callable[[Series, Mapping[str, float]], Check | None]:
    """Flagged when the value is above ``ratio`` x the baseline median and ``mads`` deviations over it."""

    def test(series: Series, p: Mapping[str, float]) -> Check | None:
        return _against_baseline(
            series,
            p,
            lambda x, med, spread: (
                x > p[ratio] * abs(med) and x - med > p[mads] * spread and (floor is None or x > p[floor])
            ),
        )

    return test


def above(threshold: str) -> Callable[[Series, Mapping[str, float]], Check | None]:
    def test(series: Series, p: Mapping[str, float]) -> Check | None:
        x = series[-1][1]
        return Check(x > p[threshold], x, None, f"{_fmt(x)}, above {_fmt(p[threshold])}")

    return test


def theil_sen(points: Series) -> float:
    """The median of the pairwise slopes: a trend that a few wild steps do not move."""
    slopes = [(v2 - v1) / (s2 - s1) for i, (s1, v1) in enumerate(points) for s2, v2 in points[i + 1 :] if s2 != s1]
    return statistics.median(slopes) if slopes else 0.0


def plateau(series: Series, p: Mapping[str, float]) -> Check | None:
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
        evidence=f"changed {trend:+.3g} over the last {n} steps, within its noise (+-{_fmt(error)}) around {_fmt(med)}",
    )


def validation_drop(series: Series, p: Mapping[str, float]) -> Check | None:
    """Validation runs every few steps: the latest against the median of the three before it."""
    if len(series) < 4:
        return None
    before = statistics.median(v for _, v in series[-4:-1])
    x = series[-1][1]
    flagged = before - x > p["validation_drop"] * abs(before) and before - x > 0.01
    return Check(flagged, x, before, f"{_fmt(x)} against {_fmt(before)}, the median of the three validations before")


def mismatch(series: Series, p: Mapping[str, float]) -> Check | None:
    x = series[-1][1]
    return Check(x > p["mismatch_warning"], x, None, f"{_fmt(x)} (normal below 0.005; above 0.01: engine precision)")


SCORE = ("critic/score/mean", "critic/rewards/mean")

DETECTORS: tuple[Detector, ...] = (
    Detector(
        "entropy_collapse",
        ("actor/entropy",),
        "critical",
        3,
        falls("entropy_drop", "entropy_mads"),
        "the policy's entropy collapsed: it stops exploring and samples nearly one answer",
        "actor/entropy next to score and response length; the clip fraction",
        "raise the entropy coefficient or the temperature, lower the learning rate, use clip-higher (DAPO), "
        "resume from a checkpoint before the collapse",
        "Training: what to check first",
    ),
    Detector(
        "reward_collapse",
        SCORE,
        "critical",
        3,
        falls("reward_drop", "reward_mads"),
        "the reward fell far below the run's own level: the policy got worse or the reward function broke",
        "score by step and the samples of the worst rollouts; the reward function's logs; KL and entropy",
        "check the reward function and the data; lower the learning rate; resume from the last good checkpoint",
        "Training: what to check first",
    ),
    Detector(
        "reward_plateau",
        SCORE,
        "warning",
        5,
        plateau,
        "the reward has stopped moving: learning has stalled (or the task is solved)",
        "score by step over a long range; entropy (collapsed?) and the learning rate schedule",
        "raise the learning rate or the rollout count, make the data harder, check that advantages are not all zero",
        "Training: what to check first",
    ),
    Detector(
        "kl_blowup",
        ("actor/ppo_kl", "actor/kl_loss", "critic/kl"),
        "critical",
        2,
        rises("kl_ratio", "kl_mads"),
        "the policy is running away from the old / reference policy",
        "actor/ppo_kl and actor/kl_loss by step, grad norm, the clip fraction",
        "lower the learning rate, raise the KL coefficient, tighten the clip range, check the log-prob mismatch",
        "Actor",
    ),
    Detector(
        "grad_norm_spike",
        ("actor/grad_norm",),
        "warning",
        1,
        rises("grad_norm_ratio", "grad_norm_mads"),
        "a gradient-norm spike: one bad batch or the start of a divergence",
        "actor/grad_norm by step, the loss, the batch's response lengths",
        "lower the learning rate or the grad clip, skip the bad batch, check for very long or empty responses",
        "Actor",
    ),
    Detector(
        "clip_ratio_runaway",
        ("actor/pg_clipfrac",),
        "warning",
        3,
        rises("clip_ratio", "clip_mads", "clip_min"),
        "the PPO clip fraction is running away: updates are too large for the trust region",
        "actor/pg_clipfrac with KL and grad norm",
        "lower the learning rate or the number of PPO epochs / mini-batches, check the log-prob mismatch",
        "Actor",
    ),
    Detector(
        "response_length_explosion",
        ("response_length/mean",),
        "warning",
        3,
        rises("length_ratio", "length_mads"),
        "responses are growing far beyond their recent length: repetition loops or reward hacking by length",
        "response_length/mean and clip_ratio, the samples of the longest rollouts",
        "add a length penalty or overlong reward shaping, check for repetition, cap max_response_length",
        "Rollout",
    ),
    Detector(
        "response_truncation",
        ("response_length/clip_ratio",),
        "warning",
        3,
        above("truncation_share"),
        "many responses hit the length limit and are cut: their rewards and advantages are wrong",
        "response_length/clip_ratio and max; the truncated samples",
        "raise max_response_length, use overlong filtering / soft punishment (DAPO), shorten the prompt template",
        "Rollout",
    ),
    Detector(
        "validation_drop",
        ("val-core/",),
        "warning",
        2,
        validation_drop,
        "the validation score dropped well below its best: overfitting or a regression",
        "val-core curves against the training score; the step of the best validation",
        "keep the best checkpoint, lower the learning rate, check the validation data and reward",
        "Validation",
    ),
    Detector(
        "throughput_drop",
        ("perf/throughput",),
        "warning",
        3,
        falls("throughput_ratio", "throughput_mads"),
        "throughput fell far below the run's own level: a slow node, memory pressure or a longer tail",
        "the RL state timeline (long tail, idle), GPU utilisation and memory, the engine panels",
        "find the slow replica or node, check preemption and memory, cap response length",
        "RL state timeline",
    ),
    Detector(
        "logprob_mismatch",
        ("training/rollout_probs_diff_mean",),
        "warning",
        3,
        mismatch,
        "the rollout engine's log-probs disagree with the trainer's: off-policy noise from precision or weight sync",
        "the log-prob mismatch panels; the engine's dtype, kernels and quantization",
        "match dtypes, check the weight sync, use TIS / MIS importance correction",
        "Log-prob mismatch",
        online=False,  # online: RLInsightRolloutProbsDiffWarning / Critical
    ),
)

NON_FINITE_KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/ppo_kl",
    "actor/kl_loss",
    "critic/vf_loss",
    "critic/grad_norm",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
)
NON_FINITE = Detector(
    "non_finite",
    NON_FINITE_KEYS,
    "critical",
    1,
    above("window"),  # the test is in non_finite_steps
    "a loss, gradient norm, reward or entropy is NaN or Inf: the run is broken from this step on",
    "the step's losses and grad norm; the batch (empty responses, zero-length masks); mixed precision",
    "resume from the last checkpoint, lower the learning rate, check loss scaling and bf16 / fp16 settings",
    "Training: what to check first",
)
STALL = Detector(
    "stall",
    ("timing_s/step",),
    "critical",
    1,
    above("stall_s"),  # the test is in stalls
    "no training step for a long time: a hang (NCCL, a rollout server, the data loader) or a dead job",
    "the RL state timeline's last spans: which phase never ended; the trainer's logs",
    "take a stack dump (py-spy) of the trainer and the workers, check the rollout servers and the network",
    "RL state timeline",
    online=False,  # online: RLInsightTrainingStalled
)
ALL = (NON_FINITE, *DETECTORS, STALL)
BY_NAME = {d.name: d for d in ALL}


def series_name(key: str) -> str:
    return metric_name(PREFIX, key)


_VERL_KEYS = {series_name(k): k for d in ALL for k in d.keys if not k.endswith("/")}  # series name -> key


def key_of(detector: Detector, names: Sequence[str] | Mapping[str, Any]) -> str | None:
    """The series the detector reads among ``names`` (series names): its first key present; for
    ``val-core/`` the first validation series of a reward, score or accuracy."""
    for key in detector.keys:
        if key.endswith("/"):
            found = sorted(
                n for n in names if n.startswith(VALIDATION) and any(w in n for w in ("reward", "score", "acc"))
            )
            if found:
                return found[0]
        elif series_name(key) in names:
            return series_name(key)
    return None


def verl_key(name: str) -> str:
    """The verl key behind a series name where a detector names it, else the series name."""
    return _VERL_KEYS.get(name, name)


class Streak:
    """A detector's walk over one metric, one step at a time: the online monitor and the offline
    command both feed it, so both find the same steps."""

    def __init__(self, detector: Detector, metric: str, params: Mapping[str, float], keep: int = 200) -> None:
        self.detector, self.metric, self.params, self.keep = detector, metric, params, keep
        self.series: list[tuple[int, float]] = []
        self.run: list[tuple[int, Check]] = []  # the current streak of flagged steps
        self.findings: list[Finding] = []
        self.active = False  # the newest step belongs to a finding

    def add(self, step: int, value: float) -> Check | None:
        if not math.isfinite(value) or (self.series and step <= self.series[-1][0]):
            return None
        self.series.append((step, value))
        if len(self.series) > self.keep:
            del self.series[: len(self.series) - self.keep]
        check = self.detector.test(self.series, self.params)
        if check is None or not check.flagged:
            self.run, self.active = [], False
            return check
        self.run.append((step, check))
        needed = (
            int(self.params["plateau_sustain"]) if self.detector.name == "reward_plateau" else self.detector.sustain
        )
        if len(self.run) >= needed:
            first = self.run[0][1].since or self.run[0][0], self.run[0][1]
            severity = self.detector.severity
            if (
                self.detector.name == "logprob_mismatch"
                and min(c.value for _, c in self.run) > self.params["mismatch_critical"]
            ):
                severity = "critical"
            latest = self.findings[-1] if self.findings else None
            if latest is not None and (self.active or first[0] <= latest.last_step + 1):
                latest.last_step, latest.severity = step, severity  # the evidence stays the first step's
            else:
                self.findings.append(
                    Finding(
                        self.detector.name,
                        severity,
                        first[0],
                        step,
                        verl_key(self.metric),
                        f"step {self.run[0][0]}: {self.run[0][1].evidence}",
                        self.run[0][1].value,
                        self.run[0][1].baseline,
                        self.detector.panel,
                        found_at=step,
                    )
                )
            self.active = True
        return check


def non_finite_steps(history: Mapping[str, Series]) -> list[Finding]:
    """Steps where a loss, grad norm, reward or entropy was NaN or Inf: one finding per streak
    (``history``: {series name: [(step, value)]})."""
    flagged: dict[int, list[str]] = {}
    for key in NON_FINITE_KEYS:
        for step, value in history.get(series_name(key), ()):
            if not math.isfinite(value):
                flagged.setdefault(step, []).append(f"{key} = {value}")
    findings: list[Finding] = []
    for step in sorted(flagged):
        if findings and findings[-1].last_step == step - 1:
            findings[-1].last_step = step
            continue
        what = ", ".join(flagged[step])
        findings.append(
            Finding(
                "non_finite",
                "critical",
                step,
                step,
                flagged[step][0].split(" = ")[0],
                what,
                panel=NON_FINITE.panel,
                found_at=step,
            )
        )
    return findings


def stalls(times: Series, finished: bool, now: float, params: Mapping[str, float]) -> list[Finding]:
    """Gaps between steps (by the time each step was logged) longer than ``stall_s``; and, for a run
    not finished, the time since its last step."""
    limit = params["stall_s"]
    found = [
        Finding(
            "stall",
            "critical",
            s1,
            s2,
            "global step",
            f"{t2 - t1:.0f} s between step {s1} and step {s2}",
            t2 - t1,
            limit,
            STALL.panel,
            found_at=s2,
        )
        for (s1, t1), (s2, t2) in zip(times, times[1:])
        if t2 - t1 > limit
    ]
    if times and not finished and now - times[-1][1] > limit:
        step, at = times[-1]
        found.append(
            Finding(
                "stall",
                "critical",
                step,
                step,
                "global step",
                f"no step for {now - at:.0f} s after step {step}",
                now - at,
                limit,
                STALL.panel,
                found_at=step,
            )
        )
    return found


def diagnose(
    history: Mapping[str, Series],
    step_times: Series = (),
    finished: bool = True,
    now: float = 0.0,
    params: Mapping[str, float] | None = None,
) -> list[Finding]:
    """Every finding in a run's history ({series name: [(step, value)]}), the most severe first."""
    p = {**DEFAULTS, **(params or {})}
    findings = non_finite_steps(history)
    for detector in DETECTORS:
        name = key_of(detector, list(history))
        if name is None:
            continue
        streak = Streak(detector, name, p, keep=10**9)
        for step, value in history[name]:
            streak.add(step, value)
        findings.extend(streak.findings)
    findings.extend(stalls(step_times, finished, now, p))
    return sorted(findings, key=lambda f: (f.severity != "critical", f.first_step, f.detector))
