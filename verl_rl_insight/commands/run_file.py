"""A finished run read from a file: verl's ``file`` logger output (``trainer.logger=['file']``: one
JSON object a line, ``{"step": N, "data": {key: value}}``) or this project's ``runs export`` CSV
(``step`` and one column per logged scalar, without the series prefix).

verl writes the file with orjson, which writes NaN and Inf as ``null``: a null where the key has
numbers on other lines is a non-finite value; a key that is null on every line is not a scalar.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, metric_name
from verl_rl_insight.server.health.detectors import PREFIX

History = dict[str, list[tuple[int, float]]]
JSONL = 'a verl file-logger line: a JSON object {"step": N, "data": {key: number}}'
CSV_HEADER = "a runs export CSV: the header step,<key>,..."


class RunFileError(ValueError):
    """What is wrong with the file, on one line with the line number."""


def _number(value: object) -> float | None:
    """A scalar value as a float; None where it is not a number (a string, a list, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_jsonl(path: Path) -> History:
    rows: list[tuple[int, dict[str, object]]] = []
    numeric: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise RunFileError(f"{path}:{number}: not JSON; expected {JSONL}") from None
            step = row.get("step") if isinstance(row, dict) else None
            data = row.get("data") if isinstance(row, dict) else None
            if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                raise RunFileError(f'{path}:{number}: no integer "step" and object "data"; expected {JSONL}')
            rows.append((step, data))
            numeric.update(k for k, v in data.items() if _number(v) is not None)
    if not rows:
        raise RunFileError(f"{path}:1: empty; expected {JSONL}")
    history: History = {}
    for step, data in rows:
        for key, value in data.items():
            if key not in numeric:
                continue
            x = _number(value)
            if x is None and value is not None:
                continue  # a string beside numbers elsewhere: not this scalar's value
            history.setdefault(metric_name(PREFIX, key), []).append((step, math.nan if x is None else x))
    return _ordered(history)


def read_csv(path: Path) -> History:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header or header[0] != "step" or len(header) < 2:
            raise RunFileError(f"{path}:1: expected {JSONL}, or {CSV_HEADER}")
        history: History = {}
        for number, row in enumerate(reader, 2):
            if not row:
                continue
            if len(row) != len(header):
                raise RunFileError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}")
            try:
                step = int(row[0])
                values = [None if cell == "" else float(cell) for cell in row[1:]]
            except ValueError:
                raise RunFileError(f"{path}:{number}: expected an integer step and numbers (or empty cells)") from None
            for column, x in zip(header[1:], values):
                if x is not None:
                    history.setdefault(PREFIX + column, []).append((step, x))
    return _ordered(history)


def _ordered(history: History) -> History:
    """Each series by step, one value a step (the first, as Prometheus keeps a step's first sample)."""
    out: History = {}
    for name, values in history.items():
        by_step: dict[int, float] = {}
        for step, x in values:
            by_step.setdefault(step, x)
        out[name] = sorted(by_step.items())
    out.pop(GLOBAL_STEP_METRIC, None)
    return out


def read_run(path: Path) -> History:
    """{series name: [(step, value)]} of the run in ``path`` (a JSONL file or a CSV by its first byte)."""
    try:
        with path.open("rb") as f:
            head = f.read(1)
    except OSError as exc:
        raise RunFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        return read_jsonl(path) if head == b"{" else read_csv(path)
    except UnicodeDecodeError:
        raise RunFileError(f"{path}: not text; expected {JSONL}, or {CSV_HEADER}") from None
