"""The "compare runs" dashboard: several experiments of a project at once, the key training
curves on a global-step x axis, one line per experiment.

Prometheus is time-only, so each panel asks for the global step and the curve per experiment
(``max by (project, experiment_name)``: no other label, the hub stamps both with the same time)
as tables, merges them on time and run, splits the result per experiment, and plots step
against value: an XY chart whose series are named by experiment.
"""

from verl_rl_insight.contract.verl_keys import (
    ENTROPY,
    GRAD_NORM,
    KL_LOSS,
    PG_LOSS,
    RESPONSE_LENGTH_MEAN,
    REWARDS_MEAN,
    ROLLOUT_PROBS_DIFF_MEAN,
    SCORE_MEAN,
    THROUGHPUT,
    TIME_PER_STEP,
)
from verl_rl_insight.dashboards.attempts import BY_ATTEMPT, EXP, per_attempt
from verl_rl_insight.dashboards.panels import PROM, RUN, Layout, M, Panel, step_axis, target, timeseries
from verl_rl_insight.dashboards.training import metric

CURVES = (
    ("Score", SCORE_MEAN, "short"),
    ("Reward", REWARDS_MEAN, "short"),
    ("Entropy", ENTROPY, "short"),
    ("KL loss", KL_LOSS, "short"),
    ("Policy loss", PG_LOSS, "short"),
    ("Grad norm", GRAD_NORM, "short"),
    ("Response length", RESPONSE_LENGTH_MEAN, "short"),
    ("Train / inference log-prob mismatch", ROLLOUT_PROBS_DIFF_MEAN, "short"),
    ("Throughput", THROUGHPUT, "tokens/s"),
    ("Time per step", TIME_PER_STEP, "s"),
)


def by_step(title: str, key: str, unit: str) -> Panel:
    return step_axis(title, metric(key)[len(M) :], unit)


def build(variables: list[Panel]) -> Panel:
    layout = Layout()
    layout.row("Runs")
    layout.add(
        {
            "type": "table",
            "title": "Runs compared: last step of each attempt",
            "datasource": PROM,
            "targets": [
                target(f"{BY_ATTEMPT} ({per_attempt(f'{M}training_global_step{{{RUN}}}')})", "", "A", fmt="table")
            ],
            "options": {"showHeader": True},
            "fieldConfig": {"defaults": {}, "overrides": []},
        },
        w=8,
        h=6,
    )
    layout.add(
        timeseries("Global step over time", [(per_attempt(f"{M}training_global_step{{{RUN}}}"), EXP)]), w=16, h=6
    )
    layout.row("Key curves by training step")
    for title, key, unit in CURVES:
        layout.add(by_step(title, key, unit), w=12, h=8)
    return {
        "uid": "rl_insight_compare_runs",
        "title": "RL-Insight compare runs",
        "tags": ["rl-insight", "verl"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "editable": False,
        "templating": {"list": variables},
        "panels": layout.panels,
        "annotations": {"list": []},
    }
