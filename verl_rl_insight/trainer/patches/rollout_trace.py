"""verl.utils.rollout_trace: ``actor_rollout_ref.rollout.trace.backend=rl_insight`` (or
``RolloutTraceConfig.init(..., backend="rl_insight")``) turns each traced agent-loop trajectory
into spans on the RL timeline and counts.

``rollout_trace_attr`` opens a trajectory (sample_index, step, rollout_n, validate,
experiment_name); every ``rollout_trace_op`` call inside it (a generate turn, a tool call, tool
parsing) is recorded with its duration and, with ``token2text``, bounded inputs and outputs;
when the trajectory ends, plugins get it whole (``rl_insight_trajectory``), with the reward and
turn count of the agent loop's output (``AgentLoopOutput`` from the traced ``run``: verl's
``_compute_score`` sets ``reward_score`` on that very object before the trajectory ends, when
rewards are scored per trajectory; otherwise it stays None and the span has no reward). verl decides which
samples are traced (``max_samples_per_step_per_worker``: the others run with ``trace=False``).
Other backends (weave, mlflow, trackio) go through verl's own code, untouched.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.hook_types import TracedOp, Trajectory

Func = Callable[..., Any]  # a traced method of verl's agent loops and tools (sync or async)

logger = logging.getLogger("verl_rl_insight")

BACKEND = "rl_insight"
MAX_TEXT = 1024  # characters of each input / output kept with token2text
MAX_OPS = 512  # ops kept per trajectory; later ones are counted, not kept
_trajectory: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar("rl_insight_trajectory", default=None)
_failed: set[str] = set()


def kind_of(qualname: str) -> tuple[str, str]:
    """(kind, span name) of a traced op from its qualified name."""
    method = qualname.rsplit(".", 1)[-1]
    if method == "generate":
        return "generate", "agent generate turn"
    if method == "execute":
        return "tool", "agent tool call"
    if "tool_call" in method or "parse" in method:
        return "tool_parse", "agent tool parsing"
    if method == "run":
        return "agent_loop", "agent loop run"
    return "op", f"agent op {qualname}"


def _bounded(value: object) -> str:
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text)} characters)"


def _module() -> ModuleType:
    """verl's rollout_trace (imported: these wrappers are installed into it)."""
    return sys.modules["verl.utils.rollout_trace"]


def _loaded() -> ModuleType | None:
    return sys.modules.get("verl.utils.rollout_trace")


def _ours() -> bool:
    module = _loaded()
    return module is not None and module.RolloutTraceConfig.get_backend() == BACKEND


def _emit(record: Trajectory) -> None:
    try:
        config = _module().RolloutTraceConfig.get_instance()
        rt = runtime.start()
        project, experiment = getattr(config, "project_name", None), getattr(config, "experiment_name", None)
        run = rt.run(project, experiment) if project and experiment else rt.current_run()
        rt.hook.rl_insight_trajectory(run=run, trajectory=record)
    except Exception:  # monitoring never breaks a rollout
        if "emit" not in _failed:
            _failed.add("emit")
            logger.exception("rl-insight: an agent-loop trajectory could not be recorded; rollouts go on")


