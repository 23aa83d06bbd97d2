"""The failure modes the health walk looks for (``detectors.py``), each defined once: the verl keys
it reads, its test (``checks.py``), how long a streak must be, and what a person reads in a finding
(what it means, where to look first, what people usually try, the dashboard panel). The server's
``RLInsight<Mode>`` alert rules are made from this list (``server/managed/alert_rules.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from verl_rl_insight.contract.naming import METRIC_PREFIX, metric_name
from verl_rl_insight.contract.verl_keys import (
    GRAD_NORM,
    KL_LOSS,
    RESPONSE_LENGTH_CLIP_RATIO,
    RESPONSE_LENGTH_MEAN,
    REWARD_KL_PENALTY,
    ROLLOUT_PROBS_DIFF_MEAN,
    THROUGHPUT,
)
from verl_rl_insight.server.health import checks, leading, trends, validation
from verl_rl_insight.server.health.checks import Params, Rise, Test
from verl_rl_insight.server.health.trends import any_of, trend
from verl_rl_insight.server.health.verl_keys import (
    ENTROPY,
    GROUP_KEYS,
    NON_FINITE_KEYS,
    SCORE,
    SIGNAL_KEYS,
    STEP_TIME_KEYS,
    ZERO_VARIANCE,
)

PREFIX = METRIC_PREFIX  # the trainer scalars' series (plugin trainer_metrics' default prefix)
VALIDATION_KEYS = validation.FAMILIES  # verl's, then older verl's and agents' validation keys (families)
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
    sustain_setting: Callable[[Params], int] | None = None  # the setting that says ``sustain`` instead, if one does

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
    signals: tuple[str, ...] = ()  # what moved, where the detector reads several signals (joint_break)

    def as_json(self) -> dict[str, JsonValue]:
        return asdict(self)


DETECTORS: tuple[Detector, ...] = (
    Detector(
        "joint_break",
        SCORE,
        "warning",
        2,
        leading.joint_break,
        "several of a collapse's leading signals broke together while the score did not rise: the agent "
        "stops calling its tools, responses grow or shrink, entropy moves, more responses are cut, the KL climbs",
        "the signals it names next to the score, the samples of the newest steps (tool calls, length, repetition)",
        "check the tool environment and the reward of tool use (a bonus or penalty for calls), the KL term's "
        "weight, the learning rate; for responses cut at the limit, max_response_length; resume from before it began",
        "Training: what to check first",
        extra=leading.KEYS,
    ),
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
        sustain_setting=lambda p: p.signal_sustain,
    ),
    Detector(
        "zero_variance_groups",
        (ZERO_VARIANCE, *SCORE),  # a run without plugin group_stats: its scores (critic/score/max = min)
        "warning",
        5,
        checks.zero_variance,
        "most GRPO groups carry no gradient: every response of a prompt got the same reward (all solved or "
        "all failed), so the step learns from the few groups left",
        "rl_insight/group/zero_variance_share with solve_all_share and solve_none_share (Training signal row); "
        "critic/score/mean; the reward function's output on a few samples",
        "mostly all solved: raise the difficulty or drop solved prompts (DAPO's dynamic sampling, "
        "algorithm.filter_groups.enable=True), raise rollout.n; mostly none solved: easier data, check the "
        "reward function and the answer format",
        "Training signal: groups, advantages, percentiles",
        extra=GROUP_KEYS,
        extra_keep=1,  # the step's own values
        sustain_setting=lambda p: p.zero_variance_sustain,
    ),
    Detector(
        "entropy_collapse",
        ENTROPY,
        "critical",
        3,
        any_of(
            checks.falls_from_level(lambda p: checks.Fall(p.entropy_collapse_share, p.entropy_mads, p.entropy_window)),
            trend(-1, lambda p: p.trend_entropy_fall, consequence=True),
        ),
        "the policy's entropy collapsed: it stops exploring and samples nearly one answer",
        "actor/entropy next to score and response length; the clip fraction",
        "raise the entropy coefficient or the temperature, lower the learning rate, use clip-higher (DAPO), "
        "resume from a checkpoint before the collapse",
        "Training: what to check first",
        extra=SCORE,  # the slow trend is critical where the score falls with it
    ),
    Detector(
        "entropy_blowup",
        ENTROPY,
        "critical",
        3,
        any_of(
            checks.entropy_blowup,
            trend(1, lambda p: p.trend_entropy_rise, lambda p: p.trend_entropy_abs, consequence=True),
        ),
        "the policy's entropy is climbing far above its level: it samples noise (gibberish, mixed languages)",
        "actor/entropy with response length and the samples; grad norm and KL",
        "lower the learning rate, lower the temperature, check the log-prob mismatch and the weight sync, "
        "resume from a checkpoint before the climb",
        "Training: what to check first",
        extra=SCORE,
    ),
    Detector(
        "reward_collapse",
        SCORE,
        "critical",
        3,
        any_of(
            checks.falls_from_level(lambda p: checks.Fall(p.reward_collapse_share, p.reward_mads, p.reward_window)),
            trend(-1, lambda p: p.trend_reward_fall, severity="critical"),  # the fall is the consequence itself
        ),
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
        sustain_setting=lambda p: p.plateau_sustain,
    ),
    Detector(
        "kl_blowup",
        (KL_LOSS, REWARD_KL_PENALTY, "critic/kl"),  # critic/kl: older verl's reward penalty
        "critical",
        2,
        any_of(
            checks.rises_from_level(
                lambda p: Rise(p.kl_ratio, p.kl_mads, p.window, p.kl_min_history, at_least=p.kl_rise)
            ),
            trend(1, lambda p: p.trend_kl_rise, lambda p: p.trend_kl_abs),
        ),
        "the policy is running away from the reference policy it is held to (the KL loss or the reward's KL penalty)",
        "actor/kl_loss or actor/reward_kl_penalty by step, grad norm, the clip fraction",
        "lower the learning rate, raise the KL coefficient, tighten the clip range, check the log-prob mismatch",
        "Actor",
    ),
    Detector(
        "grad_norm_spike",
        (GRAD_NORM,),
        "warning",
        1,
        any_of(checks.persistent_spike, trend(1, lambda p: p.trend_grad_rise)),
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
        any_of(
            checks.rises_from_level(lambda p: Rise(p.clip_ratio, p.clip_mads, p.window, floor=p.clip_min)),
            trend(1, lambda p: p.trend_clip_rise, lambda p: p.clip_min),
        ),
        "the PPO clip fraction is running away: updates are too large for the trust region",
        "actor/pg_clipfrac with KL and grad norm",
        "lower the learning rate or the number of PPO epochs / mini-batches, check the log-prob mismatch",
        "Actor",
    ),
    Detector(
        "response_length_explosion",
        (RESPONSE_LENGTH_MEAN,),
        "warning",
        3,
        any_of(
            checks.rises_from_level(lambda p: Rise(p.length_ratio, p.length_mads, p.length_window)),
            trend(1, lambda p: p.trend_length_rise, consequence=True),
        ),
        "responses are growing far beyond their recent length: repetition loops or reward hacking by length",
        "response_length/mean and clip_ratio, the samples of the longest rollouts",
        "add a length penalty or overlong reward shaping, check for repetition, cap max_response_length",
        "Rollout",
        extra=SCORE,
    ),
    Detector(
        "response_length_collapse",
        (RESPONSE_LENGTH_MEAN,),
        "warning",
        3,
        any_of(
            checks.falls_from_level(
                lambda p: checks.Fall(p.length_collapse_share, p.length_mads_collapse, p.entropy_window)
            ),
            trend(-1, lambda p: p.trend_length_fall, consequence=True),
        ),
        "responses are getting far shorter than they were: the policy found a short answer the reward "
        "accepts, or generation breaks off (an EOS or stop-token problem)",
        "response_length/mean and min, the samples of the shortest rollouts, the score",
        "check the reward for a short-answer loophole and the stop tokens; add a minimum-length or format "
        "reward; resume from before the fall",
        "Rollout",
        extra=SCORE,
    ),
    Detector(
        "response_truncation",
        (RESPONSE_LENGTH_CLIP_RATIO,),
        "warning",
        3,
        any_of(
            checks.rising_share,
            trend(1, lambda p: p.trend_truncation_share, lambda p: p.trend_truncation_rise),
            trends.level_at_most(lambda p: p.truncation_level, lambda p: p.truncation_level_steps),
        ),
        "more and more responses hit the length limit and are cut: their rewards and advantages are wrong",
        "response_length/clip_ratio and max; the truncated samples (repetition?)",
        "raise max_response_length, use overlong filtering / soft punishment (DAPO), check for repetition",
        "Rollout",
    ),
    Detector(
        "validation_drop",
        VALIDATION_KEYS,
        "warning",
        1,
        validation.validation_drop,
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
        validation.train_val_divergence,
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
        (THROUGHPUT,),
        "warning",
        3,
        any_of(
            checks.falls_from_level(lambda p: checks.Fall(p.throughput_ratio, p.throughput_mads, p.entropy_window)),
            trend(-1, lambda p: p.trend_throughput_fall, mads_z=trends.throughput_mads_z),
        ),
        "throughput fell far below the run's own level: a slow node, memory pressure or a longer tail",
        "the RL state timeline (long tail, idle), GPU utilisation and memory, the engine panels",
        "find the slow replica or node, check preemption and memory, cap response length",
        "RL state timeline",
    ),
    Detector(
        "logprob_mismatch",
        (ROLLOUT_PROBS_DIFF_MEAN,),
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


def pick(
    detector: Detector,
    names: Iterable[str] | Mapping[str, float],
    better_than: int | None = None,
    keys: Sequence[str] | None = None,
) -> tuple[int, str] | None:
    """(rank, series name) of the key the detector reads among ``names`` (series names): its first
    key present (rank 0 is its first key), only of a rank below ``better_than``; for a family
    (``val-core/``) its first reward, score or accuracy mean."""
    present = names if isinstance(names, Mapping) else set(names)
    for rank, key in enumerate((detector.keys if keys is None else keys)[:better_than]):
        if key.endswith("/"):
            member = validation.member(series_name(key), present)
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
