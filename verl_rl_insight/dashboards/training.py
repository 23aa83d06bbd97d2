"""The trainer's rows: what a person checks first, then every key verl logs, a collapsed row per group.

Every key of dashboards/keys.py has a panel of its family (``critic/score/{mean,max,min}`` share
one); families named at run time are matched by pattern; a last panel shows any key that has
no panel of its own (a key a newer verl adds), so nothing logged is ever out of sight.
"""

import re
from collections import defaultdict

from verl_rl_insight.contract.verl_keys import (
    CRITIC_GRAD_NORM,
    ENTROPY,
    GRAD_NORM,
    KL_LOSS,
    PG_LOSS,
    RESPONSE_LENGTH_CLIP_RATIO,
    RESPONSE_LENGTH_MEAN,
    REWARD_KL_PENALTY,
    REWARDS_MEAN,
    ROLLOUT_PROBS_DIFF_MEAN,
    SCORE_MEAN,
    THROUGHPUT,
    TIME_PER_STEP,
)
from verl_rl_insight.dashboards import keys as catalogue
from verl_rl_insight.dashboards.attempts import EXP, per_attempt, with_key
from verl_rl_insight.dashboards.panels import RUN, Layout, M, Panel, step_axis, timeseries


def metric(key: str) -> str:
    from verl_rl_insight.contract.naming import metric_name

    return metric_name(M, key)


def series(key: str, legend: str | None = None) -> tuple[str, str]:
    return per_attempt(f"{metric(key)}{{{RUN}}}"), f"{legend or key} {EXP}"


