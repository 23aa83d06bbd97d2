"""The series beside the trainer's that "what moved with it" (``moved.py``) ranks with the trainer's
keys: the rollout engines' (vLLM ``vllm:*``, SGLang ``sglang:*``, per replica; the names of the
contract's list, ``contract/engine_metrics.py``), TransferQueue's (``tq_*``) and the GPUs' (DCGM's
names, ``DCGM_FI_*``, which the hardware plugin's NVML sampler reuses), read from Prometheus over the
steps' own time and made one value a step, so the same method ranks them.

A step runs from the step before's time to its own (the time the hub stamps a step's values with:
the end of the step). Over that window:
- a gauge is the mean of its samples (the engines' requests waiting, KV cache use, a GPU's
  utilization, clocks, temperature, memory);
- a counter is its increase (tokens generated, preemptions, TransferQueue requests: a count per
  step, not a rate, which the step's own length would make move with it);
- a histogram is its mean over the step: the increase of its ``_sum`` over that of its ``_count``
  (the engines' request latency, queue time, time to first token).
Each series is one per replica / GPU / TransferQueue unit, named with the labels that tell them
apart: ``vllm:num_requests_waiting{replica=0}``, ``DCGM_FI_DEV_GPU_UTIL{Hostname=n1,gpu=3}`` (``DROP``).
Left out: what grows with the step's length by construction (a GPU's energy counter, TransferQueue's
uptime), and histograms' buckets."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from verl_rl_insight.contract import engine_metrics
from verl_rl_insight.contract.promql import run_selector

Points = Sequence[tuple[float, float]]  # (time, value)
Samples = Iterable[tuple[Mapping[str, str], Points]]  # (labels, points) of a range query
Query = Callable[[str], Samples]
Series = list[tuple[int, float]]

CHUNK_S = 2 * 3600  # a range query covers at most this much time; a longer span is read in pieces
MARGIN_S = 60  # read from this long before the first step: a counter's value where a window starts
ENGINE = tuple(sorted(s for s in engine_metrics.all_series() if not s.endswith("_bucket")))
ENGINE_COUNTERS = frozenset(
    s for m in engine_metrics.METRICS if m.kind != "gauge" for s in m.series if not s.endswith("_bucket")
)
FAMILIES = ("tq_.+", "DCGM_FI_.+")
LEFT_OUT = ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "tq_controller_uptime_seconds")
# labels that say which run, which scrape or which device (by another name) a series is of: left out of
# its name; every other label stays in it (replica, Hostname, gpu, op_type, storage_unit_id, an engine's
# index inside a replica, ...), so two series are never read as one
DROP = frozenset(("__name__", "project", "experiment_name", "job", "instance", "le", "model_name", "simulated"))
DROP |= {"UUID", "device", "modelName", "pci_bus_id", "DCGM_FI_DRIVER_VERSION"}


def selector(project: str, experiment: str) -> str:
    """The PromQL selector of the run's engine, TransferQueue and GPU series."""
    names = "|".join([*(re.escape(n) for n in ENGINE), *FAMILIES])
    return f'{{__name__=~"{names}",{run_selector(project, experiment)[1:-1]}}}'


def is_counter(name: str) -> bool:
    """A counter (its increase over a step) or a gauge (its mean): the engines' by the contract's
    list, TransferQueue's and DCGM's by Prometheus' naming (``_total``, a histogram's ``_sum`` / ``_count``)."""
    if name.startswith(engine_metrics.ENGINES):
        return name in ENGINE_COUNTERS
    return name.endswith(("_total", "_sum", "_count")) and not name.startswith("DCGM_FI_")


def label(labels: Mapping[str, str]) -> str:
    """``name{replica=0}``: the series' name and the labels that tell it from its siblings (sorted)."""
    kept = ",".join(f"{k}={labels[k]}" for k in sorted(labels) if k not in DROP)
    return labels.get("__name__", "?") + (f"{{{kept}}}" if kept else "")


def read(query: Query, project: str, experiment: str, times: Sequence[tuple[int, float]]) -> dict[str, Series]:
    """{series: [(step, value)]} of the run's side series over the steps ``times`` ([(step, its
    time)], ascending): one range query a CHUNK_S of the steps' span."""
    if len(times) < 2:
        return {}
    low, at = times[0][1] - MARGIN_S, times[-1][1]
    points: dict[str, dict[float, float]] = {}
    names: dict[str, str] = {}
    while at > low:
        span = min(float(CHUNK_S), at - low)
        for labels, found in query(f"{selector(project, experiment)}[{math.ceil(span)}s] @ {at:.3f}"):
            name = labels.get("__name__", "")
            if name in LEFT_OUT or name.endswith("_bucket"):
                continue
            key = label(labels)
            names[key] = name
            into = points.setdefault(key, {})
            for t, v in found:
                into.setdefault(float(t), float(v))
        at -= span
    by_step = {key: per_step(sorted(values.items()), times, is_counter(names[key])) for key, values in points.items()}
    return histogram_means({k: v for k, v in by_step.items() if v})


def around(times: Sequence[tuple[int, float]], steps: Iterable[int]) -> list[tuple[int, float]]:
    """The part of ``times`` ([(step, its time)], ascending) from the step before the first of
    ``steps`` (where its window starts) to the last of them."""
    wanted = set(steps)
    inside = [i for i, (s, _) in enumerate(times) if s in wanted]
    return list(times[max(0, inside[0] - 1) : inside[-1] + 1]) if inside else []


def per_step(points: Points, times: Sequence[tuple[int, float]], counter: bool) -> Series:
    """One value for each step but the first (its window's start is unknown): the mean of a gauge's
    samples in (the step before's time, the step's time], a counter's increase over it (a reset:
    its value since)."""
    stamps = [t for t, _ in points]
    out: Series = []
    for (_, before), (step, at) in zip(times, times[1:]):
        first, last = bisect.bisect_right(stamps, before), bisect.bisect_right(stamps, at)
        if counter:
            if first == 0 or last == first:
                continue
            rise = points[last - 1][1] - points[first - 1][1]
            out.append((step, rise if rise >= 0 else points[last - 1][1]))
        elif last > first:
            inside = [v for _, v in points[first:last]]
            out.append((step, sum(inside) / len(inside)))
    return out


def histogram_means(series: Mapping[str, Series]) -> dict[str, Series]:
    """A histogram's ``_sum`` and ``_count`` as one series, ``_mean``: its mean over each step (a
    step with no observation left out); everything else as it is."""
    out: dict[str, Series] = {}
    for key, values in series.items():
        name, brace, labels = key.partition("{")
        base = name.removesuffix("_sum").removesuffix("_count")
        pair = (f"{base}_sum{brace}{labels}", f"{base}_count{brace}{labels}")
        if base == name or not all(k in series for k in pair):
            out[key] = values
        elif key == pair[0]:
            counts = dict(series[pair[1]])
            out[f"{base}_mean{brace}{labels}"] = [(s, v / counts[s]) for s, v in values if counts.get(s)]
    return out
