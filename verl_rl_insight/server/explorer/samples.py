"""``/api/v1/explorer/samples``: the rollouts behind a step (plugin ``samples``: its spans on the
``samples`` lane, what ``rl-insight samples`` reads), worst / best / mismatch in rank order.

``groups`` (a sample's whole group) and ``validation`` (a validation step's generations) come from
the samples plugin's span->rows function (contract/samples.py) once it is there; empty until then."""

from __future__ import annotations

from collections.abc import Sequence

from verl_rl_insight.server.explorer.sources import SpanRecord

KINDS = ("worst", "best", "mismatch")
Row = dict[str, object]


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def rows_of(spans: Sequence[SpanRecord], step: int) -> list[Row]:
    rows = []
    for span in spans:
        attrs = span.get("attributes")
        if not isinstance(attrs, dict) or attrs.get("state_lane_id") != "samples" or "sample.kind" not in attrs:
            continue
        if attrs.get("verl.step") != step:
            continue
        length = _number(attrs.get("sample.length"))
        rank = _number(attrs.get("sample.rank"))
        rows.append(
            {
                "kind": str(attrs.get("sample.kind")),
                "rank": int(rank) if rank is not None else 0,
                "score": _number(attrs.get("sample.score")),
                "length": int(length) if length is not None else None,
                "data_source": _text(attrs.get("sample.data_source")),
                "prompt": _text(attrs.get("sample.prompt")) or "",
                "response": _text(attrs.get("sample.response")) or "",
            }
        )
    rows.sort(key=lambda r: (KINDS.index(str(r["kind"])) if r["kind"] in KINDS else 9, r["rank"]))
    return rows


def samples_answer(spans: Sequence[SpanRecord], run: tuple[str, str], step: int) -> dict[str, object]:
    """The step's samples (none: the plugin is off, by default, or the step had none kept)."""
    return {"step": step, "samples": rows_of(spans, step), "groups": [], "validation": []}
