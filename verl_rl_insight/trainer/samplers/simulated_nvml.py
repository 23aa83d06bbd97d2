"""SIMULATED NVML, for the demo and the tests on machines without a GPU: the functions,
constants and error class of nvidia-ml-py's ``pynvml`` that the sampler uses, with the same
names and return shapes (tests/trainer/test_hardware.py checks every name against the real module).
Failures can be injected per (GPU index, function name); ``load`` moves utilisation and power."""

import threading
import types
from collections.abc import Callable, Collection, Mapping


class SimulatedLoad:
    """How busy the simulated GPUs are (0..1): the demo's simulation sets it per phase and hands
    this object to the hardware plugin (``hardware.Plugin(simulated_load=...)``)."""

    def __init__(self, level: float = 0.0) -> None:
        self._level = level
        self._lock = threading.Lock()

    def set(self, level: float) -> None:
        with self._lock:
            self._level = level

    def __call__(self) -> float:
        with self._lock:
            return self._level


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


CONSTANTS = {
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_UNKNOWN": 999,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "nvmlEventTypeXidCriticalError": 8,
}


def device_answers(load: Callable[[], float] | None) -> dict[str, Callable[..., object]]:
    """Per-GPU functions: (GPU index, the call's other arguments) -> what NVML returns."""

    def utilization(i: int) -> int:
        return 50 + i if load is None else round(load() * 95) + i

    def power_mw(i: int) -> int:
        return 350_000 + i if load is None else int(120_000 + load() * 500_000)

    return {
        "nvmlDeviceGetUUID": lambda i: f"GPU-0000000{i}-stand-in",
        "nvmlDeviceGetMinorNumber": lambda i: i,
        "nvmlDeviceGetName": lambda i: b"NVIDIA H200" if load is None else b"simulated NVIDIA H200",
        "nvmlDeviceGetUtilizationRates": lambda i: types.SimpleNamespace(gpu=utilization(i), memory=20 + i),
        "nvmlDeviceGetMemoryInfo": lambda i: types.SimpleNamespace(
            total=143771 * 2**20, used=(1000 + i) * 2**20, free=(143771 - 1000 - i) * 2**20
        ),
        "nvmlDeviceGetPowerUsage": power_mw,
        "nvmlDeviceGetTotalEnergyConsumption": lambda i: 9_000_000 + i,  # mJ
        "nvmlDeviceGetTemperature": lambda i, sensor: 60 + i,
        "nvmlDeviceGetClockInfo": lambda i, clock: 1980 if clock == 1 else 2619,
        "nvmlDeviceGetPcieThroughput": lambda i, counter: 1000 if counter == 0 else 2000,  # KB/s
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda i: 4,
        "nvmlDeviceGetTotalEccErrors": lambda i, kind, counter: 7 if kind == 0 else 0,
    }


def make_nvml(
    gpus: int = 2,
    failures: Mapping[tuple[int | None, str], int] | None = None,
    broken_handles: Collection[int] = (),
    xid: float | None = None,
    load: Callable[[], float] | None = None,
) -> types.SimpleNamespace:
    """``load``: a callable returning 0..1 (how busy the simulated GPUs are now), or None for fixed values."""
    failures = dict(failures or {})
    calls: dict[tuple[int | None, str], int] = {}
    n = types.SimpleNamespace(NVMLError=NVMLError, calls=calls, **CONSTANTS)

    def api(name: str, result: Callable[..., object]) -> Callable[..., object]:
        def call(handle: object = None, *args: object) -> object:
            index = handle if isinstance(handle, int) else None
            calls[(index, name)] = calls.get((index, name), 0) + 1
            if (index, name) in failures:
                raise NVMLError(failures[(index, name)])
            return result(index, *args)

        return call

    def handle_by_index(index: int) -> int:
        if index in broken_handles:
            raise NVMLError(999)
        return index

    def event_wait(events: object, timeout_ms: int) -> types.SimpleNamespace:
        if xid is None:
            raise NVMLError(10)  # NVML_ERROR_TIMEOUT: no event
        return types.SimpleNamespace(eventData=xid)

    n.__dict__.update({name: api(name, answer) for name, answer in device_answers(load).items()})
    n.nvmlInit = lambda: None
    n.nvmlShutdown = lambda: None
    n.nvmlDeviceGetCount = lambda: gpus
    n.nvmlDeviceGetHandleByIndex = handle_by_index
    n.nvmlEventSetCreate = lambda: "events"
    n.nvmlDeviceRegisterEvents = lambda handle, kind, events: None
    n.nvmlEventSetWait = event_wait
    return n
