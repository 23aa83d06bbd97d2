"""SIMULATED NVML, for the demo and the tests on machines without a GPU: the functions,
constants and error class of nvidia-ml-py's ``pynvml`` that the sampler uses, with the same
names and return shapes (tests/test_hardware.py checks every name against the real module).
Failures can be injected per (GPU index, function name); ``load`` moves utilisation and power."""

import types
from typing import Any

# How busy the simulated GPUs are (0..1): the demo's simulation sets it per phase.
load_level = [0.0]


class NVMLError(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def make_nvml(gpus: int = 2, failures: Any = None, broken_handles: Any = (), xid: Any = None, load: Any = None) -> Any:
    """``load``: a callable returning 0..1 (how busy the simulated GPUs are now), or None for fixed values."""
    failures = dict(failures or {})
    calls: dict[Any, int] = {}
    n = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_ERROR_TIMEOUT=10,
        NVML_ERROR_UNKNOWN=999,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        nvmlEventTypeXidCriticalError=8,
        calls=calls,
    )

    def api(name: str, result: Any) -> None:
        def call(handle: Any = None, *args: object) -> Any:
            index = handle if isinstance(handle, int) else None
            calls[(index, name)] = calls.get((index, name), 0) + 1
            if (index, name) in failures:
                raise NVMLError(failures[(index, name)])
            return result(index, *args) if callable(result) else result

        setattr(n, name, call)

    n.nvmlInit = lambda: None
    n.nvmlShutdown = lambda: None
    n.nvmlDeviceGetCount = lambda: gpus

    def handle_by_index(index: Any) -> Any:
        if index in broken_handles:
            raise NVMLError(999)
        return index

    n.nvmlDeviceGetHandleByIndex = handle_by_index
    api("nvmlDeviceGetUUID", lambda i: f"GPU-0000000{i}-stand-in")
    api("nvmlDeviceGetMinorNumber", lambda i: i)
    api("nvmlDeviceGetName", lambda i: b"NVIDIA H200" if load is None else b"simulated NVIDIA H200")

    def busy() -> Any:
        return load() if load is not None else None

    api(
        "nvmlDeviceGetUtilizationRates",
        lambda i: types.SimpleNamespace(gpu=50 + i if busy() is None else round(busy() * 95) + i, memory=20 + i),
    )
    api(
        "nvmlDeviceGetMemoryInfo",
        lambda i: types.SimpleNamespace(
            total=143771 * 2**20, used=(1000 + i) * 2**20, free=(143771 - 1000 - i) * 2**20
        ),
    )
    api("nvmlDeviceGetPowerUsage", lambda i: 350_000 + i if busy() is None else int(120_000 + busy() * 500_000))
    api("nvmlDeviceGetTotalEnergyConsumption", lambda i: 9_000_000 + i)  # mJ
    api("nvmlDeviceGetTemperature", lambda i, sensor: 60 + i)
    api("nvmlDeviceGetClockInfo", lambda i, clock: 1980 if clock == 1 else 2619)
    api("nvmlDeviceGetPcieThroughput", lambda i, counter: 1000 if counter == 0 else 2000)  # KB/s
    api("nvmlDeviceGetCurrentClocksThrottleReasons", lambda i: 4)
    api("nvmlDeviceGetTotalEccErrors", lambda i, kind, counter: 7 if kind == 0 else 0)
    n.nvmlEventSetCreate = lambda: "events"
    n.nvmlDeviceRegisterEvents = lambda handle, kind, events: None

    def event_wait(events: Any, timeout_ms: Any) -> Any:
        if xid is None:
            raise NVMLError(10)  # NVML_ERROR_TIMEOUT: no event
        return types.SimpleNamespace(eventData=xid)

    n.nvmlEventSetWait = event_wait
    return n
