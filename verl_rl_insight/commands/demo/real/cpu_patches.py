"""The per-process part of the CPU shim (cpu_platform.py says why each exists): plain gloo for
torch.distributed, plain linear layers for vLLM. site/sitecustomize.py loads it into every Python
process of a real run on the CPU, Ray's own agents included, so it imports nothing but wrapt: with
verl and torch imported here (as cpu_platform does), each process took 10 s longer to start and
Ray's raylet, which waits 15 s for its dashboard agent, died at every start of the head."""

from __future__ import annotations

import types
from collections.abc import Callable


def _plain_gloo(
    wrapped: Callable[..., object], instance: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    backend = kwargs.get("backend", args[0] if args else None)
    if isinstance(backend, str) and set(backend.split(",")) == {"cpu:gloo"}:
        if args:
            args = ("gloo", *args[1:])
        else:
            kwargs["backend"] = "gloo"
    return wrapped(*args, **kwargs)


def _plain_linear(layer: object, remove_weight: bool) -> None:
    """vLLM's CPU dispatch, but the layer keeps its weight (verl's weight sync loads into it)."""
    import torch

    layer.cpu_linear = lambda x, weight, bias=None: torch.nn.functional.linear(x, weight, bias)  # type: ignore[attr-defined]


def install_process_patches() -> None:
    """In every process of the run: plain gloo for torch.distributed, plain linear layers for vLLM."""
    import wrapt

    def on_distributed(module: types.ModuleType) -> None:
        wrapt.wrap_function_wrapper(module, "init_process_group", _plain_gloo)

    def on_vllm_utils(module: types.ModuleType) -> None:
        module.__dict__["dispatch_cpu_unquantized_gemm"] = _plain_linear

    wrapt.register_post_import_hook(on_distributed, "torch.distributed.distributed_c10d")
    wrapt.register_post_import_hook(on_vllm_utils, "vllm.model_executor.layers.utils")
