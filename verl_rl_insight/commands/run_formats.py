"""A finished run's file read into its steps, whatever wrote it (``rl-insight runs import``,
``diagnose --file``):

- ``verl-jsonl``: verl's ``file`` logger (``trainer.logger=['file']``): ``{"step": N, "data": {key:
  value}}`` a line, written with orjson, which writes NaN and Inf as ``null``: a null where the key
  has numbers on other lines is a non-finite value, a key null on every line is not a scalar;
- ``verl-console`` / ``wandb-console``: verl's ``console`` logger as printed, ``step:N - key:value -
  ...`` (``verl.utils.logger.aggregate_logger``: ``pprint.pformat`` of each value, so ``np.float64(x)``,
  ``nan``, ``inf``), behind Ray's ``(TaskRunner pid=...)`` prefix where there is one; wandb's capture
  of it (``wandb/run-*/files/output.log``) keeps 4096 characters of a line, so there a line of 4095
  or 4096 is cut and its last item (perhaps half a number) is left out;
- ``wandb-history-jsonl`` / ``wandb-history-csv``: a wandb run's history as its API gives it
  (``run.scan_history()`` a JSON object a line; ``run.history().to_csv()``): wandb's ``_step`` and
  ``_timestamp`` beside the keys; wandb's own ``_`` keys and values that are not numbers (tables) left out;
- ``runs-csv``: this project's ``runs export`` (``step`` and one column per series, no prefix).

The wandb history and a runs export (its ``training_step_time_seconds``) have the steps' own
times; for the others ``times`` is None.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from verl_rl_insight.contract.naming import METRIC_PREFIX, SPECIAL_VALUES, STEP_TIME_METRIC

EXPORT_TIME = STEP_TIME_METRIC.removeprefix(METRIC_PREFIX)  # a runs export's column of each step's time
MAX_FILE_BYTES = 256 * 2**20  # refused before a byte is read
WANDB_CUT = 4096
JSONL = 'a verl file-logger line: a JSON object {"step": N, "data": {key: number}}'
CSV_HEADER = "a runs export CSV (step,<key>,...) or a wandb history CSV (with a _step column)"
KNOWN = (
    "verl's file logger JSONL, verl's console log (or wandb's files/output.log of it), a wandb history "
    "(scan_history JSON lines or history CSV with _step), or a runs export CSV"
)
STEP_LINE = re.compile(r"(?:^|[\s\]m])step:(\d+) - (.*)$")
NUMPY = re.compile(r"np\.(?:float|int|uint)\d+\((.*)\)")
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "+inf": math.inf, **SPECIAL_VALUES}
Values = dict[str, float]


class RunFileError(ValueError):
    """What is wrong with the file, on one line with the line number."""


class RunFile(NamedTuple):
    format: str
    steps: dict[int, Values]  # step -> {logged key: value}, in step order
    times: dict[int, float] | None  # step -> its unix time, where the file has it
    skipped: int  # items that were not numbers (a table, a string) or were cut


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _merge(into: dict[int, Values], step: int, values: Values) -> None:
    """A step logged in two calls (validation, then training) is one step; a key's first value stays."""
    kept = into.setdefault(step, {})
    for key, value in values.items():
        kept.setdefault(key, value)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, line


def read_verl_jsonl(path: Path) -> RunFile:
    rows: list[tuple[int, dict[str, object]]] = []
    numeric: set[str] = set()
    for number, line in _lines(path):
        try:
            row = json.loads(line)
        except ValueError:
            raise RunFileError(f"{path}:{number}: not JSON; expected {JSONL}") from None
        step = row.get("step") if isinstance(row, dict) else None
        data = row.get("data") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(data, dict):
            raise RunFileError(f'{path}:{number}: no whole "step" and object "data"; expected {JSONL}')
        rows.append((step, data))
        numeric.update(k for k, v in data.items() if _number(v) is not None)
    steps: dict[int, Values] = {}
    skipped = 0
    for step, data in rows:
        values: Values = {}
        for key, value in data.items():
            x = _number(value)
            if key in numeric and (x is not None or value is None):
                values[key] = math.nan if x is None else x
            else:
                skipped += 1
        _merge(steps, step, values)
    return RunFile("verl-jsonl", steps, None, skipped)


def console_value(text: str) -> float | None:
    """A value as ``pprint.pformat`` printed it; None where it is not a number."""
    wrapped = NUMPY.fullmatch(text)
    if wrapped:
        text = wrapped.group(1)
    if NUMBER.fullmatch(text):
        return float(text)
    return NON_FINITE.get(text.lower()) if text.lower() in {"nan", "inf", "-inf", "+inf"} else None


