"""The trainer's metric keys, grouped the way the dashboards show them.

Where the keys come from: string literals shaped ``group/name`` in the installed verl's source
(the groups below only: the rest of those literals are paths and model names), the keys verl
builds at run time and never spells out (``RUNTIME_KEYS``: ``rename_dict(output, "actor/")``,
f-strings), and this package's own log-prob mismatch keys. Families whose member names are
made at run time (one per phase, per data source, per correction mode) are matched by pattern.
"""

import re
from pathlib import Path

from verl_rl_insight.contract.verl_keys import CRITIC_GRAD_NORM, KL_LOSS, THROUGHPUT, TIME_PER_STEP
from verl_rl_insight.dashboards.async_keys import ASYNC_KEYS

# key prefix (one or two segments; the longest that matches wins) -> (row title, when it is
# logged: None = every PPO step, else the condition)
GROUPS = {
    "actor": ("Actor", None),
    "critic": ("Critic, rewards and advantages", None),
    "perf": ("Performance", None),
    "timing_s": ("Time per phase", None),
    "timing_per_token_ms": ("Time per token", None),
    "response_length": ("Lengths", None),
    "response_length_non_aborted": ("Lengths", None),
    "prompt_length": ("Lengths", None),
    "global_seqlen": ("Lengths", None),
    "response": ("Lengths", None),
    "training": ("Log-prob mismatch", None),
    "training/filter_groups": ("Dynamic sampling (filter groups)", "with dynamic sampling (filter_groups) on"),
    "training/off_policy": ("Off-policy samples", "in off-policy / async trainers"),
    "training/rollout_failure": ("Off-policy samples", "in off-policy / async trainers"),
    "training/num_turns": ("Multi-turn and tools", "in multi-turn / tool-calling rollouts"),
    "rollout_corr": ("Rollout correction", "with algorithm.rollout_correction on"),
    "num_turns": ("Multi-turn and tools", "in multi-turn / tool-calling rollouts"),
    "tool_call_counts": ("Multi-turn and tools", "in multi-turn / tool-calling rollouts"),
    "timing_s/agent_loop": ("Agent loop", "with the agent loop rollout"),
    "agent_loop": ("Agent loop", "with the agent loop rollout"),
    "val-core": ("Validation", "at validation steps, every trainer.test_freq"),
    "val-aux": ("Validation", "at validation steps, every trainer.test_freq"),
    "validation": ("Validation", "at validation steps, every trainer.test_freq"),
    "rollout": ("Rollout (MoE routing, speculative decoding)", "with MoE routing replay or speculative decoding"),
    "fully_async": ("Fully async trainer", "in the fully async trainer"),
    "separate_async": ("Separate async trainer", "in the separate async trainer"),
    "dynamic_resource": ("Dynamic resources", "with dynamic resource allocation"),
    "checkpoint_engine": ("Checkpoint engine", "with the checkpoint engine for weight sync"),
    "distillation": ("Distillation", "in distillation runs"),
    "gdpo": ("GDPO reward components", "with the GDPO advantage estimator"),
    "variance_proxy": ("Variance proxy", "with the variance proxy metrics on"),
    "rl_insight": ("Batch statistics (plugin group_stats)", None),
}
# Groups of this package's own keys (not in verl's source): their run-time families are this package's.
OWN_GROUPS = {"rl_insight"}
# Literal in verl's source, never logged as a scalar under that name: renamed first (perf/mfu/actor, ...),
# or sent to wandb alone, as a table (DAPO's DapoFilteredRewardTableLogger: filtered_reward_counts).
NOT_LOGGED = {
    "actor/mfu",
    "critic/mfu",
    "training/global_step",
    "rollout/moe",
    "training/filter_groups/filtered_reward_counts",
}
# Keys verl builds at run time (a prefix joined to a worker's metric name): not literal in its source.
RUNTIME_KEYS = {
    # utils/seqlen_balancing.py log_seqlen_unbalance(prefix="global_seqlen"): every step
    *(f"global_seqlen/{s}" for s in ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")),
    # trainer/ppo/v1/replay_buffer.py: f"{prefix}/off_policy/..." with prefix training or validation
    *(
        f"{p}/off_policy/{k}"
        for p in ("training", "validation")
        for k in ("evicted_samples", *(f"evicted_samples_staleness/{s}" for s in ("mean", "max", "min")))
    ),
    "actor/lr",
    KL_LOSS,
    # workers/engine_workers.py: the engine worker's loss and memory figures, renamed by rename_dict(..., "actor/")
    "actor/loss",
    *(f"actor/perf/{k}" for k in ("max_memory_allocated_gb", "max_memory_reserved_gb", "cpu_memory_used_gb")),
    "actor/kl_coef",
    "critic/lr",
    CRITIC_GRAD_NORM,
    # experimental/fully_async_policy: f"fully_async/{key}" of the rollouter's statistics and processing times
    *ASYNC_KEYS,
}
# Families whose members are named at run time: (group, title, regex of the key, unit)
PATTERN_FAMILIES = [
    ("timing_s", "Time per phase", r"timing_s/[A-Za-z0-9_]+", "s"),
    ("timing_per_token_ms", "Time per token per phase", r"timing_per_token_ms/[A-Za-z0-9_]+", "ms"),
    ("rollout_corr", "Perplexities (training vs rollout)", r"rollout_corr/(training|rollout)_(log_)?ppl", "short"),
    ("rollout_corr", "Perplexity difference and ratio", r"rollout_corr/(log_ppl_[a-z_]+|ppl_ratio)", "short"),
    ("rollout_corr", "KL and chi-square (rollout vs training)", r"rollout_corr/(kl|k3_kl|chi2_[a-z]+)", "short"),
    ("rollout_corr", "Importance-sampling weights", r"rollout_corr/rollout_is_[A-Za-z0-9_]+", "short"),
    ("rollout_corr", "Rejection sampling", r"rollout_corr/rollout_rs_[A-Za-z0-9_]+", "short"),
    ("val-core", "Validation scores (per data source)", r"val-core/.+", "short"),
    # metric_utils._compute_rollout_moe_load_balance_metrics_from_counts: one key per MoE layer
    ("rollout", "MoE load imbalance per layer", r"rollout/moe/(max|min|avg)_vio/layer_[0-9]+", "short"),
    ("rollout", "MoE load imbalance over the layers", r"rollout/moe/(max|min|avg)_vio/(max|avg)", "short"),
    ("gdpo", "GDPO reward components", r"gdpo/.+", "short"),
    ("val-aux", "Validation, auxiliary", r"val-aux/.+", "short"),
    # plugin group_stats: one key per data source (the first 32 of a run, then "other")
    ("rl_insight", "Score mean per data source, by key", r"rl_insight/source/.+/score/mean", "short"),
    (
        "rl_insight",
        "Response length mean per data source, by key",
        r"rl_insight/source/.+/response_length/mean",
        "short",
    ),
    ("rl_insight", "Clip ratio per data source, by key", r"rl_insight/source/.+/clip_ratio", "short"),
    ("rl_insight", "Responses per data source, by key", r"rl_insight/source/.+/count", "short"),
]
STATS = {"mean", "max", "min", "std", "minmax_diff", "p10", "p50", "p90"}
FAMILIES = [
    (re.compile(r"perf/mfu/.+"), "perf/mfu"),
    (re.compile(r"(actor/)?perf/(max_memory_\w+|cpu_memory_used_gb)"), "perf/memory"),
]
FRACTION = re.compile(
    r"(clipfrac|clip_ratio|aborted_ratio|_fraction|fraction_|frac_gt|_share|mfu|idle_ratio|"
    r"utilization|partial_ratio|overlap_ratio|changed_ratio|accept_rate)"
)
KEY = re.compile(r"[\"']([a-zA-Z_][\w\-]*(?:/[\w\-@.]+)+)[\"']")


def _verl_sources() -> list[str]:
    import verl

    return [path.read_text(errors="replace") for path in Path(verl.__file__).parent.rglob("*.py")]


def verl_literals() -> set[str]:
    """Every string literal shaped like ``group/name`` in the installed verl's source."""
    found = set()
    for text in _verl_sources():
        found.update(KEY.findall(text))
    return found


def families_in_verl() -> list[tuple[str, str, str, str]]:
    """The PATTERN_FAMILIES whose group verl's source names (``f"rollout_corr/{key}"``, ``"val-core"``),
    and those of this package's own groups: their members are named at run time, so only the group
    can be checked."""
    texts = _verl_sources()
    return [
        family
        for family in PATTERN_FAMILIES
        if family[0] in OWN_GROUPS or any(f'"{family[0]}' in text or f"'{family[0]}" in text for text in texts)
    ]


def own_keys() -> set[str]:
    """The keys this package's plugins add (the log-prob mismatch extras, the batch statistics)."""
    from verl_rl_insight.trainer.plugins import group_stats, probs_diff

    return set(probs_diff.KEYS) | set(group_stats.KEYS)


def group_of(key: str) -> str | None:
    """The GROUPS prefix ``key`` belongs to (two segments before one), or None."""
    parts = key.split("/")
    for prefix in ("/".join(parts[:2]), parts[0]):
        if prefix in GROUPS and prefix != key:
            return prefix
    return None


def trainer_keys() -> set[str]:
    """The keys the dashboards give a panel of their own: verl's, by group, and this package's."""
    keys = {k for k in verl_literals() | own_keys() | RUNTIME_KEYS if group_of(k) and k not in NOT_LOGGED}
    patterns = [re.compile(regex) for _, _, regex, _ in PATTERN_FAMILIES]
    return {k for k in keys if not any(p.fullmatch(k) for p in patterns)}


def family_of(key: str) -> str:
    """``critic/score/mean`` -> ``critic/score``; ``perf/mfu/actor`` -> ``perf/mfu``; a key whose
    last part is no statistic is a family of its own."""
    for pattern, family in FAMILIES:
        if pattern.fullmatch(key):
            return family
    head, _, last = key.rpartition("/")
    return head if head and last in STATS else key


AGENT_LOOP_SECONDS = re.compile(r"agent_loop/(slowest/)?(generate_sequences|tool_calls|compute_score)(/\w+)?")


def unit_of(key: str) -> str:
    if AGENT_LOOP_SECONDS.fullmatch(key):  # verl's agent loop times each sample's phases in seconds
        return "s"
    if key.startswith("perf/") and key.endswith("_gb"):  # verl divides by 1024**3: GiB
        return "gbytes"
    if key.endswith("_mbytes"):  # checkpoint_engine/payload_mbytes: bytes / (1 << 20), MiB
        return "mbytes"
    if key.startswith("timing_s/") or key == TIME_PER_STEP or key.endswith(("_time", "time_s", "_seconds")):
        return "s"
    if key.startswith("timing_per_token_ms/"):
        return "ms"
    if key.endswith("_gb"):
        return "decgbytes"
    if key == THROUGHPUT:
        return "tokens/s"
    if FRACTION.search(key):
        return "percentunit"
    return "short"


def is_fraction(key: str) -> bool:
    return unit_of(key) == "percentunit"
