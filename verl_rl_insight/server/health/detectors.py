"""Training health: the RL failure modes that cost teams days, found in what verl logs.

Each detector is defined once, here: its test (``checks.py``) reads the run's values up to a step
and says whether that step shows the failure, against the run's own earlier steps. One walk,
``RunHealth``, feeds a run's steps to every detector in order: the server runs it on each step it
receives (``server/health/live.py``: the online findings, which the ``RLInsight<Mode>`` alert rules
read) and ``rl-insight diagnose`` runs the very same walk over a run's history (read back from
Prometheus, or from verl's ``file`` logger output): on the same steps they find the same findings.

A finding is a streak of at least ``sustain`` flagged steps: its first and last step, the metric,
the value against the run's own baseline. Baselines start again at a reset step (``resets``,
``RunHealth.reset_baseline``): a planned change (a new learning rate, a new data mix) is not a failure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from verl_rl_insight.contract.naming import METRIC_PREFIX, metric_name
from verl_rl_insight.server.health import checks
from verl_rl_insight.server.health.checks import Check, Test
from verl_rl_insight.server.health.signals import Series, fmt

PREFIX = METRIC_PREFIX  # the trainer scalars' series (plugin trainer_metrics' default prefix)
VALIDATION_KEYS = ("val-core/", "val/test_score/", "test_score/")  # verl's, then older verl's validation keys
VALIDATION = metric_name(PREFIX, "val-core/")
SEVERITIES = ("critical", "warning", "info")  # info: worth knowing, not a problem (a plateau)
KEEP = 120  # values each detector keeps of a series (online and offline alike: the same findings); its
# longest look back: the training score over the 100 steps of train_val_divergence

Findings = list["Finding"]
JsonValue = str | int | float | None


@dataclass(frozen=True)
class Detector:
    name: str
    keys: tuple[str, ...]  # verl's keys, the first one the run logs is used (a key ending in / is a family)
    severity: str  # "critical" | "warning" | "info"
    sustain: int  # consecutive flagged steps before it is a finding
    test: Test  # None: not enough history yet
    means: str  # what it means in RL terms
    look: str  # what to look at first
    usually: str  # what people usually try
    panel: str  # the dashboard panel to open
    online: bool = True  # the server pushes its findings per step (stall and mismatch have their own rules)
    extra: tuple[str, ...] = ()  # the run's other keys the test reads
    extra_keep: int = KEEP  # how many values of each it needs

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

    def as_json(self) -> dict[str, JsonValue]:
        return asdict(self)


DEFAULTS: dict[str, float] = {
    "window": 20,  # baseline steps before the newest ones
    "min_history": 10,  # fewer baseline steps than this: no verdict yet
    "recent": 3,  # the newest steps tested together (their median): one wild step is not a trend
    "entropy_window": 50,  # entropy's level: the upper quartile of this many steps before ...
    "entropy_collapse_share": 0.15,  # ... and a collapse below this share of it
    "entropy_mads": 4,
    "entropy_blowup_ratio": 2.5,  # entropy above this many times its lower quartile before ...
    "entropy_blowup_rise": 0.3,  # ... and this many nats above it
    "reward_collapse_share": 0.7,  # score below this share of its level over reward_window steps ...
    "reward_mads": 4,
    "reward_window": 50,
    "plateau_steps": 40,  # the score's trend over this many steps ...
    "plateau_ratio": 2.0,  # ... within this many standard errors of no trend at all: a plateau (info)
    "plateau_sustain": 3,
    "kl_ratio": 3.0,  # KL to the reference above this many times its median before ...
    "kl_mads": 6,
    "kl_rise": 0.1,  # ... and this far above it (nats): KL grows from 0 in every run
    "kl_min_history": 3,  # a KL that runs away in a run's first 10 steps is found there
    "spike_steps": 3,  # this many steps in a row ...
    "spike_window": 50,
    "spike_ratio": 3.0,  # ... all above this many times the median before ...
    "spike_tail": 1.2,  # ... and this many times the 90th percentile before (the run's own tail)
    "clip_ratio": 2.0,
    "clip_mads": 5,
    "clip_min": 0.05,  # a clip fraction below this is never a runaway
    "length_ratio": 1.5,
    "length_mads": 5,
    "length_window": 30,
    "length_collapse_share": 0.5,  # mean response length below this share of its level before
    "length_mads_collapse": 4,
    "truncation_window": 30,
    "truncation_rise": 0.15,  # response_length/clip_ratio up by this much (absolute) ...
    "truncation_ratio": 2.0,  # ... and this many times its median before
    "validation_window": 20,  # validations whose changes are the validation set's noise
    "validation_drop": 0.15,  # a validation score this share below the median of the three before ...
    "validation_mads": 3,  # ... and this many times its noise
    "divergence_steps": 100,  # validation down from its best of this many steps, the training score up ...
    "divergence_mads": 3,  # ... each beyond this many times its noise
    "divergence_share": 0.1,  # ... validation down by this share of its level
    "throughput_ratio": 0.5,
    "throughput_mads": 4,
    "mismatch_warning": 0.005,  # training/rollout_probs_diff_mean, as RLInsightRolloutProbsDiff*
    "mismatch_critical": 0.01,
    "stall_ratio": 5.0,  # a step this many times the run's median step time ...
    "stall_s": 900,  # ... and at least this long (RLInsightTrainingStalled's stalled_for)
    "signal_sustain": 3,  # no learning signal for this many steps
}

SCORE = ("critic/score/mean", "critic/rewards/mean")
ENTROPY = ("actor/entropy", "actor/entropy_loss")  # older verl logs the mean entropy as entropy_loss
SIGNAL_KEYS = (
    "critic/advantages/max",
    "critic/advantages/min",
    "actor/grad_norm",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/max",
    "critic/rewards/min",
)
STEP_TIME_KEYS = ("timing_s/step", "timing/step", "perf/time_per_step")

DETECTORS: tuple[Detector, ...] = (
    Detector(
        "no_learning_signal",
        SCORE,
        "critical",
        3,
        checks.no_learning_signal,
        "the run is not learning: every advantage is 0, the gradient is 0 or every sample gets the same reward",
        "critic/advantages/max and min, actor/grad_norm, critic/score/max and min; the reward function's output",
        "check the reward function and its inputs (the data source, the answer format), the group size "
        "(rollout.n > 1 for GRPO), that the task is neither all solved nor all failed",
        "Training: what to check first",
        extra=SIGNAL_KEYS,
        extra_keep=1,  # the step's own values
    ),
    Detector(
        "entropy_collapse",
        ENTROPY,
        "critical",
        3,
        checks.falls_from_level("entropy_collapse_share", "entropy_mads", "entropy_window"),
        "the policy's entropy collapsed: it stops exploring and samples nearly one answer",
        "actor/entropy next to score and response length; the clip fraction",
        "raise the entropy coefficient or the temperature, lower the learning rate, use clip-higher (DAPO), "
        "resume from a checkpoint before the collapse",
        "Training: what to check first",
    ),
    Detector(
        "entropy_blowup",
        ENTROPY,
        "critical",
        3,
        checks.entropy_blowup,
        "the policy's entropy is climbing far above its level: it samples noise (gibberish, mixed languages)",
        "actor/entropy with response length and the samples; grad norm and KL",
        "lower the learning rate, lower the temperature, check the log-prob mismatch and the weight sync, "
        "resume from a checkpoint before the climb",
        "Training: what to check first",
    ),
    Detector(
        "reward_collapse",
        SCORE,
        "critical",
        3,
        checks.falls_from_level("reward_collapse_share", "reward_mads", "reward_window"),
        "the reward fell far below the run's own level: the policy got worse or the reward function broke",
        "score by step and the samples of the worst rollouts; the reward function's logs; KL and entropy",
        "check the reward function and the data; lower the learning rate; resume from the last good checkpoint",
        "Training: what to check first",
    ),
    Detector(
        "reward_plateau",
        SCORE,
        "info",
        5,
        checks.plateau,
        "the reward has stopped moving: the task may be solved, or learning has stalled",
        "score by step over a long range; entropy (collapsed?) and the learning rate schedule",
        "if the task is not solved: raise the learning rate or the rollout count, make the data harder, check "
        "that advantages are not all zero",
        "Training: what to check first",
    ),
    Detector(
        "kl_blowup",
        ("actor/kl_loss", "actor/reward_kl_penalty", "critic/kl"),  # critic/kl: older verl's reward penalty
        "critical",
        2,
        checks.rises_from_level("kl_ratio", "kl_mads", "window", at_least="kl_rise", history="kl_min_history"),
        "the policy is running away from the reference policy it is held to (the KL loss or the reward's KL penalty)",
        "actor/kl_loss or actor/reward_kl_penalty by step, grad norm, the clip fraction",
        "lower the learning rate, raise the KL coefficient, tighten the clip range, check the log-prob mismatch",
        "Actor",
    ),
    Detector(
        "grad_norm_spike",
        ("actor/grad_norm",),
        "warning",
        1,
        checks.persistent_spike,
        "the gradient norm stays above the run's own tail: the start of a divergence, not one bad batch",
        "actor/grad_norm by step, the loss, the batch's response lengths",
        "lower the learning rate or the grad clip, skip the bad batches, check for very long or empty responses",
        "Actor",
    ),
    Detector(
        "clip_ratio_runaway",
        ("actor/pg_clipfrac",),
        "warning",
        3,
        checks.rises_from_level("clip_ratio", "clip_mads", "window", floor="clip_min"),
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
        checks.rises_from_level("length_ratio", "length_mads", "length_window"),
        "responses are growing far beyond their recent length: repetition loops or reward hacking by length",
        "response_length/mean and clip_ratio, the samples of the longest rollouts",
        "add a length penalty or overlong reward shaping, check for repetition, cap max_response_length",
        "Rollout",
    ),
    Detector(
        "response_length_collapse",
        ("response_length/mean",),
        "warning",
        3,
        checks.falls_from_level("length_collapse_share", "length_mads_collapse", "entropy_window"),
        "responses are getting far shorter than they were: the policy found a short answer the reward "
        "accepts, or generation breaks off (an EOS or stop-token problem)",
        "response_length/mean and min, the samples of the shortest rollouts, the score",
        "check the reward for a short-answer loophole and the stop tokens; add a minimum-length or format "
        "reward; resume from before the fall",
        "Rollout",
    ),
    Detector(
        "response_truncation",
        ("response_length/clip_ratio",),
        "warning",
        3,
        checks.rising_share,
        "more and more responses hit the length limit and are cut: their rewards and advantages are wrong",
        "response_length/clip_ratio and max; the truncated samples (repetition?)",
        "raise max_response_length, use overlong filtering / soft punishment (DAPO), check for repetition",
        "Rollout",
    ),
    Detector(
        "validation_drop",
        VALIDATION_KEYS,
        "warning",
        2,
        checks.validation_drop,
        "the validation score dropped well below its level, beyond the validation set's noise: overfitting "
        "or a regression",
        "val-core curves against the training score; the step of the best validation",
        "keep the best checkpoint, lower the learning rate, check the validation data and reward",
        "Validation",
    ),
    Detector(
        "train_val_divergence",
        VALIDATION_KEYS,
        "warning",
        1,
        checks.train_val_divergence,
        "the training reward rises while validation falls: the policy learns the reward, not the task "
        "(reward hacking, overfitting to the training prompts)",
        "the samples of high-reward rollouts (do they solve the task?), val-core against critic/score/mean",
        "fix the reward's loophole (format, length, answer extraction), keep the best validation checkpoint, "
        "add data or regularise (KL)",
        "Validation",
        extra=SCORE,
    ),
    Detector(
        "throughput_drop",
        ("perf/throughput",),
        "warning",
        3,
        checks.falls_from_level("throughput_ratio", "throughput_mads", "entropy_window"),
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
        checks.mismatch,
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
    "actor/entropy_loss",
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
    checks.never,  # the walk is RunHealth's
    "a loss, gradient norm, reward or entropy is NaN or Inf: the run is broken from this step on",
    "the step's losses and grad norm; the batch (empty responses, zero-length masks); mixed precision",
    "resume from the last checkpoint, lower the learning rate, check loss scaling and bf16 / fp16 settings",
    "Training: what to check first",
)
STALL = Detector(
    "stall",
    STEP_TIME_KEYS,
    "critical",
    1,
    checks.never,  # the walk is StepTimes'
    "a step took many times the run's own step time: a hang (NCCL, a rollout server, the data loader) or a dead job",
    "the RL state timeline's last spans: which phase never ended; the trainer's logs",
    "take a stack dump (py-spy) of the trainer and the workers, check the rollout servers and the network",
    "RL state timeline",
    online=False,  # online: RLInsightTrainingStalled
)
ALL = (NON_FINITE, *DETECTORS, STALL)
BY_NAME = {d.name: d for d in ALL}


def series_name(key: str) -> str:
    return metric_name(PREFIX, key)


_VERL_KEYS = {series_name(k): k for d in ALL for k in (*d.keys, *d.extra) if not k.endswith("/")}
_FAMILIES = [(k, series_name(k)) for k in VALIDATION_KEYS]


def _family_member(prefix: str, names: Iterable[str]) -> str | None:
    """The validation series of a family to follow: a mean of a reward, score or accuracy first."""
    found = sorted(n for n in names if n.startswith(prefix) and any(w in n for w in ("reward", "score", "acc")))
    means = [n for n in found if "mean" in n]
    return (means or found)[0] if found else None


def pick(
    detector: Detector, names: Iterable[str] | Mapping[str, float], better_than: int | None = None
) -> tuple[int, str] | None:
    """(rank, series name) of the key the detector reads among ``names`` (series names): its first
    key present (rank 0 is its first key), only of a rank below ``better_than``; for a family
    (``val-core/``) its first reward, score or accuracy mean."""
    present = names if isinstance(names, Mapping) else set(names)
    for rank, key in enumerate(detector.keys[:better_than]):
        if key.endswith("/"):
            member = _family_member(series_name(key), present)
            if member is not None:
                return rank, member
        elif series_name(key) in present:
            return rank, series_name(key)
    return None


def key_of(detector: Detector, names: Sequence[str] | Mapping[str, float]) -> str | None:
    found = pick(detector, names)
    return None if found is None else found[1]


def verl_key(name: str) -> str:
    """The verl key behind a series name where a detector names it, else the series name."""
    return _VERL_KEYS.get(name, name)


def _trim(series: list[tuple[int, float]], keep: int, since: int | None) -> None:
    if since is not None and series and series[0][0] < since:
        series[:] = [(s, v) for s, v in series if s >= since]
    if len(series) > keep:
        del series[: len(series) - keep]


class Streak:
    """A detector's walk over one run, one step at a time: the online monitor and the offline
    command both feed it through ``RunHealth``, so both find the same steps."""

    def __init__(self, detector: Detector, params: Mapping[str, float], keep: int = KEEP) -> None:
        self.detector, self.params, self.keep = detector, params, keep
        self.metric: str | None = None
        self.rank = len(detector.keys)
        self.series: list[tuple[int, float]] = []
        self.extra: dict[str, list[tuple[int, float]]] = {k: [] for k in detector.extra}
        self.run: list[tuple[int, Check]] = []  # the current streak of flagged steps
        self.findings: Findings = []
        self.active = False  # the newest step belongs to a finding
        self.resets: list[int] = []
        self.needed = int(params["plateau_sustain"]) if detector.name == "reward_plateau" else detector.sustain
        if detector.name == "no_learning_signal":
            self.needed = int(params["signal_sustain"])

    def reset_baseline(self, step: int) -> None:
        self.resets = sorted({*self.resets, step})

    def _since(self, step: int) -> int | None:
        done = [r for r in self.resets if r <= step]
        return done[-1] if done else None

    def add(self, step: int, metrics: Mapping[str, float]) -> Check | None:
        """The step's values (series name -> value); the check of the step where it has the metric."""
        since = self._since(step)
        for key, values in self.extra.items():
            x = metrics.get(series_name(key))
            if x is not None and math.isfinite(x) and (not values or step > values[-1][0]):
                values.append((step, x))
            _trim(values, min(self.keep, self.detector.extra_keep), since)
        found = pick(self.detector, metrics, self.rank) if self.rank > 0 else None  # a key it prefers?
        if found is not None and found[0] < self.rank:  # the run logs a key the detector prefers: follow it
            self.rank, self.metric, self.series, self.run, self.active = found[0], found[1], [], [], False
        if self.metric is None:
            return None
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(value) or (self.series and step <= self.series[-1][0]):
            return None
        self.series.append((step, value))
        _trim(self.series, self.keep, since)
        if since is not None and self.run and self.run[0][0] < since:
            self.run, self.active = [], False
        check = self.detector.test(self.series, self.extra, self.params)
        if check is None or not check.flagged:
            self.run, self.active = [], False
            return check
        self.run.append((step, check))
        if len(self.run) >= self.needed:
            self._found(step)
        return check

    def _found(self, step: int) -> None:
        first_step, first = self.run[0][1].since or self.run[0][0], self.run[0][1]
        severity = self.detector.severity
        if all(c.critical for _, c in self.run):
            severity = "critical"
        latest = self.findings[-1] if self.findings else None
        if latest is not None and (self.active or first_step <= latest.last_step + 1):
            latest.last_step, latest.severity = step, severity  # the evidence stays the first step's
        else:
            self.findings.append(
                Finding(
                    self.detector.name,
                    severity,
                    first_step,
                    step,
                    verl_key(self.metric or ""),
                    f"step {self.run[0][0]}: {first.evidence}",
                    first.value,
                    first.baseline,
                    self.detector.panel,
                    found_at=step,
                )
            )
        self.active = True


