"""Prometheus alert rules that ``rl-insight server start`` provisions (``rules/rl-insight.rules.yml``).

Thresholds come from the server config's ``alerts:`` section (``settings/alerts.py``'s ``AlertSettings``). The
log-prob mismatch alerts hold only when every step in the window is above the threshold
(``min_over_time``: the hub gives Prometheus every step's value) and at least ``*_min_steps``
steps happened in it, so one noisy step does not page anyone.
"""

import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from verl_rl_insight.contract.naming import METRIC_PREFIX, STEP_TIME_METRIC, metric_name
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.contract.verl_keys import GRAD_NORM, ROLLOUT_PROBS_DIFF_MEAN, THROUGHPUT
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.managed.service import Links
from verl_rl_insight.server.settings.alerts import DEFAULTS, AlertSettings
from verl_rl_insight.server.settings.server import ServerSettings

Rule = dict[str, Any]  # one rule of a Prometheus rule file, as YAML

RUN = "project, experiment_name"
BY_STALL = detectors.STALL


def _probs_diff(t: AlertSettings, level: str, threshold: float) -> Rule:
    mean = metric_name(METRIC_PREFIX, ROLLOUT_PROBS_DIFF_MEAN)
    window = t.probs_diff_window
    return {
        "alert": f"RLInsightRolloutProbsDiff{level.capitalize()}",
        "expr": f"min_over_time({mean}[{window}]) > {threshold} and on({RUN}) "
        f"changes(rl_insight_monitor_training_global_step[{window}]) >= {t.probs_diff_min_steps - 1}",
        "labels": {"severity": level},
        "annotations": {
            "summary": f"train/inference log-prob mismatch above {threshold} for every step of {window}",
            "description": "training/rollout_probs_diff_mean of {{ $labels.project }}/{{ $labels.experiment_name }} "
            "is {{ $value }}; below 0.005 is normal, sustained above 0.01 points at rollout engine "
            "precision (dtype, kernels, quantization) or a weight-sync bug.",
        },
    }


TRAINER_DASHBOARD = "verl_trainer_v1_with_vllm_engine"
HARDWARE_DASHBOARD = "rl_insight_hardware"


def _links(rule: Rule, urls: Links | None) -> Rule:
    """What a person acts on: the value and the run in the description, a link to the run's
    dashboard (its project / experiment variables set) and to the expression in Prometheus."""
    annotations = rule.setdefault("annotations", {})
    annotations.setdefault("description", annotations["summary"])
    annotations["value"] = "{{ $value }}"
    annotations["run"] = "{{ $labels.project }}/{{ $labels.experiment_name }}"
    if urls:
        board = HARDWARE_DASHBOARD if "DCGM" in rule["expr"] else TRAINER_DASHBOARD
        annotations["dashboard"] = (
            f"{urls['grafana']}/d/{board}?var-project={{{{ $labels.project | urlquery }}}}"
            "&var-experiment_name={{ $labels.experiment_name | urlquery }}"
        )
        annotations["graph"] = f"{urls['prometheus']}/graph?g0.tab=0&g0.expr={urllib.parse.quote(rule['expr'])}"
    return rule


def _timeline_rules(t: AlertSettings) -> list[Rule]:
    """Shares over the window's steps, from the figures' counters (server/timeline/live.py)."""
    window, enough = t.timeline_window, t.timeline_min_steps - 1

    def share(part: str, whole: str, threshold: float, on: str = "", many: str = "") -> str:
        join = f"ignoring({on}) " if on else ""
        return (
            f"increase({part}[{window}]) / {join}{many}increase({whole}[{window}]) > {threshold} "
            f"and {join}changes(rl_insight_timeline_steps_total[{window}]) >= {enough}"
        )

    return [
        {
            "alert": "RLInsightRolloutLongTail",
            "expr": share(
                "rl_insight_timeline_tail_wait_seconds_total",
                "rl_insight_timeline_step_seconds_total",
                t.long_tail_share,
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "steps wait for their slowest rollouts {{ $value | humanizePercentage }} of the time "
                f"(over {window})",
                "description": "After the median replica has finished, the step still waits for the last one "
                "while the others sit idle (panels: RL state timeline, long tail). Look first at response "
                "lengths (response_length/max, clip_ratio) and at whether one replica is always last "
                "(RLInsightSlowReplica). People usually cap max_response_length, use partial rollouts or "
                "over-sampling, or balance requests across replicas.",
            },
        },
        {
            "alert": "RLInsightTrainerIdle",
            "expr": share(
                'rl_insight_timeline_idle_seconds_total{lane="trainer"}',
                "rl_insight_timeline_step_seconds_total",
                t.trainer_idle_share,
                on="lane",
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "the trainer runs nothing {{ $value | humanizePercentage }} of the time (over "
                f"{window})",
                "description": "Time between phases: the trainer waits for rollouts (async runs), for data or "
                "for checkpoints (panels: RL state timeline, idle share). In async runs people usually add "
                "rollout replicas or allow more staleness / samples in flight; in sync runs look for slow "
                "data loading or validation.",
            },
        },
        {
            "alert": "RLInsightSlowReplica",
            "expr": share(
                "rl_insight_timeline_replica_slowest_steps_total",
                "rl_insight_timeline_steps_total",
                t.slowest_replica_share,
                on="lane, replica",
                many="group_left ",
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.replica }} held back {{ $value | humanizePercentage }} of the steps "
                f"(over {window})",
                "description": "One replica finishes last in most steps: a slower GPU or node (throttling, ECC, "
                "PCIe link), more requests routed to it, or a different engine config. Compare it on the "
                "engine and hardware panels; people usually drain and replace the node or fix the routing.",
            },
        },
    ]


