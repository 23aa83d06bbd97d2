"""Samplers for the hardware plugin: NVIDIA GPUs through NVML, the host through /proc.

GPU series reuse the DCGM exporter's names, units and labels (``gpu``, ``UUID``, ``device``,
``modelName``, ``Hostname``), so dashboards built for dcgm-exporter work on this data. An NVML
error on one field or one GPU skips that field or GPU only; a field the driver does not
support is not asked again.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from types import ModuleType, SimpleNamespace

# the nvidia-ml-py module (``pynvml``), or simulated_nvml's namespace of the same names
Nvml = ModuleType | SimpleNamespace
Labels = dict[str, str]
Read = Callable[[], float]

HOSTNAME = socket.gethostname()


class GpuSampler:
    """``extra_labels``: added to every GPU's labels (``simulated="true"`` on the demo's GPUs)."""

    def __init__(self, nvml: Nvml, extra_labels: dict[str, str] | None = None) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.gpus = []
        self.unsupported: set[tuple[int, str]] = set()  # (gpu index, field)
        self.errors = 0
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                labels = {
                    "gpu": str(index),
                    "UUID": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "device": f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}",
                    "modelName": _text(nvml.nvmlDeviceGetName(handle)),
                    "Hostname": HOSTNAME,
                    **(extra_labels or {}),
                }
            except nvml.NVMLError:
                self.errors += 1
                continue
            self.gpus.append((index, handle, labels, self._xid_events(handle)))

    def _xid_events(self, handle: object) -> object | None:
        nvml = self.nvml
        try:
            events: object = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            return events
        except (nvml.NVMLError, AttributeError):
            return None

    def fields(self, handle: object, events: object | None) -> list[tuple[str, Read]]:
        """(DCGM name, function returning the value) for one GPU."""
        n = self.nvml

        def memory(attr: str) -> Read:
            return lambda: getattr(n.nvmlDeviceGetMemoryInfo(handle), attr) / 2**20  # DCGM: MiB

        def pcie(counter: int) -> float:
            return float(n.nvmlDeviceGetPcieThroughput(handle, counter)) * 1024  # NVML: KB/s; DCGM: B/s

        def xid() -> float:
            data = n.nvmlEventSetWait(events, 0)  # 0 ms: never waits
            return float(data.eventData)

        return [
            ("DCGM_FI_DEV_GPU_UTIL", lambda: n.nvmlDeviceGetUtilizationRates(handle).gpu),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", lambda: n.nvmlDeviceGetUtilizationRates(handle).memory),
            ("DCGM_FI_DEV_FB_USED", memory("used")),
            ("DCGM_FI_DEV_FB_FREE", memory("free")),
            ("DCGM_FI_DEV_FB_TOTAL", memory("total")),
            ("DCGM_FI_DEV_POWER_USAGE", lambda: n.nvmlDeviceGetPowerUsage(handle) / 1000),  # W
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lambda: n.nvmlDeviceGetTotalEnergyConsumption(handle)),  # mJ
            ("DCGM_FI_DEV_GPU_TEMP", lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
            ("DCGM_FI_DEV_SM_CLOCK", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            ("DCGM_FI_DEV_MEM_CLOCK", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM)),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", lambda: pcie(n.NVML_PCIE_UTIL_TX_BYTES)),
            ("DCGM_FI_PROF_PCIE_RX_BYTES", lambda: pcie(n.NVML_PCIE_UTIL_RX_BYTES)),
            ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", lambda: n.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
            (
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                lambda: n.nvmlDeviceGetTotalEccErrors(handle, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
            ),
            (
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                lambda: n.nvmlDeviceGetTotalEccErrors(
                    handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
                ),
            ),
        ] + ([("DCGM_FI_DEV_XID_ERRORS", xid)] if events is not None else [])

    def sample(self) -> list[tuple[Labels, dict[str, float]]]:
        """[(labels, {DCGM name: value})], one entry per GPU that answered anything."""
        n = self.nvml
        out = []
        for index, handle, labels, events in self.gpus:
            values = {}
            for name, read in self.fields(handle, events):
                if (index, name) in self.unsupported:
                    continue
                try:
                    values[name] = float(read())
                except n.NVMLError as exc:
                    if name == "DCGM_FI_DEV_XID_ERRORS" and _is(n, exc, "NVML_ERROR_TIMEOUT"):
                        continue  # no new XID event: nothing to report
                    if _is(n, exc, "NVML_ERROR_NOT_SUPPORTED"):
                        self.unsupported.add((index, name))
                    self.errors += 1
            if values:
                out.append((labels, values))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _is(nvml: Nvml, exc: Exception, code_name: str) -> bool:
    return getattr(exc, "value", None) == getattr(nvml, code_name, object())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HostSampler:
    """CPU, memory, load, network and disk of this node, from /proc (rates between two samples)."""

    def __init__(self, proc: str = "/proc", sys_block: str = "/sys/block") -> None:
        self.proc = proc
        self.sys_block = sys_block
        self._last: tuple[float, ...] | None = None

    def _cpu(self) -> tuple[float, float]:
        with open(f"{self.proc}/stat") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
        idle = parts[3] + (parts[4] if len(parts) > 4 else 0.0)  # idle + iowait
        return sum(parts), idle

    def _meminfo(self) -> dict[str, float]:
        info = {}
        with open(f"{self.proc}/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = float(rest.split()[0]) * 1024
        return info

    def _net(self) -> tuple[float, float]:
        rx = tx = 0.0
        with open(f"{self.proc}/net/dev") as f:
            for line in f.readlines()[2:]:
                name, _, rest = line.partition(":")
                if name.strip() == "lo":
                    continue
                fields = rest.split()
                rx += float(fields[0])
                tx += float(fields[8])
        return rx, tx

    def _disk(self) -> tuple[float, float]:
        disks = set(os.listdir(self.sys_block)) if os.path.isdir(self.sys_block) else None
        read = written = 0.0
        with open(f"{self.proc}/diskstats") as f:
            for line in f:
                fields = line.split()
                name = fields[2]
                if name.startswith(("loop", "ram")) or (disks is not None and name not in disks):
                    continue  # whole disks only: partitions would count twice
                read += float(fields[5]) * 512
                written += float(fields[9]) * 512
        return read, written

    def sample(self) -> dict[str, float]:
        now = time.monotonic()
        cpu_total, cpu_idle = self._cpu()
        net_rx, net_tx = self._net()
        disk_read, disk_written = self._disk()
        mem = self._meminfo()
        load1, load5, load15 = os.getloadavg()
        values = {
            "rl_insight_host_memory_total_bytes": mem.get("MemTotal", 0.0),
            "rl_insight_host_memory_available_bytes": mem.get("MemAvailable", 0.0),
            "rl_insight_host_memory_used_bytes": mem.get("MemTotal", 0.0) - mem.get("MemAvailable", 0.0),
            "rl_insight_host_load1": load1,
            "rl_insight_host_load5": load5,
            "rl_insight_host_load15": load15,
            "rl_insight_host_cpu_count": float(os.cpu_count() or 0),
        }
        current = (now, cpu_total, cpu_idle, net_rx, net_tx, disk_read, disk_written)
        if self._last is not None:
            t0, total0, idle0, rx0, tx0, r0, w0 = self._last
            dt = max(now - t0, 1e-6)
            busy = (cpu_total - total0) - (cpu_idle - idle0)
            values["rl_insight_host_cpu_utilization_percent"] = 100.0 * busy / max(cpu_total - total0, 1e-9)
            values["rl_insight_host_network_receive_bytes_per_second"] = (net_rx - rx0) / dt
            values["rl_insight_host_network_transmit_bytes_per_second"] = (net_tx - tx0) / dt
            values["rl_insight_host_disk_read_bytes_per_second"] = (disk_read - r0) / dt
            values["rl_insight_host_disk_written_bytes_per_second"] = (disk_written - w0) / dt
        self._last = current
        return values
