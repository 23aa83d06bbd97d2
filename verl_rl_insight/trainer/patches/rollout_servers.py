"""vLLM / SGLang rollout servers (``vllm_async_server``, ``async_sglang_server``).

On verl < 0.9: one RL state per ``generate`` call, on lane ``replica_<rank>``, and SGLang's
``enable_metrics`` switched on while rl_insight is enabled (verl 0.9 does both itself, through
its ``RLInsightLogger``, which trainer/patches/tracking.py routes here).
"""

import os
import time
from collections.abc import Callable
from typing import Any

import wrapt

from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.patches import unwrap
from verl_rl_insight.trainer.verl_api.tracking_backend import ENV_VERL_ENABLE

# module -> (server classes, state name)
SERVERS = {
    "verl.workers.rollout.vllm_rollout.vllm_async_server": (("vLLMHttpServerBase", "vLLMHttpServer"), "vllm_generate"),
    "verl.workers.rollout.sglang_rollout.async_sglang_server": (("SGLangHttpServer",), "sglang_generate"),
}


def _generate_wrapper(state: str) -> Any:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _timed(wrapped(*args, **kwargs), instance, state)

    return wrapper


async def _timed(coroutine: Any, server: Any, state: str) -> Any:
    start_ns = time.time_ns()
    try:
        return await coroutine
    finally:
        _report_span(server, state, start_ns)


def _report_span(server: Any, state: str, start_ns: int) -> None:
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


def _server_args(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if os.environ.get(ENV_VERL_ENABLE) == "1":
        kwargs["enable_metrics"] = True  # SGLang serves /metrics only when asked
    return wrapped(*args, **kwargs)


def install(module: Any) -> None:
    if getattr(module, "_rl_insight_installed", False) or hasattr(module, "RLInsightLogger"):
        return  # verl >= 0.9 reports these itself
    classes, state = SERVERS[module.__name__]
    for name in classes:
        cls = getattr(module, name, None)
        if cls is not None and "generate" in vars(cls):
            wrapt.wrap_function_wrapper(cls, "generate", _generate_wrapper(state))
    if "ServerArgs" in vars(module):
        wrapt.wrap_function_wrapper(module, "ServerArgs", _server_args)
    module._rl_insight_installed = True


def uninstall(module: Any) -> None:
    if not getattr(module, "_rl_insight_installed", False):
        return
    classes, _ = SERVERS[module.__name__]
    for name in classes:
        cls = getattr(module, name, None)
        if cls is not None:
            unwrap(cls, "generate")
    unwrap(module, "ServerArgs")
    module._rl_insight_installed = False
