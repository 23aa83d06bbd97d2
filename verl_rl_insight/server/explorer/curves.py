"""``/api/v1/explorer/curves``: a run's curves by step, every series on the run's steps (aligned:
``series[k][i]`` is the value at ``steps[i]``), encoded once (msgspec: NaN and infinities become
null; ``nonfinite`` says where the trainer logged one).

Anyone may ask, so an answer is bounded and made once: at most ``MAX_CELLS`` values (past it,
every ``stride``-th step of the range, the last one always, and ``"stride"`` in the answer; a
narrower ``first``/``last`` gives every step of it), and kept per run until the run logs again
(``Sources.curves``: the last answer of each of 16 runs at most, all of them within
``max_curves_bytes``, a share of ``memory_limit_mb``), so a thousand askers share one body."""

from __future__ import annotations

import bisect

import msgspec

from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.explorer.keys import series_of
from verl_rl_insight.server.explorer.sources import Sources

_encode = msgspec.json.Encoder().encode
MAX_CELLS = 100_000  # values in one answer (about 2 MB of JSON): 64 keys x 1,562 steps


def stride_of(steps: int, keys: int) -> int:
    """Every how many steps an answer of ``steps`` x ``keys`` values takes one, to fit MAX_CELLS."""
    return max(1, -(-steps * max(keys, 1) // MAX_CELLS))


def cached_curves_body(
    sources: Sources, run: Run, keys: list[str], first: int | None = None, last: int | None = None
) -> bytes:
    """``curves_body``, made once per run and question until the run's history moves on."""
    history = sources.history(run)
    version = None if history is None else (id(history), history.version)
    question = (tuple(keys), first, last, version)
    with sources.curves_lock:
        held = sources.curves.get(run)
        if held is not None and held[0] == question:
            sources.curves.move_to_end(run)
            return held[1]
    body = curves_body(sources, run, keys, first, last)
    with sources.curves_lock:
        sources.curves.pop(run, None)
        if len(body) > sources.max_curves_bytes:
            return body  # larger than all kept answers may be: made for this request alone
        sources.curves[run] = (question, body)
        kept_bytes = sum(len(kept) for _, kept in sources.curves.values())
        while len(sources.curves) > sources.max_curves or kept_bytes > sources.max_curves_bytes:
            _, (_, gone) = sources.curves.popitem(last=False)
            kept_bytes -= len(gone)
    return body


def curves_body(
    sources: Sources, run: Run, keys: list[str], first: int | None = None, last: int | None = None
) -> bytes:
    """The answer's JSON bytes: ``{"steps", "times", "series": {key: [value|null]}, "nonfinite"}``."""
    history = sources.history(run)
    if history is None:
        raise NotFound(f"experiment_name: no steps of {run[0][:100]!r} / {run[1][:100]!r} here")
    with sources.histories.lock:
        lo = 0 if first is None else bisect.bisect_left(history.steps, first)
        hi = len(history.steps) if last is None else bisect.bisect_right(history.steps, last)
        stride = stride_of(hi - lo, len(keys))
        at = _taken(lo, hi, stride)
        steps = [history.steps[i] for i in at]
        series: dict[str, list[float] | list[None]] = {}
        nonfinite: dict[str, list[int]] = {}
        for key in keys:
            name = series_of(key)
            column = history.columns.get(name)
            series[key] = [column[i] for i in at] if column is not None else [None] * len(steps)
            odd = history.nonfinite.get(name)
            if odd:
                places = [i for i, step in enumerate(steps) if step in odd]
                if places:
                    nonfinite[key] = places
        times = [history.times[i] for i in at]
        answer: dict[str, object] = {"steps": steps, "times": times, "series": series}
    if stride > 1:
        answer["stride"] = stride
    if nonfinite:
        answer["nonfinite"] = nonfinite
    return _encode(answer)


def _taken(lo: int, hi: int, stride: int) -> list[int]:
    """The places of the steps an answer holds: every ``stride``-th of [lo, hi), and the last."""
    at = list(range(lo, hi, stride))
    if at and at[-1] != hi - 1:
        at.append(hi - 1)
    return at