class StepTimes:
    """How long each step took (``timing_s/step``, else the time between two steps) against the
    run's own median: a step of ``stall_ratio`` x the median, and at least ``stall_s``, is a stall."""

    def __init__(self, params: Mapping[str, float], keep: int = KEEP) -> None:
        self.params, self.keep = params, keep
        self.durations: list[tuple[int, float]] = []
        self.last: tuple[int, float] | None = None  # (step, time) of the newest step with a time
        self.findings: Findings = []
        self.resets: list[int] = []

    def limit(self) -> float | None:
        """The longest a step may take now; None before the run has a step time."""
        if not self.durations:
            return None
        window = [d for _, d in self.durations[-int(self.params["window"]) :]]
        return max(self.params["stall_ratio"] * statistics.median(window), self.params["stall_s"])

    def median(self) -> float | None:
        window = [d for _, d in self.durations[-int(self.params["window"]) :]]
        return statistics.median(window) if window else None

    def add(self, step: int, metrics: Mapping[str, float], at: float | None) -> float | None:
        """The step's duration, where known."""
        if self.last is not None and step <= self.last[0]:
            return None
        duration = next(
            (x for k in STEP_TIME_KEYS if (x := metrics.get(series_name(k))) is not None and math.isfinite(x)), None
        )
        if duration is None and at is not None and self.last is not None:
            duration = at - self.last[1]
        done = [r for r in self.resets if r <= step]
        _trim(self.durations, self.keep, done[-1] if done else None)
        if at is not None:
            self.last = (step, at)
        if duration is None or duration < 0:
            return None
        limit = self.limit()
        if limit is not None and duration > limit:
            self.findings.append(
                Finding(
                    "stall",
                    "critical",
                    step,
                    step,
                    "step time",
                    f"step {step} took {duration:.0f} s, {duration / (self.median() or 1):.1f}x the run's median "
                    f"step ({fmt(self.median())} s; a stall is over {limit:.0f} s)",
                    duration,
                    self.median(),
                    STALL.panel,
                    found_at=step,
                )
            )
        self.durations.append((step, duration))
        return duration

    def open_gap(self, now: float) -> Finding | None:
        """A run not finished whose last step is longer ago than its limit."""
        limit = self.limit()
        if limit is None or self.last is None or now - self.last[1] <= limit:
            return None
        step, at = self.last
        return Finding(
            "stall",
            "critical",
            step,
            step,
            "step time",
            f"no step for {now - at:.0f} s after step {step} (the run's median step: {fmt(self.median())} s)",
            now - at,
            self.median(),
            STALL.panel,
            found_at=step,
        )


