"""``/api/v1/explorer/curves``: a run's curves by step, every series on the run's steps (aligned:
``series[k][i]`` is the value at ``steps[i]``), encoded once (msgspec: NaN and infinities become
null; ``nonfinite`` says where the trainer logged one)."""

from __future__ import annotations

import bisect

import msgspec

from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.server.explorer.keys import series_of
from verl_rl_insight.server.explorer.sources import Sources

_encode = msgspec.json.Encoder().encode


def curves_body(
    sources: Sources, run: tuple[str, str], keys: list[str], first: int | None = None, last: int | None = None
) -> bytes:
    """The answer's JSON bytes: ``{"steps", "times", "series": {key: [value|null]}, "nonfinite"}``."""
    history = sources.history(run)
    if history is None:
        raise NotFound(f"experiment_name: no steps of {run[0][:100]!r} / {run[1][:100]!r} here")
    with sources.histories.lock:
        lo = 0 if first is None else bisect.bisect_left(history.steps, first)
        hi = len(history.steps) if last is None else bisect.bisect_right(history.steps, last)
        steps = history.steps[lo:hi]
        series: dict[str, list[float] | list[None]] = {}
        nonfinite: dict[str, list[int]] = {}
        for key in keys:
            name = series_of(key)
            column = history.columns.get(name)
            series[key] = column[lo:hi].tolist() if column is not None else [None] * len(steps)
            odd = history.nonfinite.get(name)
            if odd:
                at = [i for i, step in enumerate(steps) if step in odd]
                if at:
                    nonfinite[key] = at
        answer: dict[str, object] = {"steps": steps, "times": history.times[lo:hi].tolist(), "series": series}
    if nonfinite:
        answer["nonfinite"] = nonfinite
    return _encode(answer)
