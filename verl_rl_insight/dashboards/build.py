"""The dashboards, built by plain Python (no grafana-foundation-sdk: dicts stay readable, the
JSON is what Grafana stores, and ``--check`` can read every query back).

Every PromQL query filters on ``project`` and ``experiment_name`` (regex matchers: the variables
are multi-select); every TraceQL query constrains both too.
"""

from typing import Any

from verl_rl_insight.contract.marks import MARK_METRIC
from verl_rl_insight.dashboards import async_training, compare, engines, training, trajectories
from verl_rl_insight.dashboards.panels import (
    PROM,
    RUN,
    Layout,
    M,
    samples_table,
    spans_table,
    state_timeline,
    timeseries,
    trace_view,
    variables,
)

RATE = "[$__rate_interval]"
ENGINES = engines.RUNNING


def timeline_rows(layout: Any) -> None:
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
    phases = (
        "gen|reward|old_log_prob|ref|values|adv|update_actor|update_critic|update_weights|save_checkpoint|testing"
        "|switch_to_rollout|switch_wait|switch_to_trainer"  # verl's separate_async trainer (trainer_separate_async)
    )
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


def long_tail_panels(layout: Any) -> None:
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


def transfer_queue_rows(layout: Any) -> None:
    layout.row("TransferQueue")
    requests = f"sum by (op_type) (rate(tq_controller_request_total{{{RUN}}}{RATE}))"
    errors = f"sum by (op_type) (rate(tq_controller_request_errors_total{{{RUN}}}{RATE}))"
    layout.add(
        timeseries(
            "Controller requests and errors",
            [(requests, "{{op_type}}"), (f"{errors} or 0 * {requests}", "errors {{op_type}}")],
            unit="reqps",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Controller request latency",
            [
                (
                    f"histogram_quantile({q}, sum by (le, op_type) (rate(tq_controller_request_duration_seconds_bucket"
                    f"{{{RUN}}}{RATE})))",
                    f"p{int(q * 100)} {{{{op_type}}}}",
                )
                for q in (0.5, 0.99)
            ],
            unit="s",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Samples moved",
            [(f"sum by (op_type) (rate(tq_controller_request_samples_total{{{RUN}}}{RATE}))", "{{op_type}}")],
            unit="short",
            description="samples per second, by operation",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Partitions and samples",
            [
                (f"tq_partitions_total{{{RUN}}}", "partitions"),
                (f"tq_partition_samples_total{{{RUN}}}", "samples {{partition_id}}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Partition production progress",
            [
                (
                    f"max by (partition_id, task_name) (tq_partition_production_progress{{{RUN}}})",
                    "{{partition_id}} {{task_name}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Global indexes",
            [
                (f"tq_global_index_allocated_total{{{RUN}}}", "allocated"),
                (f"tq_global_index_reusable_total{{{RUN}}}", "reusable"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Process memory",
            [
                (f"tq_controller_memory_rss_bytes{{{RUN}}}", "controller"),
                (f"tq_storage_memory_rss_bytes{{{RUN}}}", "storage {{storage_unit_id}}"),
            ],
            unit="bytes",
        ),
        w=8,
    )
    layout.add(timeseries("Controller uptime", [(f"tq_controller_uptime_seconds{{{RUN}}}", "uptime")], unit="s"), w=8)
    layout.add(
        timeseries("Storage keys", [(f"tq_storage_active_keys_total{{{RUN}}}", "active {{storage_unit_id}}")]), w=8
    )
    layout.add(
        timeseries(
            "Storage requests: arrived and completed",
            [
                (
                    f"sum by (storage_unit_id) (rate(tq_storage_requests_arrived{{{RUN}}}{RATE}))",
                    "arrived {{storage_unit_id}}",
                ),
                (
                    f"sum by (storage_unit_id) (rate(tq_storage_request_ops{{{RUN}}}{RATE}))",
                    "completed {{storage_unit_id}}",
                ),
                (f"sum by (op_type) (rate(tq_storage_arrivals_by_op{{{RUN}}}{RATE}))", "arrived {{op_type}}"),
            ],
            unit="reqps",
            description="a gap between arrived and completed: requests that arrive and do not finish",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Storage request latency",
            [
                (f"tq_storage_request_latency_{kind}{{{RUN}}}", f"{kind} {{{{op_type}}}}")
                for kind in ("avg", "p50", "p99")
            ],
            unit="s",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "SSD offload", [(f"tq_storage_ssd_active_bytes{{{RUN}}}", "bytes on SSD {{storage_unit_id}}")], unit="bytes"
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "SSD offload values",
            [
                (f"tq_storage_ssd_active_values{{{RUN}}}", "on SSD {{storage_unit_id}}"),
                (f"tq_storage_ssd_fallback_values_total{{{RUN}}}", "kept in memory (no SSD encoding)"),
                (f"tq_storage_ssd_offload_enabled{{{RUN}}}", "offload enabled"),
            ],
        ),
        w=16,
    )


def transfer_queue_probe_rows(layout: Any) -> Any:
    title = "TransferQueue storage capacity and accept queue (with capacity set, or TQ_ACCEPT_PROBE_INTERVAL > 0)"
    layout.row(title, collapsed=True)
    layout.add(
        timeseries(
            "Storage utilization",
            [(f"max by (storage_unit_id) (tq_storage_utilization_ratio{{{RUN}}})", "{{storage_unit_id}}")],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(timeseries("Storage capacity", [(f"tq_storage_capacity_total{{{RUN}}}", "{{storage_unit_id}}")]), w=8)
    layout.add(
        timeseries(
            "Partition consumption progress",
            [
                (
                    f"max by (partition_id, task_name) (tq_partition_consumption_progress{{{RUN}}})",
                    "{{partition_id}} {{task_name}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Accept queue",
            [
                (f"tq_storage_accept_queue_backlog{{{RUN}}}", "backlog {{storage_unit_id}}"),
                (f"tq_storage_accept_queue_peak{{{RUN}}}", "peak {{storage_unit_id}}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Accept queue peak utilization",
            [
                (
                    f"max by (storage_unit_id) (tq_storage_accept_queue_peak_utilization_ratio{{{RUN}}})",
                    "{{storage_unit_id}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Connection drops",
            [
                (f"tq_storage_socket_drops{{{RUN}}}", "socket drops {{storage_unit_id}}"),
                (f"tq_storage_listen_overflows{{{RUN}}}", "listen overflows {{storage_unit_id}}"),
                (f"tq_storage_listen_other_drops{{{RUN}}}", "other drops {{storage_unit_id}}"),
            ],
        ),
        w=8,
    )
    return {title: "storage capacity and the accept-queue probe are reported only when configured"}


GPU_FAULTS_ROW = "GPU faults: XID errors, ECC errors, clock throttling (where NVML reports them)"


def hardware_rows(layout: Any) -> Any:
    """GPU series carry dcgm-exporter's ``Hostname`` (not ``node``): the node selector filters on it."""
    gpu = f'{RUN},Hostname=~"$node",gpu=~"$gpu"'
    node = f'{RUN},node=~"$node"'
    layout.row("Hardware")
    layout.add(
        timeseries("GPU utilization", [(f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="percent")
    )
    layout.add(
        timeseries(
            "GPU memory used",
            [
                (
                    f"DCGM_FI_DEV_FB_USED{{{gpu}}} / (DCGM_FI_DEV_FB_USED{{{gpu}}} + DCGM_FI_DEV_FB_FREE{{{gpu}}})",
                    "{{Hostname}} gpu {{gpu}}",
                )
            ],
            unit="percentunit",
            thresholds=[(0.95, "red")],
        )
    )
    layout.add(
        timeseries("GPU power", [(f"DCGM_FI_DEV_POWER_USAGE{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="watt")
    )
    layout.add(
        timeseries("GPU temperature", [(f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="celsius")
    )
    layout.add(
        timeseries(
            "GPU PCIe throughput",
            [
                (f"DCGM_FI_PROF_PCIE_TX_BYTES{{{gpu}}}", "tx {{Hostname}} gpu {{gpu}}"),
                (f"DCGM_FI_PROF_PCIE_RX_BYTES{{{gpu}}}", "rx {{Hostname}} gpu {{gpu}}"),
            ],
            unit="Bps",
        )
    )
    layout.add(
        timeseries("Host CPU", [(f"rl_insight_host_cpu_utilization_percent{{{node}}}", "{{node}}")], unit="percent")
    )
    layout.add(
        timeseries("Host memory used", [(f"rl_insight_host_memory_used_bytes{{{node}}}", "{{node}}")], unit="bytes")
    )
    layout.add(
        timeseries(
            "Host network",
            [
                (f"rl_insight_host_network_receive_bytes_per_second{{{node}}}", "rx {{node}}"),
                (f"rl_insight_host_network_transmit_bytes_per_second{{{node}}}", "tx {{node}}"),
            ],
            unit="Bps",
        )
    )
    layout.add(
        timeseries(
            "Host disk",
            [
                (f"rl_insight_host_disk_read_bytes_per_second{{{node}}}", "read {{node}}"),
                (f"rl_insight_host_disk_written_bytes_per_second{{{node}}}", "write {{node}}"),
            ],
            unit="Bps",
        )
    )
    layout.row(GPU_FAULTS_ROW, collapsed=True)
    layout.add(
        timeseries(
            "XID errors (the last XID code per GPU)",
            [(f"DCGM_FI_DEV_XID_ERRORS{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")],
            description="NVIDIA's XID code of the last critical error (e.g. 79: fell off the bus, 48: DBE, "
            "13/31/43: faults in user code); any value here deserves a look at dmesg on that node",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "ECC errors since the driver loaded",
            [
                (f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{gpu}}}", "corrected {{Hostname}} gpu {{gpu}}"),
                (f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{gpu}}}", "uncorrected {{Hostname}} gpu {{gpu}}"),
            ],
            description="uncorrected (double-bit) errors kill the process using that memory: drain the GPU",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Clock throttle reasons (bit mask)",
            [(f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{gpu}}} > 1", "{{Hostname}} gpu {{gpu}}")],
            description="NVML's throttle-reason bits, idle (1) left out: 4 power cap, 8 HW slowdown, 32 SW thermal, "
            "64 HW thermal, 128 power brake; a GPU held back slows every step",
        ),
        w=8,
    )
    return {GPU_FAULTS_ROW: "only when a GPU reports an XID, ECC error or throttling"}


def monitoring_rows(layout: Any) -> None:
    """The monitor's own health: the hub's memory, what it refused or dropped, spans lost on the way."""
    layout.row("The monitor itself", collapsed=True)
    layout.add(
        timeseries(
            "Hub memory",
            [("rl_insight_hub_memory_bytes", "booked"), ("rl_insight_hub_memory_limit_bytes", "limit")],
            unit="bytes",
            description="what the hub holds against its memory_limit_mb; at the limit pushes are refused (422)",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Hub: refused and dropped",
            [
                ("increase(rl_insight_hub_rejected_pushes_total[5m])", "pushes refused"),
                ("increase(rl_insight_hub_history_evicted_unsent_total[5m])", "steps dropped before a scrape"),
                ("increase(rl_insight_hub_batches_lost_total[5m])", "steps the store never confirmed"),
                ("increase(rl_insight_hub_batches_resent_total[5m])", "steps sent again (a scrape not stored)"),
            ],
            description=(
                "pushes refused and steps dropped or never confirmed lost data: see rl-insight server status and "
                "the server log; steps sent again were not lost (a scrape the store did not get, sent again)"
            ),
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Hub: series and streams",
            [("rl_insight_hub_series", "series"), ("rl_insight_hub_streams", "streams")],
        ),
        w=8,
    )


AGENT_LOOP_ROW = "Agent loop (actor_rollout_ref.rollout.trace.backend=rl_insight)"


def agent_loop_rows(layout: Any) -> Any:
    """rl_insight_agent_* from the trajectories verl's rollout_trace reports; returns {row: condition}."""
    layout.row(AGENT_LOOP_ROW, collapsed=True)

    def total(name: str) -> str:
        return f"sum by (validate) (rate(rl_insight_agent_{name}_total{{{RUN}}}{RATE}))"

    layout.add(
        timeseries("Trajectories traced", [(total("trajectories"), "validate={{validate}}")], unit="ops"), w=8, h=7
    )
    layout.add(trajectories.per_trajectory(), w=8, h=7)
    layout.add(trajectories.tool_latency(), w=8, h=7)
    layout.add(
        timeseries(
            "Failed ops and trajectories",
            [
                (total("failed_ops"), "ops validate={{validate}}"),
                (total("failed_trajectories"), "trajectories validate={{validate}}"),
            ],
            unit="ops",
        ),
        w=12,
        h=7,
    )
    layout.add(
        timeseries(
            "Tool calls and turns",
            [
                (total("tool_calls"), "tool calls validate={{validate}}"),
                (total("turns"), "turns validate={{validate}}"),
            ],
            unit="ops",
        ),
        w=12,
        h=7,
    )
    return {AGENT_LOOP_ROW: "actor_rollout_ref.rollout.trace.backend=rl_insight"}


def dashboard(uid: Any, title: str, layout: Any, engine_metric: Any) -> Any:
    return {
        "uid": uid,
        "title": title,
        "tags": ["rl-insight", "verl"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "editable": False,
        "templating": {"list": variables(engine_metric)},
        "panels": layout.panels,
        "annotations": {"list": ANNOTATIONS},
    }


# Events drawn on every panel of the training dashboards (Grafana's Prometheus annotation query)
ANNOTATIONS = [
    {
        "name": name,
        "datasource": PROM,
        "enable": True,
        "iconColor": color,
        "expr": expr,
        "step": "15s",
        "titleFormat": title,
        "textFormat": text,
        "useValueForTime": False,
    }
    for name, color, expr, title, text in (
        (
            "checkpoint saves",
            "blue",
            f'increase(rl_insight_state_count_total{{{RUN},state="save_checkpoint",lane="trainer"}}[1m]) > 0',
            "checkpoint saved",
            "{{experiment_name}}",
        ),
        (
            "validation",
            "green",
            f'increase(rl_insight_state_count_total{{{RUN},state="testing",lane="trainer"}}[1m]) > 0',
            "validation",
            "{{experiment_name}}",
        ),
        (
            "restarts and resumes",
            "orange",
            f'resets(rl_insight_state_count_total{{{RUN},state="step",lane="trainer"}}[2m]) > 0',
            "trainer restarted",
            "{{experiment_name}}: its counters began again (a new process: a resume or a restart)",
        ),
        (
            "alerts",
            "red",
            f'ALERTS{{{RUN},alertstate="firing"}}',
            "{{alertname}}",
            "{{experiment_name}} {{severity}}: rl-insight diagnose / rl-insight alerts",
        ),
        (
            "profiled steps",
            "purple",
            f"changes(rl_insight_profiled_steps_total{{{RUN}}}[1m]) > 0",
            "profiled (rl-insight profile)",
            "{{experiment_name}}: `rl-insight profile list` says where the traces are",
        ),
    )
] + [
    # a person's marks (rl-insight runs mark): the hub exposes each with its step's trainer time (ms)
    # as the value, and Grafana draws it there (useValueForTime), however long after the step it was made
    {
        "name": "marks",
        "datasource": PROM,
        "enable": True,
        "iconColor": "yellow",
        "expr": f"{MARK_METRIC}{{{RUN}}}",
        "step": "60s",
        "titleFormat": "step {{step}}: {{mark}}",
        "textFormat": "{{experiment_name}} (reset_baseline={{reset_baseline}}): rl-insight runs marks",
        "useValueForTime": True,
    }
]


def build(conditional: Any = None) -> Any:
    """{file name: dashboard} for everything under grafana/dashboards/. ``conditional``, when a
    dict, receives {row title: the condition under which its keys are logged}."""
    out = {}
    rows_logged_sometimes = {}
    for engine in ("vllm", "sglang"):
        layout = Layout()
        training.overview_rows(layout)
        training.signal_rows(layout)
        timeline_rows(layout)
        engines.ROWS[engine](layout)
        rows_logged_sometimes.update(async_training.async_rows(layout))
        rows_logged_sometimes.update(training.key_rows(layout))
        transfer_queue_rows(layout)
        rows_logged_sometimes.update(transfer_queue_probe_rows(layout))
        rows_logged_sometimes.update(agent_loop_rows(layout))
        rows_logged_sometimes.update(hardware_rows(layout))
        monitoring_rows(layout)
        uid = f"verl_trainer_v1_with_{engine}_engine"
        out[f"{uid}.json"] = dashboard(uid, f"verl trainer v1 with {engine} engine", layout, ENGINES[engine])
    layout = Layout()
    hardware_rows(layout)
    out["rl_insight_hardware.json"] = dashboard("rl_insight_hardware", "RL-Insight hardware", layout, None)
    run_variables = [
        dict(v, includeAll=v["name"] == "experiment_name")
        for v in variables(None)
        if v["name"] in ("project", "experiment_name")
    ]
    out["rl_insight_compare_runs.json"] = compare.build(run_variables)
    out["rl_insight_agent_trajectories.json"] = trajectories.build(run_variables)
    rows_logged_sometimes[trajectories.PER_STEP_ROW] = trajectories.CONDITION
    if conditional is not None:
        conditional.update(rows_logged_sometimes)
    return out
