"""The module interface verl >= 0.9's ``RLInsightLogger`` expects of the ``rl_insight`` package.

trainer/patches/tracking.py sets ``RLInsightLogger._rl_insight_module`` to this module, so verl's own
calls (rollout metric registration, ``trace_state`` in the vLLM / SGLang ``generate`` paths,
``DistProfiler.annotate``) reach this package's plugins without the separate ``rl_insight``
package being installed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import ParamSpec, TypeVar

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.hook_types import RunInfo

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("verl_rl_insight")
_failed: set[str] = set()


def _never_raises(function: Callable[P, R]) -> Callable[P, R | None]:
    """verl calls these from its rollout and training paths: a failure here is logged once, never raised."""

    @functools.wraps(function)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return function(*args, **kwargs)
        except Exception:
            name = getattr(function, "__name__", "a call")
            if name not in _failed:
                _failed.add(name)
                logger.exception("rl-insight: %s failed; training goes on", name)
            return None

    return guarded


__version__ = "0.3.0"  # the RL-Insight API level implemented here (verl checks >= 0.3.0)

_run: RunInfo | None = None


def _runtime_and_run() -> tuple[runtime.Runtime, RunInfo]:
    rt = runtime.start()
    return rt, (_run or rt.current_run())


@_never_raises
def init(
    project: str | None = None,
    experiment_name: str | None = None,
    config: Mapping[str, object] | None = None,
    **_: object,
) -> None:
    global _run
    rt = runtime.start(trainer_config={"rl_insight": dict(config)} if config else None)
    if project is not None or experiment_name is not None:  # bare init(): the process's current run
        _run = rt.run(project, experiment_name)


@_never_raises
def metric_gauge(name: str, value: object, **_: object) -> None:
    rt, run = _runtime_and_run()
    rt.logs.put(run, {name: value}, None, time.time())  # the plugins see it off the caller's thread


@contextlib.contextmanager
def trace_state(state_name: str, state_lane_id: object = None, **labels: object) -> Iterator[None]:
    start_ns = time.time_ns()
    try:
        yield
    finally:
        trace_span(state_name, start_ns, time.time_ns(), dict(labels, state_lane_id=state_lane_id))


@_never_raises
def trace_span(name: str, start_time_ns: int, end_time_ns: int, attributes: Mapping[str, object] | None = None) -> None:
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
def update_prometheus_config(
    server_addresses: Iterable[object] | None,
    job_name: str | None = None,
    labels: Iterable[Mapping[str, object] | None] | None = None,
) -> None:
    rt, run = _runtime_and_run()
    per_address = list(labels or [])
    for i, address in enumerate(server_addresses or ()):
        extra = (per_address[i] if i < len(per_address) else None) or {}
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

    def __init__(self, identity: dict[str, object]) -> None:
        self.identity = identity
        self.start_ns = time.time_ns()
        self.finished = False

    @_never_raises
    def finish(self, **outcome: object) -> None:
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
    sample: object,
    session: object,
    traj: object = 0,
    uid: object = None,
    global_steps: object = None,
    session_id: object = None,
) -> AgentLoopSession:
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
