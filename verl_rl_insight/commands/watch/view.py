"""One frame of the terminal view, drawn with rich: fits 80x24 and uses what a larger terminal
gives (wider sparklines, more replicas)."""

import math
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float | None], width: int) -> str:
    """The last ``width`` values as block characters, scaled between their min and max."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low or 1.0
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int((v - low) / span * len(BLOCKS)))] for v in values)


def number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e4 or (value and abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.{digits}g}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


IDLE = "·"
STYLES = ("green", "cyan", "magenta", "yellow", "blue", "red", "bright_green", "bright_cyan", "bright_magenta")


def letters(states: list[str]) -> dict[str, str]:
    """A letter per state: its first letter, else that letter in upper case, else the next free letter of
    its name, else a digit (gen: g, vllm_generate: G)."""
    taken: dict[str, str] = {}
    for state in states:
        name = state.removeprefix("vllm_").removeprefix("sglang_")
        candidates = name[:1].lower() + name[:1].upper() + name.lower() + "0123456789"
        choice = next((c for c in candidates if c.isalnum() and c not in taken.values()), "?")
        taken[state] = choice
    return taken


def swimlane(timeline: dict[str, Any], width: int, rows: int) -> list[Text]:
    """The step's lanes as text: one row per lane, a column per slice of the step, the letter of the
    state that ran longest in it (``·``: idle); a legend below. At most ``rows`` lanes (trainer first)."""
    lanes: dict[str, list[list[Any]]] = timeline["lanes"]
    seconds = float(timeline["seconds"]) or 1.0
    label_width = min(14, max((len(lane) for lane in lanes), default=7))
    cols = max(10, width - label_width - 2)
    states = list(dict.fromkeys(state for spans in lanes.values() for state, _, _ in spans if state != "step"))
    mark = letters(states)
    style = {state: STYLES[i % len(STYLES)] for i, state in enumerate(states)}
    figures = timeline.get("figures") or {}
    tail = figures.get("long_tail_ratio")
    head = f"timeline of step {timeline['step']} ({number(seconds, 3)} s)"
    if tail is not None:
        head += f": long tail x{tail:.1f}, slowest {figures.get('slowest_replica') or '-'}"
    out: list[Text] = [Text(head, style="bold")]
    shown = list(lanes)[: max(1, rows)]
    for lane in shown:
        cover: list[tuple[float, str]] = [(0.0, "")] * cols
        for state, start, end in lanes[lane]:
            if state == "step":
                continue
            first, last = int(start / seconds * cols), min(cols - 1, int(end / seconds * cols))
            for col in range(max(0, first), last + 1):
                lo, hi = col * seconds / cols, (col + 1) * seconds / cols
                overlap = min(hi, end) - max(lo, start)
                if overlap > cover[col][0]:
                    cover[col] = (overlap, str(state))
        row = Text(f"{lane[:label_width]:<{label_width}} ")
        for _, state in cover:
            row.append(mark[state] if state else IDLE, style=style.get(state, "dim"))
        out.append(row)
    left = len(lanes) - len(shown) + int(timeline.get("lanes_left_out") or 0)
    legend = "  ".join(f"{mark[s]} {s}" for s in states)
    out.append(Text((f"... {left} more lanes; " if left else "") + f"{IDLE} idle  {legend}", style="dim"))
    return out


def frame(data: Mapping[str, Any], width: int = 80, height: int = 24) -> Group:
    """The renderable for ``data`` (watch.data.snapshot) in a terminal of width x height."""
    parts: list[Text | Table] = [head_line(data, width), curve_table(data, width)]
    rows_left = max(2, height - 4 - len(data["curves"]) - 4 - len(data["alerts"]))
    parts.extend(engine_tables(data["engines"], rows_left))
    timeline = data.get("timeline")
    if timeline and timeline.get("lanes"):
        used = 2 + len(data["curves"]) + sum(2 + len(r) for r in data["engines"].values()) + 2 + len(data["alerts"])
        parts.extend(swimlane(timeline, width, max(2, min(8, height - used - 2))))
    gpus = data["gpus"]
    if gpus:
        parts.append(
            Text(f"GPUs {gpus['count']}: utilisation {number(gpus['util'], 3)}%, memory {percent(gpus['memory'])} used")
        )
    if data["alerts"]:
        for name, severity, value in data["alerts"]:
            parts.append(
                Text(f"ALERT {name} ({severity}) value {number(float(value)) if value else '-'}", style="bold red")
            )
    else:
        parts.append(Text("no alerts firing", style="green"))
    return Group(*parts)


def head_line(data: Mapping[str, Any], width: int) -> Text:
    """The run, its step, step time and throughput on one line; the run's name gives way, the figures stay."""
    state = "finished" if data["finished"] else "running"
    rest = "".join(
        (
            f"  step {data['step']}",
            f"  step time {number(data['step_time_s'], 3)} s" if data["step_time_s"] is not None else "",
            f"  {number(data['throughput'], 4)} tok/s" if data["throughput"] is not None else "",
            f"  ({state})",
        )
    )
    run = f"{data['project']}/{data['experiment']}"
    if len(run) + len(rest) > width:
        run = run[: max(12, width - len(rest) - 1)] + "…"
    head = Text.assemble((run, "bold"), rest, no_wrap=True, overflow="ellipsis")
    head.truncate(width, overflow="ellipsis")
    return head


def curve_table(data: Mapping[str, Any], width: int) -> Table:
    """The key curves by step as sparklines, coloured against their thresholds where they have them."""
    spark_width = max(10, width - 40)
    curves = Table(box=None, pad_edge=False, show_header=True, header_style="dim", expand=False)
    curves.add_column("curve", no_wrap=True, min_width=13)
    curves.add_column(f"by step (last {spark_width})", no_wrap=True)
    curves.add_column("last", justify="right", no_wrap=True)
    for label, points, thresholds in data["curves"]:
        values = [v for _, v in points]
        last = values[-1] if values else None
        style = ""
        if thresholds and last is not None:
            style = "red" if last > thresholds[-1] else "yellow" if last > thresholds[0] else "green"
            label = f"{label} ({'/'.join(str(t) for t in thresholds)})"
        curves.add_row(
            label, Text(sparkline(values, spark_width), style=style or "cyan"), Text(number(last), style=style)
        )
    return curves


def engine_tables(engines: Mapping[str, Mapping[str, Mapping[str, float]]], rows_left: int) -> list[Table]:
    """One table per engine: each replica's requests running and waiting and its KV cache share."""
    tables = []
    for engine, replicas in engines.items():
        table = Table(box=None, pad_edge=False, header_style="dim")
        for column in (f"{engine} replica", "running", "waiting", "KV cache"):
            table.add_column(column, justify="right" if column != f"{engine} replica" else "left", no_wrap=True)
        shown = sorted(replicas, key=lambda r: (len(r), r))
        for replica in shown[:rows_left]:
            row = replicas[replica]
            table.add_row(
                replica or "-",
                number(row.get("running"), 3),
                number(row.get("waiting"), 3),
                percent(row.get("kv_cache")),
            )
        if len(shown) > rows_left:
            table.add_row(f"... {len(shown) - rows_left} more", "", "", "")
        tables.append(table)
    return tables
