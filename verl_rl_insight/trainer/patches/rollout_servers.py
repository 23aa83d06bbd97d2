"""vLLM / SGLang rollout servers (``vllm_async_server``, ``async_sglang_server``).

On verl < 0.9: one RL state per ``generate`` call, on lane ``replica_<rank>``, and SGLang's
``enable_metrics`` switched on while rl_insight is enabled (verl 0.9 does both itself, through
its ``RLInsightLogger``, which trainer/patches/tracking.py routes here).
"""

import os
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TypeVar

import wrapt

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE

T = TypeVar("T")

# module -> (server classes, state name)
SERVERS = {
    "verl.workers.rollout.vllm_rollout.vllm_async_server": (("vLLMHttpServerBase", "vLLMHttpServer"), "vllm_generate"),
    "verl.workers.rollout.sglang_rollout.async_sglang_server": (("SGLangHttpServer",), "sglang_generate"),
}


def _generate_wrapper(state: str) -> Callable[..., object]:
    def wrapper(
        wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        return _timed(wrapped(*args, **kwargs), instance, state)  # type: ignore[arg-type]  # verl's async generate

    return wrapper


async def _timed(coroutine: Awaitable[T], server: object, state: str) -> T:
    start_ns = time.time_ns()
    try:
        return await coroutine
    finally:
        _report_span(server, state, start_ns)


def _report_span(server: object, state: str, start_ns: int) -> None:
    """Never raises: it runs in the ``finally`` of verl's generate, where an error would replace verl's result."""
    try:
        rt = runtime.get_runtime() or (runtime.start() if os.environ.get(ENV_VERL_ENABLE) == "1" else None)
        if rt is not None:
            rank = getattr(server, "replica_rank", None)
            rt.hook.rl_insight_state_span(
                run=rt.current_run(),
                name=state,
                lane=f"replica_{rank}",
                start_ns=start_ns,
                end_ns=time.time_ns(),
                attributes={"replica": rank, "role": "rollout"},
            )
    except Exception:
        pass


def _server_args(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    if os.environ.get(ENV_VERL_ENABLE) == "1":
        kwargs["enable_metrics"] = True  # SGLang serves /metrics only when asked
    return wrapped(*args, **kwargs)


def install(module: ModuleType) -> None:
    if getattr(module, "_rl_insight_installed", False) or hasattr(module, "RLInsightLogger"):
        return  # verl >= 0.9 reports these itself
    classes, state = SERVERS[module.__name__]
    for name in classes:
        cls = getattr(module, name, None)
        if cls is not None and "generate" in vars(cls):
            wrapt.wrap_function_wrapper(cls, "generate", _generate_wrapper(state))
    if "ServerArgs" in vars(module):
        wrapt.wrap_function_wrapper(module, "ServerArgs", _server_args)
    module.__dict__["_rl_insight_installed"] = True


def uninstall(module: ModuleType) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    classes, _ = SERVERS[module.__name__]
    for name in classes:
        cls = getattr(module, name, None)
        if cls is not None:
            unwrap(cls, "generate")
    unwrap(module, "ServerArgs")
    module.__dict__["_rl_insight_installed"] = False
