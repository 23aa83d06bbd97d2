"""The hardware rows: GPUs (dcgm-exporter's series, by ``Hostname`` and ``gpu``), their faults, and the nodes."""

from verl_rl_insight.dashboards.panels import (
    RUN,
    Layout,
    timeseries,
)

GPU_FAULTS_ROW = "GPU faults: XID errors, ECC errors, clock throttling (where NVML reports them)"


def hardware_rows(layout: Layout) -> dict[str, str]:
    """GPU series carry dcgm-exporter's ``Hostname`` (not ``node``): the node selector filters on it."""
    gpu = f'{RUN},Hostname=~"$node",gpu=~"$gpu"'
    node = f'{RUN},node=~"$node"'
    layout.row("Hardware")
    layout.add(
        timeseries("GPU utilization", [(f"DCGM_FI_DEV_GPU_UTIL{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="percent")
    )
    layout.add(
        timeseries(
            "GPU memory used",
            [
                (
                    f"DCGM_FI_DEV_FB_USED{{{gpu}}} / (DCGM_FI_DEV_FB_USED{{{gpu}}} + DCGM_FI_DEV_FB_FREE{{{gpu}}})",
                    "{{Hostname}} gpu {{gpu}}",
                )
            ],
            unit="percentunit",
            thresholds=[(0.95, "red")],
        )
    )
    layout.add(
        timeseries("GPU power", [(f"DCGM_FI_DEV_POWER_USAGE{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="watt")
    )
    layout.add(
        timeseries("GPU temperature", [(f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")], unit="celsius")
    )
    layout.add(
        timeseries(
            "GPU PCIe throughput",
            [
                (f"DCGM_FI_PROF_PCIE_TX_BYTES{{{gpu}}}", "tx {{Hostname}} gpu {{gpu}}"),
                (f"DCGM_FI_PROF_PCIE_RX_BYTES{{{gpu}}}", "rx {{Hostname}} gpu {{gpu}}"),
            ],
            unit="Bps",
        )
    )
    layout.add(
        timeseries("Host CPU", [(f"rl_insight_host_cpu_utilization_percent{{{node}}}", "{{node}}")], unit="percent")
    )
    layout.add(
        timeseries("Host memory used", [(f"rl_insight_host_memory_used_bytes{{{node}}}", "{{node}}")], unit="bytes")
    )
    layout.add(
        timeseries(
            "Host network",
            [
                (f"rl_insight_host_network_receive_bytes_per_second{{{node}}}", "rx {{node}}"),
                (f"rl_insight_host_network_transmit_bytes_per_second{{{node}}}", "tx {{node}}"),
            ],
            unit="Bps",
        )
    )
    layout.add(
        timeseries(
            "Host disk",
            [
                (f"rl_insight_host_disk_read_bytes_per_second{{{node}}}", "read {{node}}"),
                (f"rl_insight_host_disk_written_bytes_per_second{{{node}}}", "write {{node}}"),
            ],
            unit="Bps",
        )
    )
    layout.row(GPU_FAULTS_ROW, collapsed=True)
    layout.add(
        timeseries(
            "XID errors (the last XID code per GPU)",
            [(f"DCGM_FI_DEV_XID_ERRORS{{{gpu}}}", "{{Hostname}} gpu {{gpu}}")],
            description="NVIDIA's XID code of the last critical error (e.g. 79: fell off the bus, 48: DBE, "
            "13/31/43: faults in user code); any value here deserves a look at dmesg on that node",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "ECC errors since the driver loaded",
            [
                (f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{gpu}}}", "corrected {{Hostname}} gpu {{gpu}}"),
                (f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{gpu}}}", "uncorrected {{Hostname}} gpu {{gpu}}"),
            ],
            description="uncorrected (double-bit) errors kill the process using that memory: drain the GPU",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Clock throttle reasons (bit mask)",
            [(f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{gpu}}} > 1", "{{Hostname}} gpu {{gpu}}")],
            description="NVML's throttle-reason bits, idle (1) left out: 4 power cap, 8 HW slowdown, 32 SW thermal, "
            "64 HW thermal, 128 power brake; a GPU held back slows every step",
        ),
        w=8,
    )
    return {GPU_FAULTS_ROW: "only when a GPU reports an XID, ECC error or throttling"}
