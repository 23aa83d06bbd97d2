"""The RL state timeline rows: each worker's state over time, and the per-step figures the server
makes from the spans (long tails, idle time, replica lag)."""

from verl_rl_insight.contract.verl_phases import FIT_LOOP, HANDOVER
from verl_rl_insight.dashboards.panels import (
    RUN,
    Layout,
    M,
    samples_table,
    spans_table,
    state_timeline,
    timeseries,
    trace_view,
)


def timeline_rows(layout: Layout) -> None:
    layout.row("RL state timeline")
    layout.add(
        state_timeline(
            "Timeline, synchronous: trainer phases and the replicas inside gen",
            "trainer|profiler|replica_[0-9]+|agent_loop.*",
            "one row per lane: the trainer's phases in sequence (gen, reward, old_log_prob, ref, adv, update_actor, "
            "...) and each rollout replica's generate calls inside gen; the replica whose bar ends last holds the "
            "step back (the long tail), a row without a bar is idle; the profiler row marks steps profiled by "
            "`rl-insight profile`",
        ),
        w=24,
        h=12,
    )
    layout.add(
        state_timeline(
            "Timeline, asynchronous: rollout and training at once",
            "rollouter|trainer|replica_[0-9]+",
            "fully async and separate async trainers: the rollouter's lane and the trainer's lane run at the same "
            "time; a gap in either is time it waited for the other",
        ),
        w=24,
        h=10,
    )
    layout.add(
        spans_table(
            "Trainer phases",
            "trainer|rollouter",
            "the newest phases of the trainer (gen, reward, old_log_prob, ... under each step), one "
            "row each; a trace ID opens the step as a trace",
        ),
        w=12,
        h=10,
    )
    layout.add(
        spans_table(
            "Rollout replicas",
            "replica_.*|rank_.*",
            "generate calls per replica lane and worker roles per rank; a trace ID opens the trace",
        ),
        w=12,
        h=10,
    )
    layout.add(
        samples_table(
            "Rollout samples: worst, best, largest mismatch",
            "per step, the k lowest- and highest-scoring rollouts and the k with the largest train/inference "
            "log-prob mismatch, with prompt and response (plugin samples: off by default; "
            "+rl_insight.plugins.samples.enabled=True); in the terminal: rl-insight samples",
        ),
        w=24,
        h=10,
    )
    layout.add(trace_view("Selected trace", "the trace whose ID is in the trace_id variable at the top"), w=24, h=12)
    phases = "|".join(FIT_LOOP + HANDOVER)  # the fit loop's phases, and the separate_async trainer's handover
    layout.add(
        timeseries(
            "Trainer: share of each step per phase",
            [
                (
                    "clamp(label_replace("
                    f'{{__name__=~"{M}timing_s_({phases})",{RUN}}}, "phase", "$1", "__name__", ".*_timing_s_(.*)")'
                    f" / on (project, experiment_name) group_left {M}timing_s_step{{{RUN}}}, 0, 1)",
                    "{{phase}}",
                )
            ],
            unit="percentunit",
            description="timing_s/<phase> over timing_s/step, as verl logs them every step: the share of the step "
            "each phase took (what is left to 100 % is outside every timed phase)",
        ),
        w=12,
    )
    long_tail_panels(layout)


TIMELINE = "rl_insight_timeline_"


def long_tail_panels(layout: Layout) -> None:
    """The timeline's per-step figures, which the server makes from the spans (server/timeline/live.py)."""
    layout.add(
        timeseries(
            "Long tail: slowest generate call over the median call",
            [(f"{TIMELINE}long_tail_ratio{{{RUN}}}", "{{experiment_name}}")],
            unit="short",
            thresholds=[(3, "orange")],
            description="per step, from the replicas' generate spans: 1 means every call took as long as the median "
            "one; 5 means one call took five times as long, and the step waited for it",
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Step time spent waiting on the slowest replica",
            [
                (
                    f"clamp({TIMELINE}tail_wait_seconds{{{RUN}}} / {TIMELINE}step_seconds{{{RUN}}}, 0, 1)",
                    "{{experiment_name}}",
                )
            ],
            unit="percentunit",
            thresholds=[(0.2, "orange")],
            description="per step: from the moment the median replica finished its last call to the moment the "
            "last replica finished, over the step's wall time (alert RLInsightRolloutLongTail)",
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Idle share per lane",
            [
                (f'{TIMELINE}idle_ratio{{{RUN},lane!~"replica_.*"}}', "{{lane}} {{experiment_name}}"),
                (
                    f'avg by (project, experiment_name) ({TIMELINE}idle_ratio{{{RUN},lane=~"replica_.*"}})',
                    "replicas (mean) {{experiment_name}}",
                ),
            ],
            unit="percentunit",
            description="per step, the share of the step in which the lane ran nothing: the trainer waiting for "
            "rollouts (async) or between phases, the rollouter waiting for the trainer, replicas outside "
            "generation (alert RLInsightTrainerIdle)",
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Replicas finishing last: lag behind the median replica (top 5)",
            [(f"topk(5, {TIMELINE}replica_lag_seconds{{{RUN}}})", "{{replica}} {{experiment_name}}")],
            unit="s",
            description="per step, how long after the median replica each replica finished; the same replica on "
            "top step after step is a slow node or engine (alert RLInsightSlowReplica)",
        ),
        w=24,
    )
