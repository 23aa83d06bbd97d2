"""NVTX traces as ``nsys export --type jsonlines`` writes them (``worker_process_<PID>.<RID>.jsonl``):
one JSON object a line, read a line at a time. Tables used: ``StringIds`` (names), ``NVTX_EVENTS``
(push/pop and start/end ranges: verl's phase marks, NCCL's own ranges), ``CUPTI_ACTIVITY_KIND_KERNEL``
(NCCL kernels), ``META_DATA_CAPTURE`` (the process's ``RANK=`` and ``HOSTNAME=``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from verl_rl_insight.commands.traces import phases as names
from verl_rl_insight.commands.traces.intervals import Span
from verl_rl_insight.commands.traces.summary import BadTrace, FileSummary, phase_times

NS = 1e-9
RANGE_TYPES = (59, 60)  # NvtxStartEndRange, NvtxPushPopRange
_ENV = re.compile(r'^(RANK|HOSTNAME)="?([^"]*)"?$')


class _Lines:
    def __init__(self) -> None:
        self.strings: dict[int, str] = {}
        self.pending: list[tuple[int, Span, bool]] = []  # named by an id not seen yet
        self.phases: dict[str, list[Span]] = {}
        self.collectives: dict[str, list[Span]] = {}
        self.env: dict[str, str] = {}
        self.rows = 0

    def name(self, text: str, span: Span, is_range: bool) -> None:
        phase = names.PHASE_OF.get(text) if is_range else None
        if phase is not None:
            self.phases.setdefault(phase, []).append(span)
            return
        op = names.collective(text)
        if op is not None:
            self.collectives.setdefault(op, []).append(span)

    def add(self, row: dict[str, object]) -> None:
        self.rows += 1
        table = row.get("table")
        if table == "StringIds" and isinstance(row.get("id"), int) and isinstance(row.get("value"), str):
            self.strings[int(row["id"])] = str(row["value"])  # type: ignore[call-overload]
        elif table == "META_DATA_CAPTURE" and "ENVIRONMENT_VARIABLE" in str(row.get("name", "")):
            found = _ENV.match(str(row.get("value", "")).strip())
            if found:
                self.env[found.group(1)] = found.group(2)
        elif table == "NVTX_EVENTS" and row.get("eventType") in RANGE_TYPES:
            self._timed(row, "text", "textId", True)
        elif table == "CUPTI_ACTIVITY_KIND_KERNEL":
            self._timed(row, "", "shortName", False)

    def _timed(self, row: dict[str, object], text_key: str, id_key: str, is_range: bool) -> None:
        start, end = row.get("start"), row.get("end")
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            return
        span = (float(start), float(end))
        if not (math.isfinite(span[0]) and math.isfinite(span[1])) or span[1] < span[0]:
            return
        text, text_id = row.get(text_key), row.get(id_key)
        if isinstance(text, str):
            self.name(text, span, is_range)
        elif isinstance(text_id, int):
            if text_id in self.strings:
                self.name(self.strings[text_id], span, is_range)
            else:
                self.pending.append((text_id, span, is_range))

    def resolve(self) -> None:
        for text_id, span, is_range in self.pending:
            if text_id in self.strings:
                self.name(self.strings[text_id], span, is_range)
        self.pending = []


def read_nvtx(path: Path) -> FileSummary:
    """One process's NVTX export: its rank (``RANK=`` in the captured environment), its phases."""
    lines = _Lines()
    number = 0
    try:
        with path.open("rb") as stream:
            for raw in stream:
                number += 1
                if raw.strip():
                    row = json.loads(raw, parse_constant=lambda _: None)  # NaN, Infinity: no number
                    if isinstance(row, dict):
                        lines.add(row)
    except json.JSONDecodeError as exc:
        raise BadTrace(str(path), f"line {number} is not whole JSON ({exc.msg}): a cut file?") from None
    except RecursionError:
        raise BadTrace(str(path), f"line {number} nests deeper than the JSON decoder goes") from None
    except ValueError as exc:  # a number of more digits than Python converts
        raise BadTrace(str(path), f"line {number}: {str(exc)[:120]}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadTrace(str(path), f"cannot be read ({exc})") from None
    lines.resolve()
    if lines.rows == 0:
        raise BadTrace(str(path), "empty")
    rank = lines.env.get("RANK")
    if rank is None or not re.fullmatch(r"[0-9]{1,9}", rank):
        raise BadTrace(str(path), "no RANK=N in its captured environment (META_DATA_CAPTURE)")
    return FileSummary(
        str(path),
        "nvtx",
        int(rank),
        None,
        lines.env.get("HOSTNAME") or names.node_in(path),
        names.step_in(path),
        phase_times(lines.phases, lines.collectives, NS),
    )
