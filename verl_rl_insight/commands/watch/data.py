"""What the terminal view shows, read from Prometheus' HTTP API: the run, its step, the key
curves by step, throughput, rollout replicas, GPUs and the alerts that fire."""

from collections.abc import Iterable, Mapping
from typing import Any

from verl_rl_insight.commands.http_fetch import NoAnswer, fetch_json
from verl_rl_insight.contract import paths, server_url
from verl_rl_insight.contract.attempts import superseded
from verl_rl_insight.contract.engine_metrics import LOAD, exposed
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, METRIC_PREFIX, metric_name
from verl_rl_insight.contract.promql import run_selector
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.contract.verl_keys import (
    ENTROPY,
    GRAD_NORM,
    KL_LOSS,
    RESPONSE_LENGTH_MEAN,
    ROLLOUT_PROBS_DIFF_MEAN,
    SCORE_MEAN,
    STEP_TIME,
    THROUGHPUT,
)

PREFIX = METRIC_PREFIX
STEP = GLOBAL_STEP_METRIC
# (label, logged key, thresholds drawn under the curve)
CURVES = (
    ("score", SCORE_MEAN, ()),
    ("entropy", ENTROPY, ()),
    ("KL", KL_LOSS, ()),
    ("grad norm", GRAD_NORM, ()),
    ("response len", RESPONSE_LENGTH_MEAN, ()),
    ("logp mismatch", ROLLOUT_PROBS_DIFF_MEAN, (0.005, 0.01)),
)
ENGINES = {  # running, waiting, KV cache share: series of the engine metric list
    engine: (exposed(load.running), exposed(load.waiting), exposed(load.kv_cache)) for engine, load in LOAD.items()
}


class DataError(RLInsightError):
    """A condition the view states in one line (server down, no run yet, unknown run)."""


def metric(key: str) -> str:
    """The series name the hub makes of a verl key (the trainer side's own rule)."""
    return metric_name(PREFIX, key)


class Prometheus:
    def __init__(self, url: str, timeout: int = 5) -> None:
        from verl_rl_insight.commands.server.control import with_login

        # the login of the server here when this user may read it (or one the URL carries already)
        self.url = with_login(url).rstrip("/")
        self.shown = server_url.redact(self.url)  # what messages name
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        try:
            body = fetch_json(f"{self.url}{path}", params=params, timeout_s=self.timeout)
        except NoAnswer as exc:
            if exc.status is None:
                raise DataError(f"Prometheus at {self.shown} does not answer ({exc})") from None
            if exc.status == 401:
                raise DataError(
                    f"Prometheus at {self.shown} takes the server's login (401): run this as the user that "
                    "started the server, who may read it"
                ) from None
            raise DataError(f"Prometheus at {self.shown} refused a query ({exc.status})") from None
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get(paths.PROMETHEUS_QUERY, {"query": promql})["result"]
        return result

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def by(self, promql: str, label: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(promql)}

    def samples(self, promql_range: str) -> dict[float, float]:
        """{timestamp: value} of the one series a range-vector query returns."""
        result = self.query(promql_range)
        return {float(t): float(v) for t, v in result[0]["values"]} if result else {}

    def names(self, match: str, start: float) -> list[str]:
        """Metric names of the series matching ``match`` since ``start`` (seconds)."""
        return [str(name) for name in self._get(paths.PROMETHEUS_NAMES, {"match[]": match, "start": str(start)})]

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self._get(paths.PROMETHEUS_ALERTS, {})["alerts"]
        return alerts


def runs(prom: Prometheus) -> list[tuple[str, str, float]]:
    """(project, experiment_name, last seen) of every run, newest first."""
    found = prom.query(f"max by (project, experiment_name) (timestamp({STEP}))")
    return sorted(
        ((r["metric"].get("project", ""), r["metric"].get("experiment_name", ""), float(r["value"][1])) for r in found),
        key=lambda run: -run[2],
    )