def make_trace_attr(
    original: Callable[..., contextlib.AbstractContextManager[object]],
) -> Callable[..., contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def rollout_trace_attr(
        sample_index: int | None = None,
        step: int | None = None,
        rollout_n: int | None = None,
        name: str = "rollout_trace",
        validate: bool = False,
        trace: bool = True,
    ) -> Iterator[None]:
        with original(
            sample_index=sample_index, step=step, rollout_n=rollout_n, name=name, validate=validate, trace=trace
        ):
            if not trace or not _ours() or _trajectory.get() is not None:
                yield
                return
            config = _module().RolloutTraceConfig.get_instance()
            attributes = {
                "sample_index": sample_index,
                "step": step,
                "rollout_n": rollout_n,
                "validate": bool(validate),
                "experiment": getattr(config, "experiment_name", None),
                "trace_name": name,
            }
            kept: dict[str, object] = {k: v for k, v in attributes.items() if v is not None}
            record: Trajectory = {
                "start_ns": time.time_ns(),
                "attributes": kept,
                "ops": [],
                "ops_dropped": 0,
            }
            token = _trajectory.set(record)
            try:
                yield
            except BaseException as exc:
                record["error"] = type(exc).__name__
                raise
            finally:
                _trajectory.reset(token)
                record["end_ns"] = time.time_ns()
                kept.update(outcome(record.pop("output", None)))
                _emit(record)

    rollout_trace_attr.__wrapped_by_rl_insight__ = original  # type: ignore[attr-defined]
    return rollout_trace_attr


def outcome(output: object) -> dict[str, object]:
    """The reward and turn count an agent loop's output carries (verl's ``AgentLoopOutput``)."""
    found: dict[str, object] = {}
    reward = getattr(output, "reward_score", None)
    if isinstance(reward, (int, float)) and not isinstance(reward, bool) and reward == reward:
        found["reward"] = float(reward)
    turns = getattr(output, "num_turns", None)
    if isinstance(turns, int) and not isinstance(turns, bool):
        found["num_turns"] = turns
    return found


def _begin(
    func: Func, instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[TracedOp, dict[str, object] | None]:
    kind, span = kind_of(func.__qualname__)
    op: TracedOp = {
        "name": func.__qualname__,
        "kind": kind,
        "span_name": span,
        "start_ns": time.time_ns(),
        "attributes": {},
    }
    inputs = None
    if _module().RolloutTraceConfig.enable_token2text():
        try:
            bound = inspect.signature(func).bind(instance, *args, **kwargs)
            bound.apply_defaults()
            inputs = {k: v for k, v in bound.arguments.items() if k != "self"}
        except TypeError:
            inputs = None
    return op, inputs


def _end(record: Trajectory, op: TracedOp, error: BaseException | None = None, result: object = None) -> None:
    op["end_ns"] = time.time_ns()
    if error is not None:
        op["error"] = type(error).__name__
    if op["kind"] == "agent_loop" and result is not None:
        record.setdefault("output", result)  # read at the trajectory's end: the reward is set on it later
    if len(record["ops"]) < MAX_OPS:
        record["ops"].append(op)
    else:
        record["ops_dropped"] += 1


async def _texts(instance: object, inputs: dict[str, object], result: object) -> dict[str, str]:
    """token2text: prompt and response decoded as verl does it, bounded."""
    try:
        decoded = await _module()._add_token2text(instance, inputs, result)
    except Exception:
        decoded = result
    texts = {}
    if isinstance(decoded, dict):  # the decoded text first: token ids would crowd it out
        decoded = dict(decoded)
        texts = {key: _bounded(decoded.pop(key))[1:-1] for key in ("prompt_text", "response_text") if key in decoded}
    return {**texts, "input": _bounded(inputs), "output": _bounded(decoded)}


def make_trace_op(original: Callable[[Func], Func]) -> Callable[[Func], Func]:
    def rollout_trace_op(func: Func) -> Func:
        traced = original(func)  # verl's own wrapper: what weave, mlflow and trackio get

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(self: object, *args: object, **kwargs: object) -> object:
                record = _trajectory.get()
                if record is None or not _ours():
                    return await traced(self, *args, **kwargs)
                op, inputs = _begin(func, self, args, kwargs)
                try:
                    result = await func(self, *args, **kwargs)
                except BaseException as exc:
                    _end(record, op, exc)
                    raise
                if inputs is not None:
                    op["attributes"].update(await _texts(self, inputs, result))
                _end(record, op, result=result)
                return result

            return async_wrapper

        @functools.wraps(func)
        def wrapper(self: object, *args: object, **kwargs: object) -> object:
            record = _trajectory.get()
            if record is None or not _ours():
                return traced(self, *args, **kwargs)
            op, inputs = _begin(func, self, args, kwargs)
            try:
                result = func(self, *args, **kwargs)
            except BaseException as exc:
                _end(record, op, exc)
                raise
            if inputs is not None:
                op["attributes"].update({"input": _bounded(inputs), "output": _bounded(result)})
            _end(record, op, result=result)
            return result

        return wrapper

    rollout_trace_op.__wrapped_by_rl_insight__ = original  # type: ignore[attr-defined]
    return rollout_trace_op


def install(module: ModuleType) -> None:
    if getattr(module, "_rl_insight_installed", False):
        return
    module.__dict__.update(
        rollout_trace_attr=make_trace_attr(module.rollout_trace_attr),
        rollout_trace_op=make_trace_op(module.rollout_trace_op),
        _rl_insight_installed=True,
    )


def uninstall(module: ModuleType) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    for name in ("rollout_trace_attr", "rollout_trace_op"):
        current = getattr(module, name)
        setattr(module, name, getattr(current, "__wrapped_by_rl_insight__", current))
    module.__dict__["_rl_insight_installed"] = False