@dataclass
class Said:
    """What one detector said of one step (online, it becomes the ``rl_insight_health_*`` series)."""

    detector: str
    metric: str
    finding: bool
    value: float | None
    baseline: float | None


class RunHealth:
    """Every detector's walk over one run."""

    def __init__(self, params: Mapping[str, float], keep: int = KEEP) -> None:
        self.params = params
        self.streaks = [Streak(d, params, keep) for d in DETECTORS]
        self.non_finite: Findings = []
        self.times = StepTimes(params, keep)

    def reset_baseline(self, step: int) -> None:
        """Every detector's baseline starts again at ``step``: the steps before it are not baseline
        once the run is there (a finding under way ends)."""
        for streak in self.streaks:
            streak.reset_baseline(step)
        self.times.resets = sorted({*self.times.resets, step})

    def add(self, step: int, metrics: Mapping[str, float], at: float | None = None) -> list[Said]:
        said: list[Said] = []
        broken = [verl_key(n) for n in _NON_FINITE_NAMES if n in metrics and not math.isfinite(metrics[n])]
        if broken:
            latest = self.non_finite[-1] if self.non_finite else None
            if latest is not None and latest.last_step == step - 1:
                latest.last_step = step
            else:
                what = ", ".join(f"{k} = {metrics[series_name(k)]}" for k in broken)
                self.non_finite.append(
                    Finding(
                        "non_finite", "critical", step, step, broken[0], what, panel=NON_FINITE.panel, found_at=step
                    )
                )
        if broken or any(n in metrics for n in _NON_FINITE_NAMES):
            said.append(Said("non_finite", "losses", bool(broken), None, None))
        for streak in self.streaks:
            check = streak.add(step, metrics)
            if check is not None:
                said.append(
                    Said(
                        streak.detector.name, verl_key(streak.metric or ""), streak.active, check.value, check.baseline
                    )
                )
        duration = self.times.add(step, metrics, at)
        if duration is not None:
            said.append(Said("stall", "step time", False, duration, self.times.median()))
        return said

    def findings(self, finished: bool = True, now: float = 0.0) -> Findings:
        found = [*self.non_finite, *(f for s in self.streaks for f in s.findings), *self.times.findings]
        gap = None if finished else self.times.open_gap(now)
        return ranked([*found, *([gap] if gap else [])])