def _health_rules(t: AlertSettings) -> list[Rule]:
    """One RLInsight<Mode> per detector the server runs online (server/health/live.py)."""
    hold = t.health_hold
    rules = []
    for d in detectors.ALL:
        if not d.online:
            continue
        rules.append(
            {
                "alert": d.alert,
                "expr": f"max by (project, experiment_name, metric) "
                f'(increase(rl_insight_health_findings_total{{detector="{d.name}"}}[{hold}])) > 0',
                "labels": {"severity": d.severity, "detector": d.name},
                "annotations": {
                    "summary": f"{d.name.replace('_', ' ')} in {{{{ $labels.project }}}}/"
                    f"{{{{ $labels.experiment_name }}}} ({{{{ $labels.metric }}}}): {d.means}",
                    "description": f"Look first: {d.look}. People usually: {d.usually}. The steps and the "
                    "evidence: rl-insight diagnose --project {{ $labels.project }} --experiment "
                    "{{ $labels.experiment_name }}",
                    "runbook": f"{d.means}. Look first: {d.look}. People usually: {d.usually}.",
                    "panel": d.panel,
                },
            }
        )
    return rules


def _stalled(t: AlertSettings) -> Rule:
    """No step for ``stall_ratio`` x the run's own median step time (the server's stall detector
    pushes it, ``rl_insight_health_baseline{detector="stall"}``, once the run has a step time: never
    before) and at least ``stalled_for`` (the detector's ``stall_s``); a run that called ``finish()``
    is not stalled."""
    since = f"time() - max by ({RUN}) ({STEP_TIME_METRIC})"
    median = f'max by ({RUN}) (rl_insight_health_baseline{{detector="stall"}})'
    ratio, floor = t.detectors.stall_ratio, t.detectors.stall_s
    return {
        "alert": "RLInsightTrainingStalled",
        "expr": f"({since}) > on({RUN}) clamp_min({ratio:g} * {median}, {floor:g}) "
        f"unless on({RUN}) {RUN_FINISHED} == 1",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "no step of {{ $labels.project }}/{{ $labels.experiment_name }} for "
            "{{ $value | humanizeDuration }}",
            "description": f"More than {ratio:g}x the run's median step time and at least "
            f"{t.stalled_for} since its last step: {BY_STALL.means}. Look first: {BY_STALL.look}. People "
            f"usually: {BY_STALL.usually}.",
        },
    }


def render(alerts: AlertSettings = DEFAULTS, links_to: Links | None = None) -> str:
    t = alerts
    grad = metric_name(METRIC_PREFIX, GRAD_NORM)
    throughput = metric_name(METRIC_PREFIX, THROUGHPUT)
    rules = [
        _probs_diff(t, "warning", t.probs_diff_warning),
        _probs_diff(t, "critical", t.probs_diff_critical),
        {
            "alert": "RLInsightGradNormRising",
            "expr": f"{grad} > {t.grad_norm_ratio} * avg_over_time({grad}[{t.grad_norm_window}] offset "
            f"{t.grad_norm_window}) and deriv({grad}[{t.grad_norm_window}]) > 0",
            "for": t.grad_norm_for,
            "labels": {"severity": "warning"},
            "annotations": {"summary": "actor grad norm keeps rising: {{ $value }}"},
        },
        _stalled(t),
        {
            "alert": "RLInsightRolloutReplicaDown",
            "expr": 'up{job=~"vllm|sglang|trtllm"} == 0',
            "for": t.replica_down_for,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "rollout replica {{ $labels.replica }} ({{ $labels.instance }}) is not answering"
            },
        },
        {
            "alert": "RLInsightGPUMemoryNearlyFull",
            "expr": f"DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > {t.gpu_memory_ratio}",
            "for": t.gpu_memory_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} memory "
                "{{ $value | humanizePercentage }} full"
            },
        },
        {
            "alert": "RLInsightThroughputCollapse",
            "expr": f"{throughput} < {t.throughput_drop_ratio} * avg_over_time({throughput}[1h] offset 15m)",
            "for": t.throughput_for,
            "labels": {"severity": "warning"},
            "annotations": {"summary": "throughput of {{ $labels.experiment_name }} fell to {{ $value }}"},
        },
    ]
    rules += _timeline_rules(t)
    rules += _health_rules(t)
    rules = [_links(rule, links_to) for rule in rules]
    return yaml.safe_dump({"groups": [{"name": "rl-insight", "rules": rules}]}, sort_keys=False)


def write(settings: ServerSettings, links_to: Links | None = None) -> Path:
    """Render the rule file under the data dir; returns its path. ``links_to``: the public URLs
    of Grafana and Prometheus, for the links in each alert."""
    path = settings.data_path / "rules" / "rl-insight.rules.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(settings.alerts, links_to))
    return path
