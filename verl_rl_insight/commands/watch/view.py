"""One frame of the terminal view, drawn with rich: fits 80x24 and uses what a larger terminal
gives (wider sparklines, more replicas)."""

import math
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Any, width: Any) -> Any:
    """The last ``width`` values as block characters, scaled between their min and max."""
    values = [v for v in values if v is not None and math.isfinite(v)][-width:]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low or 1.0
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int((v - low) / span * len(BLOCKS)))] for v in values)


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e4 or (value and abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.{digits}g}"


def percent(value: Any) -> Any:
    return "-" if value is None else f"{100 * value:.0f}%"


def frame(data: Any, width: int = 80, height: int = 24) -> Any:
    """The renderable for ``data`` (watch.data.snapshot) in a terminal of width x height."""
    state = "finished" if data["finished"] else "running"
    head = Text.assemble(
        (f"{data['project']}/{data['experiment']}", "bold"),
        f"  step {data['step']}",
        f"  step time {number(data['step_time_s'], 3)} s" if data["step_time_s"] is not None else "",
        f"  throughput {number(data['throughput'], 4)} tok/s" if data["throughput"] is not None else "",
        f"  ({state})",
    )
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
    parts = [head, curves]
    rows_left = max(2, height - 4 - len(data["curves"]) - 4 - len(data["alerts"]))
    for engine, replicas in data["engines"].items():
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
        parts.append(table)
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
    return Group(*parts)  # type: ignore[arg-type]  # rich's Text is renderable
