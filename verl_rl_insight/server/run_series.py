"""A run's series in the server's own Prometheus: deleted with the run, or the time of one of its steps."""

import logging
import time

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.http_client import HttpClient, Unreachable
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, STEP_TIME_METRIC
from verl_rl_insight.contract.promql import run_selector

logger = logging.getLogger("verl_rl_insight.server")

Login = tuple[str, str]


def delete_series(prometheus_url: str, login: Login | None, project: str, experiment: str | None, wait_s: float) -> str:
    """Delete a run's series through Prometheus' admin API (on loopback); says what happened. Twice,
    ``wait_s`` apart: a scrape served just before the hub forgot the run may land after the first."""
    for attempt in range(2):
        if attempt:
            time.sleep(wait_s)
        try:
            reply = HttpClient(basic_auth=login).request(
                "POST",
                prometheus_url + paths.PROMETHEUS_DELETE_SERIES,
                params={"match[]": run_selector(project, experiment)},
                timeout_s=30,
            )
        except Unreachable as exc:
            return f"not deleted: {exc}"
        if not reply.ok:
            return f"not deleted: Prometheus answered {reply.status}: {reply.error()}"
    return "deleted"


def step_time_in(
    prometheus_url: str, project: str, experiment: str, step: int, login: Login | None = None
) -> float | None:
    """The trainer's time of ``step`` (or of the first step after it that Prometheus has), read on a
    one-minute grid over the last 35 days: exact for steps of a minute or more; None where it does not say."""
    run = run_selector(project, experiment)
    query = (
        f"min(min_over_time(({STEP_TIME_METRIC}{run} and on(project, experiment_name) "
        f"({GLOBAL_STEP_METRIC}{run} >= {int(step)}))[35d:1m]))"
    )
    try:
        reply = HttpClient(basic_auth=login).request(
            "GET", prometheus_url + paths.PROMETHEUS_QUERY, params={"query": query}, timeout_s=20
        )
        found = reply.json()["data"]["result"] if reply.ok else []
        return float(found[0]["value"][1]) if found else None
    except (Unreachable, ValueError, KeyError, IndexError, TypeError) as exc:
        logger.warning("marks: step %d of %s/%s: no time from Prometheus (%s)", step, project, experiment, exc)
        return None
