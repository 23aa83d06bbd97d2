"""The dashboards, built by plain Python (no grafana-foundation-sdk: dicts stay readable, the
JSON is what Grafana stores, and ``--check`` can read every query back).

Every PromQL query filters on ``project`` and ``experiment_name`` (regex matchers: the variables
are multi-select); every TraceQL query constrains both too.
"""

from verl_rl_insight.contract.marks import MARK_METRIC
from verl_rl_insight.contract.verl_phases import SAVE_CHECKPOINT, STEP, TESTING
from verl_rl_insight.dashboards import (
    agent_loop,
    async_training,
    compare,
    engines,
    hardware,
    monitor,
    timeline,
    training,
    trajectories,
    transfer_queue,
)
from verl_rl_insight.dashboards.panels import (
    PROM,
    RUN,
    Layout,
    Panel,
    variables,
)

ENGINES = engines.RUNNING


def dashboard(uid: str, title: str, layout: Layout, engine_metric: str | None) -> Panel:
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
            f'increase(rl_insight_state_count_total{{{RUN},state="{SAVE_CHECKPOINT}",lane="trainer"}}[1m]) > 0',
            "checkpoint saved",
            "{{experiment_name}}",
        ),
        (
            "validation",
            "green",
            f'increase(rl_insight_state_count_total{{{RUN},state="{TESTING}",lane="trainer"}}[1m]) > 0',
            "validation",
            "{{experiment_name}}",
        ),
        (
            "restarts and resumes",
            "orange",
            f'resets(rl_insight_state_count_total{{{RUN},state="{STEP}",lane="trainer"}}[2m]) > 0',
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


def build(conditional: dict[str, str] | None = None) -> dict[str, Panel]:
    """{file name: dashboard} for everything under dashboards/generated/. ``conditional``, when a
    dict, receives {row title: the condition under which its keys are logged}."""
    out = {}
    rows_logged_sometimes = {}
    for engine in ("vllm", "sglang"):
        layout = Layout()
        training.overview_rows(layout)
        training.signal_rows(layout)
        timeline.timeline_rows(layout)
        engines.ROWS[engine](layout)
        rows_logged_sometimes.update(async_training.async_rows(layout))
        rows_logged_sometimes.update(training.key_rows(layout))
        transfer_queue.transfer_queue_rows(layout)
        rows_logged_sometimes.update(transfer_queue.transfer_queue_probe_rows(layout))
        rows_logged_sometimes.update(agent_loop.agent_loop_rows(layout))
        rows_logged_sometimes.update(hardware.hardware_rows(layout))
        monitor.monitoring_rows(layout)
        uid = f"verl_trainer_v1_with_{engine}_engine"
        out[f"{uid}.json"] = dashboard(uid, f"verl trainer v1 with {engine} engine", layout, ENGINES[engine])
    layout = Layout()
    hardware.hardware_rows(layout)
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
