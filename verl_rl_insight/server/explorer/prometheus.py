"""What the explorer reads from the server's own Prometheus (its HTTP API on loopback, with the
login the server made for it): a run's whole history, for a run the hub has not carried since the
server started, and the GPUs' faults and throttling during a step.

A run's history is its raw samples (a range selector, in windows of ``CHUNK_S`` going back until
the run's start, as ``rl-insight diagnose`` reads them), each matched to its step by the
global-step sample of the same timestamp: the hub stamps a step's values and its step with one
time, the step's own. (A scrape's live copies come later, with the scrape's time: the first wins.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.attempts import superseded
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.contract.http_client import HttpClient
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC
from verl_rl_insight.contract.promql import run_selector
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.server.explorer.dcgm import fault_words, throttle_reasons
from verl_rl_insight.server.history.histories import Step

logger = logging.getLogger("verl_rl_insight.server")

CHUNK_S = 2 * 3600
MAX_S = 35 * 86400
MAX_WINDOWS = MAX_S // CHUNK_S
FINISHED = RUN_FINISHED
TRAINER_SERIES = f"rl_insight_monitor_.+|{FINISHED}"
FAULTS = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
THROTTLE = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",)
Samples = list[tuple[dict[str, str], list[tuple[float, float]]]]  # (labels, [(time, value)])


class PrometheusReader:
    def __init__(self, url: str, login: tuple[str, str] | None, timeout_s: float = 20.0) -> None:
        self.url = url.rstrip("/")
        self.client = HttpClient(basic_auth=login, timeout_s=timeout_s)

    def samples(self, promql: str) -> Samples:
        """The raw samples a range query gives; [] when Prometheus does not answer (logged)."""
        try:
            reply = self.client.request("GET", self.url + paths.PROMETHEUS_QUERY, params={"query": promql})
            found = reply.json()["data"]["result"] if reply.ok else []
        except (RLInsightError, ValueError, KeyError, TypeError) as exc:
            logger.warning("explorer: Prometheus did not answer %s (%s)", promql[:120], exc)
            return []
        return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r.get("values", ())]) for r in found]

    def has_run(self, project: str, experiment: str, now: float) -> bool:
        """Whether Prometheus holds a step of the run in the last MAX_S (its index only: one request,
        answered at once for a name it never saw); False when it does not answer (logged)."""
        selector = f"{GLOBAL_STEP_METRIC}{run_selector(project, experiment)}"
        query = {"match[]": selector, "start": f"{now - MAX_S:.3f}", "end": f"{now:.3f}"}
        try:
            reply = self.client.request("GET", self.url + paths.PROMETHEUS_SERIES, params=query)
            return bool(reply.ok and reply.json()["data"])
        except (RLInsightError, ValueError, KeyError, TypeError) as exc:
            logger.warning("explorer: Prometheus did not answer for run %s/%s (%s)", project[:80], experiment[:80], exc)
            return False

    def run_steps(self, project: str, experiment: str, now: float) -> tuple[list[Step], float | None]:
        """The run's steps (step, time, {series: value}): what the trainer's own stream logged;
        and its last rl_insight_run_finished (1: finish() ran). A run Prometheus never had costs one
        request (``has_run``), not a range query for every window of MAX_S."""
        if not self.has_run(project, experiment, now):
            return [], None
        selector = run_selector(project, experiment)[1:-1]
        query = f'{{__name__=~"{TRAINER_SERIES}|{GLOBAL_STEP_METRIC}",{selector}}}'
        values: dict[str, dict[float, float]] = {}
        end, seen_run = now, False
        for _ in range(MAX_WINDOWS):
            found = [
                (labels, points)
                for labels, points in self.samples(f"{query}[{CHUNK_S}s] @ {end:.3f}")
                if set(labels) - {"__name__", "job", "instance"} == {"project", "experiment_name"}
            ]
            for labels, points in found:
                into = values.setdefault(labels["__name__"], {})
                for t, v in points:
                    into.setdefault(t, v)
            steps_here = any(labels["__name__"] == GLOBAL_STEP_METRIC and points for labels, points in found)
            if seen_run and not steps_here:
                break
            seen_run = seen_run or steps_here
            end -= CHUNK_S
        finished = values.get(FINISHED, {})
        return _by_step(values), finished[max(finished)] if finished else None

    def hardware(self, project: str, experiment: str, start: float, end: float) -> list[dict[str, object]]:
        """Per node and GPU: the most of each fault counter and throttle reason seen during [start, end]."""
        names = "|".join(FAULTS + THROTTLE)
        window = max(1, int(end - start) + 1)
        selector = run_selector(project, experiment)[1:-1]
        found = self.samples(f'{{__name__=~"{names}",{selector}}}[{window}s] @ {end:.3f}')
        by_gpu: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
        for labels, points in found:
            kept = [v for t, v in points if start - 1 <= t <= end]
            if not kept:
                continue
            # the node as the swimlane names it (the host name: dcgm-exporter's Hostname label), not the
            # address Prometheus scraped (the hub's, for every pushed GPU)
            node = labels.get("node") or labels.get("Hostname") or labels.get("instance") or "?"
            kind = "throttle" if labels["__name__"] in THROTTLE else "faults"
            figures = by_gpu.setdefault((node, labels.get("gpu") or "?"), {"faults": {}, "throttle": {}})[kind]
            if kind == "throttle":  # a bitmask: every reason seen during the step
                mask = 0
                for value in kept:
                    mask |= int(value) if value == value and 0 <= value < 2**32 else 0
                figures[labels["__name__"]] = float(mask)
            else:
                figures[labels["__name__"]] = max(kept)
        return [
            {"node": node, "gpu": gpu, **figures, "fault_words": fault_words(figures["faults"]),
             "throttle_reasons": [r for v in figures["throttle"].values() for r in throttle_reasons(int(v))]}
            for (node, gpu), figures in sorted(by_gpu.items())
        ]  # fmt: skip


def _by_step(values: Mapping[str, Mapping[float, float]]) -> list[Step]:
    step_at = {t: int(v) for t, v in values.get(GLOBAL_STEP_METRIC, {}).items()}
    for t in superseded(step_at):  # the name used again from an earlier step: the newest attempt's steps
        del step_at[t]
    first_seen: dict[int, float] = {}
    for t in sorted(step_at):
        first_seen.setdefault(step_at[t], t)
    steps: dict[int, dict[str, float]] = {step: {} for step in first_seen}
    for name, points in values.items():
        if name == GLOBAL_STEP_METRIC:
            continue
        for t in sorted(points):
            if t in step_at:
                steps[step_at[t]].setdefault(name, points[t])
    return [Step(step, first_seen[step], steps[step]) for step in sorted(steps)]
