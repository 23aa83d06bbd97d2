"""The monitor's own health: the hub's memory, what it refused or dropped."""

from verl_rl_insight.dashboards.panels import (
    Layout,
    timeseries,
)


def monitoring_rows(layout: Layout) -> None:
    """The monitor's own health: the hub's memory, what it refused or dropped, spans lost on the way."""
    layout.row("The monitor itself", collapsed=True)
    layout.add(
        timeseries(
            "Hub memory",
            [("rl_insight_hub_memory_bytes", "booked"), ("rl_insight_hub_memory_limit_bytes", "limit")],
            unit="bytes",
            description="what the hub holds against its share of memory_limit_mb; at the limit pushes are "
            "refused (422)",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Hub: refused and dropped",
            [
                ("increase(rl_insight_hub_rejected_pushes_total[5m])", "pushes refused"),
                ("increase(rl_insight_hub_history_evicted_unsent_total[5m])", "steps dropped before a scrape"),
                ("increase(rl_insight_hub_batches_lost_total[5m])", "steps the store never confirmed"),
                ("increase(rl_insight_hub_batches_resent_total[5m])", "steps sent again (a scrape not stored)"),
            ],
            description=(
                "pushes refused and steps dropped or never confirmed lost data: see rl-insight server status and "
                "the server log; steps sent again were not lost (a scrape the store did not get, sent again)"
            ),
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Hub: series and streams",
            [("rl_insight_hub_series", "series"), ("rl_insight_hub_streams", "streams")],
        ),
        w=8,
    )