def read_console(path: Path) -> RunFile:
    wandb = path.name == "output.log"  # wandb's capture: lines cut at 4096 characters
    steps: dict[int, Values] = {}
    skipped = 0
    last: int | None = None
    first_line: dict[int, int] = {}
    for number, line in _lines(path):
        text = line.rstrip("\r\n")
        match = STEP_LINE.search(text)
        if match is None:
            continue
        step = int(match.group(1))
        if last is not None and step < last and step in first_line:
            raise RunFileError(
                f"{path}:{number}: step {step} again after step {last} (first at line {first_line[step]}): "
                "the log holds two runs; cut it into one file each"
            )
        first_line.setdefault(step, number)
        last = step
        items = match.group(2).split(" - ")
        if wandb and len(text) >= WANDB_CUT - 1:
            items, skipped = items[:-1], skipped + 1
        values: Values = {}
        for item in items:
            key, sep, printed = item.rpartition(":")
            x = console_value(printed.strip()) if sep and key else None
            if x is None:
                skipped += 1
            else:
                values[key.strip()] = x
        _merge(steps, step, values)
    if not steps:
        raise RunFileError(f"{path}: no step lines (step:N - key:value - ...); expected {KNOWN}")
    return RunFile("wandb-console" if wandb else "verl-console", steps, None, skipped)


def _history_row(row: dict[str, object], where: str, steps: dict[int, Values], times: dict[int, float]) -> int:
    step = row.get("_step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RunFileError(f'{where}: no whole "_step"; expected a wandb history row')
    at = _number(row.get("_timestamp"))
    if at is not None and math.isfinite(at) and step not in times:
        times[step] = at
    values: Values = {}
    skipped = 0
    for key, value in row.items():
        if key.startswith("_"):
            continue
        x = _number(value)
        if x is None and isinstance(value, str):
            x = NON_FINITE.get(value.lower()) if value.lower() in NON_FINITE else None
        if x is None:
            skipped += 1 if value is not None else 0
        else:
            values[key] = x
    _merge(steps, step, values)
    return skipped


def read_wandb_jsonl(path: Path) -> RunFile:
    steps: dict[int, Values] = {}
    times: dict[int, float] = {}
    skipped = 0
    for number, line in _lines(path):
        try:
            row = json.loads(line)
        except ValueError:
            raise RunFileError(f"{path}:{number}: not JSON; expected a wandb history row") from None
        if not isinstance(row, dict):
            raise RunFileError(f"{path}:{number}: not a JSON object; expected a wandb history row")
        skipped += _history_row(row, f"{path}:{number}", steps, times)
    return RunFile("wandb-history-jsonl", steps, times if len(times) == len(steps) else None, skipped)


def _cells(path: Path) -> Iterator[tuple[int, list[str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        yield from enumerate(csv.reader(f), 1)


def read_csv(path: Path) -> RunFile:
    rows = _cells(path)
    _, header = next(rows, (1, []))
    if "_step" in header:
        return _wandb_csv(path, header, rows)
    if not header or header[0] != "step" or len(header) < 2:
        raise RunFileError(f"{path}:1: expected {KNOWN}")
    steps: dict[int, Values] = {}
    times: dict[int, float] = {}
    for number, row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise RunFileError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
        try:
            step = int(row[0])
            values = {c: float(cell) for c, cell in zip(header[1:], row[1:]) if cell != ""}
        except ValueError:
            raise RunFileError(f"{path}:{number}: expected a whole step and numbers (or empty cells)") from None
        at = values.get(EXPORT_TIME)
        if at is not None and math.isfinite(at):
            times.setdefault(step, at)
        _merge(steps, step, values)
    return RunFile("runs-csv", steps, times if times and len(times) == len(steps) else None, 0)


def _wandb_csv(path: Path, header: list[str], rows: Iterable[tuple[int, list[str]]]) -> RunFile:
    steps: dict[int, Values] = {}
    times: dict[int, float] = {}
    skipped = 0
    for number, row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise RunFileError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
        parsed: dict[str, object] = {}
        for column, cell in zip(header, row):
            if column == "" or cell == "":  # pandas' index; a step that did not log the key
                continue
            try:
                parsed[column] = float(cell)
            except ValueError:
                parsed[column] = cell
        skipped += _history_row(parsed, f"{path}:{number}", steps, times)
    return RunFile("wandb-history-csv", steps, times if len(times) == len(steps) else None, skipped)


def read_file(path: Path) -> RunFile:
    """The run in ``path``, its format told by its content; ``RunFileError`` in one line otherwise."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise RunFileError(f"{path}: {size / 2**20:.0f} MiB, over the limit of {MAX_FILE_BYTES >> 20} MiB")
        with path.open("rb") as f:
            first = f.readline(2**20)
            head = first + f.read(4096)
    except OSError as exc:
        raise RunFileError(f"{path}: {exc.strerror or exc}") from None
    text = head.lstrip()
    try:
        if text.startswith(b"{"):
            found = read_wandb_jsonl(path) if b'"_step":' in first else read_verl_jsonl(path)
        elif b"step:" in head or path.suffix in (".log", ".txt"):
            found = read_console(path)
        elif b"," in first:
            found = read_csv(path)
        else:
            raise RunFileError(f"{path}: not a run file; expected {KNOWN}")
    except UnicodeDecodeError:
        raise RunFileError(f"{path}: not UTF-8 text; expected {KNOWN}") from None
    if not any(found.steps.values()):
        raise RunFileError(f"{path}: no step with a number in it; expected {KNOWN}")
    return found._replace(steps=dict(sorted(found.steps.items())))