_NON_FINITE_NAMES = tuple(series_name(k) for k in NON_FINITE_KEYS)


def ranked(findings: Iterable[Finding]) -> Findings:
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.first_step, f.detector))


def steps_of(history: Mapping[str, Series]) -> list[tuple[int, dict[str, float]]]:
    """A run's history ({series name: [(step, value)]}) as its steps in order, each with its values."""
    by_step: dict[int, dict[str, float]] = {}
    for name, values in history.items():
        for step, value in values:
            by_step.setdefault(step, {})[name] = value
    return sorted(by_step.items())


def diagnose(
    history: Mapping[str, Series],
    step_times: Series = (),
    finished: bool = True,
    now: float = 0.0,
    params: Mapping[str, float] | None = None,
    resets: Sequence[int] = (),
) -> Findings:
    """Every finding in a run's history ({series name: [(step, value)]}, values may be NaN), the
    most severe first. ``step_times``: (step, time it was logged); ``resets``: steps at which every
    detector's baseline starts again."""
    walk = RunHealth({**DEFAULTS, **(params or {})})
    for step in resets:
        walk.reset_baseline(step)
    at: dict[int, float] = dict(step_times)
    steps = dict(steps_of(history))
    for step in sorted(set(steps) | set(at)):  # a step with a time and no scalar here still has a time
        walk.add(step, steps.get(step, {}), at.get(step))
    return walk.findings(finished, now)
