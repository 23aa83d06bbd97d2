"""The TransferQueue rows: the queue's own metrics, and the probe's storage capacity and accept queue
(reported only when configured)."""

from verl_rl_insight.dashboards.panels import (
    RATE,
    RUN,
    Layout,
    timeseries,
)


def transfer_queue_rows(layout: Layout) -> None:
    layout.row("TransferQueue")
    requests = f"sum by (op_type) (rate(tq_controller_request_total{{{RUN}}}{RATE}))"
    errors = f"sum by (op_type) (rate(tq_controller_request_errors_total{{{RUN}}}{RATE}))"
    layout.add(
        timeseries(
            "Controller requests and errors",
            [(requests, "{{op_type}}"), (f"{errors} or 0 * {requests}", "errors {{op_type}}")],
            unit="reqps",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Controller request latency",
            [
                (
                    f"histogram_quantile({q}, sum by (le, op_type) (rate(tq_controller_request_duration_seconds_bucket"
                    f"{{{RUN}}}{RATE})))",
                    f"p{int(q * 100)} {{{{op_type}}}}",
                )
                for q in (0.5, 0.99)
            ],
            unit="s",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Samples moved",
            [(f"sum by (op_type) (rate(tq_controller_request_samples_total{{{RUN}}}{RATE}))", "{{op_type}}")],
            unit="short",
            description="samples per second, by operation",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Partitions and samples",
            [
                (f"tq_partitions_total{{{RUN}}}", "partitions"),
                (f"tq_partition_samples_total{{{RUN}}}", "samples {{partition_id}}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Partition production progress",
            [
                (
                    f"max by (partition_id, task_name) (tq_partition_production_progress{{{RUN}}})",
                    "{{partition_id}} {{task_name}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Global indexes",
            [
                (f"tq_global_index_allocated_total{{{RUN}}}", "allocated"),
                (f"tq_global_index_reusable_total{{{RUN}}}", "reusable"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Process memory",
            [
                (f"tq_controller_memory_rss_bytes{{{RUN}}}", "controller"),
                (f"tq_storage_memory_rss_bytes{{{RUN}}}", "storage {{storage_unit_id}}"),
            ],
            unit="bytes",
        ),
        w=8,
    )
    layout.add(timeseries("Controller uptime", [(f"tq_controller_uptime_seconds{{{RUN}}}", "uptime")], unit="s"), w=8)
    layout.add(
        timeseries("Storage keys", [(f"tq_storage_active_keys_total{{{RUN}}}", "active {{storage_unit_id}}")]), w=8
    )
    layout.add(
        timeseries(
            "Storage requests: arrived and completed",
            [
                (
                    f"sum by (storage_unit_id) (rate(tq_storage_requests_arrived{{{RUN}}}{RATE}))",
                    "arrived {{storage_unit_id}}",
                ),
                (
                    f"sum by (storage_unit_id) (rate(tq_storage_request_ops{{{RUN}}}{RATE}))",
                    "completed {{storage_unit_id}}",
                ),
                (f"sum by (op_type) (rate(tq_storage_arrivals_by_op{{{RUN}}}{RATE}))", "arrived {{op_type}}"),
            ],
            unit="reqps",
            description="a gap between arrived and completed: requests that arrive and do not finish",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Storage request latency",
            [
                (f"tq_storage_request_latency_{kind}{{{RUN}}}", f"{kind} {{{{op_type}}}}")
                for kind in ("avg", "p50", "p99")
            ],
            unit="s",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "SSD offload", [(f"tq_storage_ssd_active_bytes{{{RUN}}}", "bytes on SSD {{storage_unit_id}}")], unit="bytes"
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "SSD offload values",
            [
                (f"tq_storage_ssd_active_values{{{RUN}}}", "on SSD {{storage_unit_id}}"),
                (f"tq_storage_ssd_fallback_values_total{{{RUN}}}", "kept in memory (no SSD encoding)"),
                (f"tq_storage_ssd_offload_enabled{{{RUN}}}", "offload enabled"),
            ],
        ),
        w=16,
    )


def transfer_queue_probe_rows(layout: Layout) -> dict[str, str]:
    title = "TransferQueue storage capacity and accept queue (with capacity set, or TQ_ACCEPT_PROBE_INTERVAL > 0)"
    layout.row(title, collapsed=True)
    layout.add(
        timeseries(
            "Storage utilization",
            [(f"max by (storage_unit_id) (tq_storage_utilization_ratio{{{RUN}}})", "{{storage_unit_id}}")],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(timeseries("Storage capacity", [(f"tq_storage_capacity_total{{{RUN}}}", "{{storage_unit_id}}")]), w=8)
    layout.add(
        timeseries(
            "Partition consumption progress",
            [
                (
                    f"max by (partition_id, task_name) (tq_partition_consumption_progress{{{RUN}}})",
                    "{{partition_id}} {{task_name}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Accept queue",
            [
                (f"tq_storage_accept_queue_backlog{{{RUN}}}", "backlog {{storage_unit_id}}"),
                (f"tq_storage_accept_queue_peak{{{RUN}}}", "peak {{storage_unit_id}}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Accept queue peak utilization",
            [
                (
                    f"max by (storage_unit_id) (tq_storage_accept_queue_peak_utilization_ratio{{{RUN}}})",
                    "{{storage_unit_id}}",
                )
            ],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Connection drops",
            [
                (f"tq_storage_socket_drops{{{RUN}}}", "socket drops {{storage_unit_id}}"),
                (f"tq_storage_listen_overflows{{{RUN}}}", "listen overflows {{storage_unit_id}}"),
                (f"tq_storage_listen_other_drops{{{RUN}}}", "other drops {{storage_unit_id}}"),
            ],
        ),
        w=8,
    )
    return {title: "storage capacity and the accept-queue probe are reported only when configured"}
