"""A finished run sent to the server to be kept beside the live ones (``rl-insight runs import``,
``POST /api/v1/runs/import``): what the body holds and the limits it is held to, read the same by
the CLI that builds it and the server that checks it.

The body is columnar, so a long run costs a number a cell, not a key a cell::

    {"project": P, "experiment_name": E, "source": "output.log", "format": "wandb-console",
     "sha256": "<the file's>", "times": "original" | "synthesized",
     "keys": ["critic/score/mean", ...],
     "steps": [[step, unix time, [value | null, ...]], ...]}

A value is a number, or ``"NaN"`` / ``"+Inf"`` / ``"-Inf"``; ``null`` where the step did not log
the key. Steps are whole numbers in increasing order, each with its own time, later than the step
before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import NamedTuple

from verl_rl_insight.contract.errors import BadInput, TooLarge
from verl_rl_insight.contract.naming import SPECIAL_VALUES, format_special, label_value_problem

MAX_IMPORT_STEPS = 100_000
MAX_IMPORT_KEYS = 2_000
MAX_IMPORT_CELLS = 2_000_000  # steps x keys (the body's parse holds ~100 bytes of Python objects a cell)
# what the route reads (the CLI says so before it sends more): a quarter of the server's 64 MiB budget
# for bodies being received, so that a slow import never makes the trainers' pushes wait for room
MAX_IMPORT_BODY_BYTES = 16 * 2**20
MAX_KEY_LENGTH = 256
FORMATS = ("verl-jsonl", "verl-console", "wandb-console", "wandb-history-jsonl", "wandb-history-csv", "runs-csv")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIMES = re.compile(r"original|synthesized")
Cell = float | None


_VALUE = {"oneOf": [{"type": "number"}, {"enum": ["NaN", "+Inf", "-Inf"]}, {"type": "null"}]}
IMPORT_SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["project", "experiment_name", "source", "format", "sha256", "times", "keys", "steps"],
    "properties": {
        "project": {"type": "string", "maxLength": 256},
        "experiment_name": {"type": "string", "maxLength": 256},
        "source": {"type": "string", "maxLength": 1024, "description": "the file's name"},
        "format": {"enum": list(FORMATS)},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "times": {"enum": ["original", "synthesized"]},
        "keys": {
            "type": "array",
            "maxItems": MAX_IMPORT_KEYS,
            "items": {"type": "string", "maxLength": MAX_KEY_LENGTH},
        },
        "steps": {
            "type": "array",
            "maxItems": MAX_IMPORT_STEPS,
            "description": "[step, unix time, [a value a key]], steps and times increasing",
            "items": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "number"}, {"type": "array", "items": _VALUE}],
            },
        },
    },
}


class ImportedStep(NamedTuple):
    step: int
    time: float  # unix seconds
    values: tuple[Cell, ...]  # one a key, in the body's key order; None: not logged at this step


class ImportBody(NamedTuple):
    project: str
    experiment: str
    source: str
    format: str
    sha256: str
    times: str
    keys: tuple[str, ...]
    steps: tuple[ImportedStep, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "experiment_name": self.experiment,
            "source": self.source,
            "format": self.format,
            "sha256": self.sha256,
            "times": self.times,
            "keys": list(self.keys),
            "steps": [[s.step, s.time, [_wire(v) for v in s.values]] for s in self.steps],
        }


def _wire(value: Cell) -> float | str | None:
    return value if value is None or math.isfinite(value) else format_special(value)


def _text(body: Mapping[str, object], field: str, limit: int = 256) -> str:
    value = body.get(field)
    problem = label_value_problem(value, limit)
    if problem is not None:
        raise BadInput(f"{field} {problem}")
    assert isinstance(value, str)
    return value


def _cell(value: object, where: str) -> Cell:
    if value is None:
        return None
    if isinstance(value, str) and value in SPECIAL_VALUES:
        return SPECIAL_VALUES[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f'{where} must be a number, "NaN", "+Inf", "-Inf" or null')
    return float(value)


def _keys(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise BadInput("keys must be a non-empty list of the run's logged keys")
    if len(value) > MAX_IMPORT_KEYS:
        raise TooLarge(f"keys: {len(value)} keys, over the limit of {MAX_IMPORT_KEYS}")
    for i, key in enumerate(value):
        problem = label_value_problem(key, MAX_KEY_LENGTH)
        if problem is not None:
            raise BadInput(f"keys[{i}] {problem}")
    if len(set(value)) != len(value):
        raise BadInput("keys: a key is named twice")
    return tuple(str(k) for k in value)


def _steps(value: object, width: int) -> tuple[ImportedStep, ...]:
    if not isinstance(value, list) or not value:
        raise BadInput("steps must be a non-empty list of [step, time, [values]]")
    if len(value) > MAX_IMPORT_STEPS:
        raise TooLarge(f"steps: {len(value)} steps, over the limit of {MAX_IMPORT_STEPS}")
    if len(value) * width > MAX_IMPORT_CELLS:
        raise TooLarge(f"steps: {len(value)} steps x {width} keys, over the limit of {MAX_IMPORT_CELLS} values")
    out: list[ImportedStep] = []
    for i, row in enumerate(value):
        where = f"steps[{i}]"
        if not isinstance(row, list) or len(row) != 3 or not isinstance(row[2], list):
            raise BadInput(f"{where} must be [step, time, [values]]")
        step, at, cells = row
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**53:
            raise BadInput(f"{where}[0] (the step) must be a whole number from 0")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 < at < 2**33:
            raise BadInput(f"{where}[1] (the time) must be unix seconds")
        if len(cells) != width:
            raise BadInput(f"{where}[2] has {len(cells)} values for {width} keys")
        if out and step <= out[-1].step:
            raise BadInput(f"{where}[0]: step {step} after step {out[-1].step}; steps go up")
        if out and at <= out[-1].time:
            raise BadInput(f"{where}[1]: the time of step {step} is not after the step before")
        out.append(ImportedStep(step, float(at), tuple(_cell(v, f"{where}[2][{j}]") for j, v in enumerate(cells))))
    return tuple(out)


def parse_body(body: object) -> ImportBody:
    """The import a body asks for, or ``BadInput`` naming the field."""
    if not isinstance(body, dict):
        raise BadInput("the body must be a JSON object (see POST /api/v1/runs/import in /openapi.json)")
    fmt = body.get("format")
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}")
    sha = body.get("sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise BadInput("sha256 must be the file's SHA-256 as 64 lowercase hex digits")
    times = body.get("times")
    if not isinstance(times, str) or not _TIMES.fullmatch(times):
        raise BadInput('times must be "original" (the file\'s) or "synthesized" (the file has none)')
    keys = _keys(body.get("keys"))
    return ImportBody(
        _text(body, "project"),
        _text(body, "experiment_name"),
        _text(body, "source", 1024),
        fmt,
        sha,
        times,
        keys,
        _steps(body.get("steps"), len(keys)),
    )
