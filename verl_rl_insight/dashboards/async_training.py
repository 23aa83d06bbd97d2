"""The async trainers' own row: verl's fully_async rollouter queues, the staleness of what it
generates beside the limit it pauses at, the processing time of a sample, the hybrid replicas.

verl builds these keys at run time (``fully_async/`` + the rollouter's ``get_statistics()`` and
the batch's ``processing_time/*``, verl/experimental/fully_async_policy: fully_async_rollouter.py,
detach_utils.py), so they are named once, in ``async_keys.py`` (``keys.RUNTIME_KEYS`` holds them too).
"""

from verl_rl_insight.dashboards.async_keys import PROCESSING, QUEUES
from verl_rl_insight.dashboards.panels import Layout, timeseries
from verl_rl_insight.dashboards.training import series

Panel = dict[str, object]  # a Grafana panel's JSON

ASYNC_ROW = "Async training: queues, staleness, processing time"
CONDITION = "in the fully async trainer (verl.experimental.fully_async_policy)"


def _since(key: str, legend: str) -> tuple[str, str]:
    """Seconds since the time.time() a key holds (0 until it happened)."""
    expr, shown = series(key, legend)
    return f"time() - ({expr} > 0)", shown


def async_panels() -> list[tuple[Panel, int]]:
    """(panel, width) of the async row, in order."""
    return [
        (
            timeseries(
                "Rollouter queues",
                [series(k, legend) for k, legend in QUEUES],
                description="the fully async rollouter's queues at each trained batch: samples waiting to be "
                "generated, generated ones waiting for the trainer (a growing message queue: the trainer is "
                "the bottleneck; an empty one: the rollout is)",
            ),
            8,
        ),
        (
            timeseries(
                "Stale samples against their limit",
                [
                    series("fully_async/count/staleness_samples", "stale samples (generated since the last sync)"),
                    series("fully_async/static/max_required_samples", "limit: the rollouter pauses here"),
                    series("fully_async/static/required_samples", "samples a step trains on"),
                ],
                description="samples generated with parameters older than the trainer's: at the limit, "
                "required_samples x (staleness_threshold + 1), the rollouter stops until the next "
                "parameter sync; staying at it means the rollout waits for the trainer",
            ),
            8,
        ),
        (
            timeseries(
                "Staleness threshold",
                [series("fully_async/static/staleness_threshold", "async_training.staleness_threshold")],
                description="how many steps' worth of samples may be generated ahead of the trainer's "
                "parameters (the setting behind the limit beside it)",
            ),
            8,
        ),
        (
            timeseries(
                "Processing time of a sample",
                [series(k, k.rsplit("/", 1)[1]) for k in PROCESSING],
                unit="s",
                description="generate_sequences' time of each sample in the trained batch: average, spread "
                "and tail (tp50 / tp95 / tp99)",
            ),
            12,
        ),
        (
            timeseries(
                "Hybrid rollout replicas",
                [
                    series("fully_async/hybrid/num_hybrid_replicas", "replicas on the trainer's GPUs"),
                ],
                description="rollout replicas the trainer's GPUs serve while the trainer waits",
            ),
            6,
        ),
        (
            timeseries(
                "Since a hybrid replica was added / removed",
                [
                    _since("fully_async/hybrid/last_add_time", "since the last add"),
                    _since("fully_async/hybrid/last_remove_time", "since the last remove"),
                ],
                unit="s",
            ),
            6,
        ),
    ]


def async_rows(layout: Layout) -> dict[str, str]:
    """The async row (collapsed); returns {row title: the condition its keys are logged under}."""
    layout.row(f"{ASYNC_ROW} ({CONDITION})", collapsed=True)
    for panel, width in async_panels():
        layout.add(panel, w=width, h=7)
    return {f"{ASYNC_ROW} ({CONDITION})": CONDITION}
