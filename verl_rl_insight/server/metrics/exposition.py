"""The Prometheus text exposition format (version 0.0.4): values, label sets, whole bodies.

Only names that the push's check accepted reach here (``contract/wire.py``, ``check_metric_names``:
full-match checked), and label values are escaped, so a line can never break the body.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence

from verl_rl_insight.contract.naming import format_special

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def format_value(value: float) -> str:
    return repr(value) if math.isfinite(value) else format_special(value)


def series_lines(
    labels: str, names: Iterable[str], values: Iterable[float], timestamp_ms: int | None = None
) -> list[tuple[str, str]]:
    """(name, line) for each sample of one label set, with an optional timestamp."""
    stamp = "" if timestamp_ms is None else f" {timestamp_ms}"
    return [(name, f"{name}{{{labels}}} {format_value(value)}{stamp}") for name, value in zip(names, values)]


def body(families: Mapping[str, list[str]], trailer: Sequence[str] = ()) -> bytes:
    """One exposition: ``families`` maps a metric name to its lines (grouped under one TYPE line,
    in order); ``trailer`` lines (already typed) come last. Encoded family by family, letting
    other threads run in between (see ``pause``)."""
    chunks: list[bytes] = []
    for name in sorted(families):
        chunks.append(f"# TYPE {name} gauge\n".encode())
        chunks.append(("\n".join(families[name]) + "\n").encode())
        pause()
    chunks.append(("\n".join(trailer) + "\n").encode() if trailer else b"")
    return b"".join(chunks)


_last_pause = [0.0]


def pause(every_s: float = 0.002) -> None:
    """Let other threads take the GIL when this thread has had it for ``every_s``: a long rendering
    otherwise holds it for whole switch intervals (5 ms) at a time, and a push that needs it
    several times over waits them all out."""
    now = time.perf_counter()
    if now - _last_pause[0] >= every_s:
        time.sleep(0)
        _last_pause[0] = time.perf_counter()
