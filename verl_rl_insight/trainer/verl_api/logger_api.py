"""The module interface verl >= 0.9's ``RLInsightLogger`` expects of the ``rl_insight`` package.

trainer/patches/tracking.py sets ``RLInsightLogger._rl_insight_module`` to this module, so verl's own
calls (rollout metric registration, ``trace_state`` in the vLLM / SGLang ``generate`` paths,
``DistProfiler.annotate``) reach this package's plugins without the separate ``rl_insight``
package being installed.
"""

import contextlib
import functools
import logging
import time
from typing import Any

from verl_rl_insight.trainer import runtime

logger = logging.getLogger("verl_rl_insight")
_failed: set[str] = set()


def _never_raises(function: Any) -> Any:
    """verl calls these from its rollout and training paths: a failure here is logged once, never raised."""

    @functools.wraps(function)
    def guarded(*args: object, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception:
            if function.__name__ not in _failed:
                _failed.add(function.__name__)
                logger.exception("rl-insight: %s failed; training goes on", function.__name__)

    return guarded


__version__ = "0.3.0"  # the RL-Insight API level implemented here (verl checks >= 0.3.0)

_run = None


def _runtime_and_run() -> Any:
    rt = runtime.start()
    return rt, (_run or rt.current_run())


@_never_raises
def init(project: str | None = None, experiment_name: str | None = None, config: Any = None, **_: Any) -> None:
    global _run
    rt = runtime.start(trainer_config={"rl_insight": dict(config)} if config else None)
    if project is not None or experiment_name is not None:  # bare init(): the process's current run
        _run = rt.run(project, experiment_name)


@_never_raises
def metric_gauge(name: str, value: Any, **_: Any) -> None:
    rt, run = _runtime_and_run()
    rt.hook.rl_insight_log_metrics(run=run, metrics={name: value}, step=None, timestamp=time.time())


@contextlib.contextmanager
def trace_state(state_name: Any, state_lane_id: Any = None, **labels: Any) -> Any:
    start_ns = time.time_ns()
    try:
        yield
    finally:
        trace_span(state_name, start_ns, time.time_ns(), dict(labels, state_lane_id=state_lane_id))


@_never_raises
def trace_span(name: str, start_time_ns: Any, end_time_ns: Any, attributes: dict[str, Any] | None = None) -> None:
    rt, run = _runtime_and_run()
    attributes = dict(attributes or {})
    lane = attributes.get("state_lane_id")
    rt.hook.rl_insight_state_span(
        run=run,
        name=name,
        lane=None if lane is None else str(lane),
        start_ns=start_time_ns,
        end_ns=end_time_ns,
        attributes=attributes,
    )


@_never_raises
def update_prometheus_config(server_addresses: Any, job_name: Any = None, labels: Any = None) -> None:
    rt, run = _runtime_and_run()
    labels = list(labels or [])
    for i, address in enumerate(server_addresses or ()):
        extra = labels[i] if i < len(labels) and labels[i] else {}
        rt.hook.rl_insight_register_target(
            run=run,
            address=str(address),
            job=job_name or "rl_insight",
            labels={str(k): str(v) for k, v in extra.items()},
        )


@_never_raises
def finish() -> None:
    runtime.shutdown()


class AgentLoopSession:
    """What verl's ``RLInsightLogger.agent_loop_session`` returns: the session's identity, and
    ``finish(**outcome)``, which puts the session on the timeline (lane agent_loop) with it."""

    def __init__(self, identity: Any) -> None:
        self.identity = identity
        self.start_ns = time.time_ns()
        self.finished = False

    @_never_raises
    def finish(self, **outcome: Any) -> None:
        if self.finished:
            return
        self.finished = True
        attributes = {k: v for k, v in self.identity.items() if v not in ("", None)}
        attributes.update(
            {f"outcome.{k}": v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in outcome.items()}
        )
        if isinstance(self.identity.get("global_steps"), int):
            attributes["step"] = self.identity["global_steps"]
        attributes["state_lane_id"] = "agent_loop"
        trace_span("agent session", self.start_ns, time.time_ns(), attributes)


def agent_loop_session(
    project: str,
    experiment_name: str,
    sample: Any,
    session: Any,
    traj: int = 0,
    uid: Any = None,
    global_steps: Any = None,
    session_id: Any = None,
) -> Any:
    return AgentLoopSession(
        {
            "project": project or "default",
            "experiment_name": experiment_name,
            "sample": str(sample),
            "session": str(session),
            "traj": str(traj),
            "state_lane_id": f"experiment={experiment_name}/sample={sample}/session={session}/traj={traj}",
            "uid": uid or "",
            "global_steps": global_steps if global_steps is not None else "",
            "session_id": session_id or "",
        }
    )