def overview_rows(layout: Layout) -> None:
    layout.row("Training: what to check first")
    layout.add(
        timeseries(
            "Score and reward",
            [series(SCORE_MEAN, "score mean"), series(REWARDS_MEAN, "reward mean")],
        )
    )
    layout.add(step_axis("Score", metric(SCORE_MEAN)[len(M) :]))
    layout.add(
        timeseries(
            "KL",
            [
                series(KL_LOSS, "KL loss"),
                series("actor/ppo_kl", "PPO KL (old vs new)"),
                series(REWARD_KL_PENALTY, "reward KL penalty"),
            ],
            description="KL loss (use_kl_loss) or the KL penalty in the reward: whichever the run uses",
        )
    )
    layout.add(timeseries("Entropy", [series(ENTROPY, "entropy")]))
    layout.add(timeseries("Global step", [(per_attempt(f"{M}training_global_step{{{RUN}}}"), EXP)]), w=12, h=6)
    layout.add(
        timeseries(
            "Time since the last step",
            [(f"time() - max by (experiment_name) ({M}training_step_time_seconds{{{RUN}}})", "{{experiment_name}}")],
            unit="s",
            description="now minus the trainer's time of its last logged step: it climbs while a step runs and "
            "drops at each new one; a line that keeps climbing is a stall (RLInsightTrainingStalled)",
        ),
        w=12,
        h=6,
    )
    layout.add(timeseries("Policy loss", [series(PG_LOSS, "pg_loss")]), w=8)
    layout.add(
        timeseries(
            "Clip fraction",
            [series("actor/pg_clipfrac", "pg_clipfrac"), series("actor/pg_clipfrac_lower", "pg_clipfrac_lower")],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(timeseries("Grad norm", [series(GRAD_NORM, "actor"), series(CRITIC_GRAD_NORM, "critic")]), w=8)
    layout.add(
        timeseries(
            "Response length",
            [
                series(RESPONSE_LENGTH_MEAN, "mean"),
                series("response_length/max", "max"),
                series("response_length/min", "min"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Response clipped / aborted",
            [
                series(RESPONSE_LENGTH_CLIP_RATIO, "clipped at max length"),
                series("response/aborted_ratio", "aborted"),
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(timeseries("Time per step", [series(TIME_PER_STEP, "step")], unit="s"), w=8)
    layout.add(timeseries("Throughput", [series(THROUGHPUT, "tokens/s per GPU")], unit="tokens/s"), w=8)
    layout.add(
        timeseries("MFU", [series("perf/mfu/actor", "actor"), series("perf/mfu/critic", "critic")], unit="percentunit"),
        w=8,
    )
    layout.add(
        timeseries(
            "Train / inference log-prob mismatch",
            [
                series(ROLLOUT_PROBS_DIFF_MEAN, "probs diff mean"),
                series("training/rollout_probs_diff_max", "probs diff max"),
            ],
            thresholds=[(0.005, "orange"), (0.01, "red")],
            description="mean < 0.005 normal; sustained > 0.01: rollout engine precision problem",
        ),
        w=8,
    )


def family_panels() -> dict[str, tuple[str | None, list[Panel]]]:
    """{row title: (condition, [panel])}: a panel per family of the catalogue, in row order."""
    families = defaultdict(list)
    for key in sorted(catalogue.trainer_keys()):
        families[(catalogue.group_of(key), catalogue.family_of(key))].append(key)
    rows: dict[str, tuple[str | None, list[Panel]]] = {}
    for group, (title, condition) in catalogue.GROUPS.items():
        rows.setdefault(title, (condition, []))
        for (family_group, family), members in sorted(families.items()):
            if family_group != group:
                continue
            units = {catalogue.unit_of(k) for k in members}
            unit = units.pop() if len(units) == 1 else "short"
            legends = [
                k[len(family) + 1 :] if k != family and k.startswith(family + "/") else k.rsplit("/", 1)[-1]
                for k in members
            ]
            rows[title][1].append(timeseries(family, [series(k, leg) for k, leg in zip(members, legends)], unit=unit))
        for pattern_group, name, regex, unit in catalogue.PATTERN_FAMILIES:
            if pattern_group == group:
                selector = promql_string(metric_regex(regex))
                rows[title][1].append(
                    timeseries(
                        name, [(per_attempt(with_key(f"{{__name__=~{selector},{RUN}}}")), "{{key}} " + EXP)], unit=unit
                    )
                )
    return rows


def promql_string(text: str) -> str:
    r"""``text`` as a double-quoted PromQL string: a backslash doubled (``"\\d"`` in a query is the
    regex ``\d``; a lone ``"\d"`` is refused by Prometheus' parser)."""
    from verl_rl_insight.contract.naming import escape_label_value

    return f'"{escape_label_value(text)}"'


def metric_regex(key_regex: str) -> str:
    """A key regex as a regex of metric names (``/`` and ``-`` become ``_``)."""
    return M + key_regex.replace("/", "_").replace("val-", "val_")


def key_rows(layout: Layout) -> dict[str, str]:
    """The collapsed rows of every key; returns {row title: condition} for the rows logged only
    in some runs (the demo fills the others)."""
    conditional = {}
    for title, (condition, panels) in family_panels().items():
        if not panels:
            continue
        row_title = title if condition is None else f"{title} ({condition})"
        layout.row(row_title, collapsed=True)
        for panel in panels:
            layout.add(panel, w=8, h=7)
        if condition:
            conditional[row_title] = condition
    layout.row("Keys without a panel of their own", collapsed=True)
    everything, drawn = promql_string(M + ".+"), promql_string(shown())
    layout.add(
        timeseries(
            "Every other key the trainer logs",
            [(per_attempt(with_key(f"{{__name__=~{everything},__name__!~{drawn},{RUN}}}")), "{{key}} " + EXP)],
            description="keys no panel above shows (a key a newer verl adds): empty when every key has its panel",
        ),
        w=24,
        h=8,
    )
    conditional["Keys without a panel of their own"] = "only when a key has no panel of its own"
    return conditional


def shown() -> str:
    """A regex of every metric name the key rows show (for the catch-all panel's exclusion)."""
    exact = sorted(metric(k)[len(M) :] for k in catalogue.trainer_keys())
    patterns = [metric_regex(regex)[len(M) :] for _, _, regex, _ in catalogue.PATTERN_FAMILIES]
    return (
        M
        + "("
        + "|".join([re.escape(e) for e in exact] + patterns + ["training_global_step", "training_step_time_seconds"])
        + ")"
    )


SOURCE_STATS = (  # (stat of plugin group_stats' per-source keys, panel title, unit)
    ("score/mean", "Score mean per data source", "short"),
    ("response_length/mean", "Response length mean per data source", "short"),
    ("clip_ratio", "Clipped at max length, per data source", "percentunit"),
    ("count", "Responses per data source", "short"),
)


def per_source(stat: str) -> str:
    """Every source's series of ``rl_insight/source/<source>/<stat>``, with the source as a label
    (``source``) taken from the metric name."""
    pattern = metric_regex(f"rl_insight/source/.+/{stat}")
    tail = metric_regex(f"/{stat}")[len(M) :]
    return per_attempt(
        f"label_replace({{__name__=~{promql_string(pattern)},{RUN}}}, "
        f'"source", "$1", "__name__", {promql_string(".+_source_(.+)" + tail)})'
    )


def percentiles(key: str, title: str, what: str) -> Panel:
    return timeseries(
        title,
        [series(f"{key}/p{q}", f"p{q}") for q in (10, 50, 90)],
        description=f"{what} of the step's responses: p10 / p50 / p90 (the band between p10 and p90 holds "
        "80 % of them)",
    )


def signal_rows(layout: Layout) -> None:
    """Plugin group_stats: where a step's learning signal is (groups GRPO learns nothing from),
    percentile bands of score and length, and each data source on its own line."""
    layout.row("Training signal: groups, advantages, percentiles")
    layout.add(
        timeseries(
            "Groups with no signal",
            [
                series("rl_insight/group/zero_variance_share", "all rewards equal"),
                series("rl_insight/group/solve_all_share", "all solved"),
                series("rl_insight/group/solve_none_share", "none solved"),
            ],
            unit="percentunit",
            description="share of the step's groups (verl's uid) whose rewards are all equal (GRPO gives them "
            "zero advantage), all at the batch's highest reward, all at its lowest",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Responses with a non-zero advantage",
            [series("rl_insight/advantage/nonzero_share", "non-zero advantage")],
            unit="percentunit",
            description="share of the step's responses with a non-zero advantage on a response token: "
            "the part of the batch the policy update learns from",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Reward spread within groups",
            [series("rl_insight/group/reward_std/mean", "reward std, mean over groups")],
            description="the rewards' standard deviation in each group of two or more, averaged over groups",
        ),
        w=8,
    )
    layout.add(percentiles("rl_insight/score", "Score p10 / p50 / p90", "sequence score (verl's critic/score)"))
    layout.add(percentiles("rl_insight/response_length", "Response length p10 / p50 / p90", "response length"))
    layout.row("Per data source")
    for stat, title, unit in SOURCE_STATS:
        expr = per_source(stat)
        layout.add(
            timeseries(
                title,
                [(f"clamp({expr}, 0, 1)" if unit == "percentunit" else expr, "{{source}} " + EXP)],
                unit=unit,
                description="one line per data_source (the first 32 of a run; the rest are summed up as other)",
            ),
            w=6,
        )