def pick_run(
    prom: Prometheus,
    project: str | None = None,
    experiment: str | None = None,
    recent: Iterable[tuple[str, str, float]] = (),
) -> tuple[str, str]:
    """The named run, else the newest: ``recent`` (project, experiment_name, seconds since its last
    step) from the hub comes first, since Prometheus stamps every run's live value at each scrape."""
    known = [(p, e, -idle) for p, e, idle in sorted(recent, key=lambda r: r[2])] + runs(prom)
    if not known:
        raise DataError("no run has logged a step yet (trainer.logger needs rl_insight; `rl-insight doctor` checks)")
    chosen = [r for r in known if (project is None or r[0] == project) and (experiment is None or r[1] == experiment)]
    if not chosen:
        names = ", ".join(dict.fromkeys(f"{p}/{e}" for p, e, _ in known[:10]))
        raise DataError(f"no run {project or '*'}/{experiment or '*'} (known: {names})")
    return chosen[0][:2]


def by_step(
    prom: Prometheus, key_metric: str, selector: str, window_s: float, steps: Mapping[float, float]
) -> list[tuple[int, float]]:
    """[(global step, value)] of the run's last ``window_s``: the hub stamps a step's values and its
    global step with the same time, so each stored sample is matched to its own step."""
    values = prom.samples(f"{key_metric}{selector}[{int(window_s)}s]")
    replaced = superseded({t: int(s) for t, s in steps.items()})  # the name used again from an earlier step
    by = {int(steps[t]): v for t, v in sorted(values.items()) if t in steps and t not in replaced}  # (once a step)
    return sorted(by.items())


def snapshot(prom: Prometheus, project: str, experiment: str | None, window_s: int = 3600) -> dict[str, Any]:
    """Everything one frame shows, as plain data."""
    selector = run_selector(project, experiment)
    step = prom.scalar(f"{STEP}{selector}")
    if step is None:
        raise DataError(f"run {project}/{experiment} has no global step in Prometheus yet")
    steps = prom.samples(f"{STEP}{selector}[{int(window_s)}s]")
    curves = [
        (label, by_step(prom, metric(key), selector, window_s, steps), thresholds) for label, key, thresholds in CURVES
    ]
    engines = {}
    for name, (running, waiting, cache) in ENGINES.items():
        rows: dict[Any, Any] = {}
        for column, name_ in (("running", running), ("waiting", waiting), ("kv_cache", cache)):
            for replica, value in prom.by(f"sum by (replica) ({name_}{selector})", "replica").items():
                rows.setdefault(replica, {})[column] = value
        if rows:
            engines[name] = rows
    util = prom.scalar(f"avg(DCGM_FI_DEV_GPU_UTIL{selector})")
    used = prom.scalar(f"sum(DCGM_FI_DEV_FB_USED{selector})")
    free = prom.scalar(f"sum(DCGM_FI_DEV_FB_FREE{selector})")
    gpus = prom.scalar(f"count(DCGM_FI_DEV_GPU_UTIL{selector})")
    firing = [
        a
        for a in prom.alerts()
        if a.get("state") == "firing"
        and a["labels"].get("project", project) == project
        and a["labels"].get("experiment_name", experiment) == experiment
    ]
    return {
        "project": project,
        "experiment": experiment,
        "step": int(step),
        "step_time_s": prom.scalar(f"{metric(STEP_TIME)}{selector}"),
        "throughput": prom.scalar(f"{metric(THROUGHPUT)}{selector}"),
        "finished": prom.scalar(f"{RUN_FINISHED}{selector}") == 1,
        "curves": curves,
        "engines": engines,
        "gpus": None
        if gpus is None
        else {"count": int(gpus), "util": util, "memory": used / (used + free) if used is not None and free else None},
        "alerts": [
            (a["labels"].get("alertname", "?"), a["labels"].get("severity", ""), a.get("value")) for a in firing
        ],
    }
