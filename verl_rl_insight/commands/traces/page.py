"""``profile analyze -o FILE.html``: one self-contained page. The answer; per phase a table of the
ranks (work, waiting, the GPU's parts, verdict) and, aligned at each rank's start of the phase,
its host lane (in the phase, waiting in collectives) with its GPU lane under it (compute kernels,
memcpy / memset, NCCL kernels; idle time shaded)."""

from __future__ import annotations

import html

from verl_rl_insight.commands.traces.gpu_time import GpuTime
from verl_rl_insight.commands.traces.intervals import Span
from verl_rl_insight.commands.traces.render import gpu_cells, waiting_cell
from verl_rl_insight.commands.traces.telling import duration
from verl_rl_insight.commands.traces.views import PhaseView, StepView

WIDTH = 1000  # the lanes' drawing units across the longest rank's phase

STYLE = (
    "body{font:14px sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
    ".slowest td{font-weight:bold}.lanes{margin:.5em 0 1.5em}.lanes div{display:flex;align-items:center}"
    ".lanes span{width:14em;font-size:12px}.lanes svg{flex:1;height:14px;margin:1px 0}"
    ".host{fill:#9ab}.wait{fill:#e0a030}.idle{fill:#eee}.compute{fill:#3b7dd8}.memory{fill:#3aa35a}"
    ".comm{fill:#e0a030}.key i{display:inline-block;width:1em;height:.8em;margin:0 .3em 0 1em}"
)
KEY = (
    "<p class='key'>host lane: <i style='background:#9ab'></i>in the phase <i style='background:#e0a030'></i>"
    "waiting in a collective; GPU lane: <i style='background:#3b7dd8'></i>compute kernels "
    "<i style='background:#3aa35a'></i>memcpy / memset <i style='background:#e0a030'></i>NCCL kernels "
    "<i style='background:#eee'></i>idle</p>"
)


def _rects(spans: list[Span], scale: float, cls: str) -> str:
    return "".join(
        f"<rect class='{cls}' x='{start * scale:.2f}' y='0' width='{max((end - start) * scale, 0.3):.2f}' height='10'/>"
        for start, end in spans
    )


def _svg(body: str, title: str) -> str:
    return f"<svg viewBox='0 0 {WIDTH} 10' preserveAspectRatio='none'><title>{html.escape(title)}</title>{body}</svg>"


def _lanes(phase: PhaseView) -> str:
    longest = max(r.time.duration_s for r in phase.ranks) or 1.0
    scale = WIDTH / longest
    rows = []
    for r in phase.ranks:
        took = r.time.duration_s * scale
        gpu: GpuTime | None = r.time.gpu
        host = f"<rect class='host' x='0' y='0' width='{took:.2f}' height='10'/>"
        if gpu is not None:
            host += _rects(gpu.lanes.host_waiting, scale, "wait")
        rows.append(f"<div><span>rank {html.escape(r.who)} host</span>{_svg(host, f'rank {r.who} host')}</div>")
        if gpu is None:
            continue
        device = f"<rect class='idle' x='0' y='0' width='{took:.2f}' height='10'/>"
        device += _rects(gpu.lanes.compute, scale, "compute") + _rects(gpu.lanes.memory, scale, "memory")
        device += _rects(gpu.lanes.communication, scale, "comm")
        label = f"rank {r.who} GPU ({gpu.verdict})"
        rows.append(f"<div data-lane='gpu'><span>{html.escape(label)}</span>{_svg(device, label)}</div>")
    return f"<div class='lanes' data-phase='{html.escape(phase.phase)}'>{''.join(rows)}</div>"


def _table(phase: PhaseView) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("rank", "node", "took", "work", "waiting", "GPU busy", "comm", "host", "kernels", "peak mem")
    )
    rows = []
    for r in phase.ranks:
        cls = " class='slowest'" if r is phase.slowest and phase.held else ""
        cells = [
            f"rank {r.who}",
            r.node or "?",
            duration(r.time.duration_s),
            duration(r.time.busy_s),
            waiting_cell(r.time.waiting_s, r.time.duration_s, r.time.waiting_by_op),
            *gpu_cells(r.time.gpu),
        ]
        rows.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}<th>verdict</th></tr>{''.join(rows)}</table>"


def html_page(view: StepView) -> str:
    """The page: the answer, then each phase's table and its rank lanes, aligned at the phase's start."""
    title = f"step {view.step}" if view.step is not None else "profiled step"
    body = "".join(f"<h2>{html.escape(p.phase)}</h2>{_table(p)}{_lanes(p)}" for p in view.phases)
    return (
        f"<!doctype html><meta charset='utf-8'><title>rl-insight: {html.escape(title)}</title>"
        f"<style>{STYLE}</style><h1>{html.escape(title)}</h1><p><b>{html.escape(view.answer)}</b></p>{KEY}{body}"
    )
