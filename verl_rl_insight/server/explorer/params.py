"""The explorer's query parameters, every one hostile until checked: a clear 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping

from verl_rl_insight.contract.errors import BadInput
from verl_rl_insight.contract.naming import label_value_problem
from verl_rl_insight.contract.runs import Run, run_in_query

MAX_KEYS = 64  # keys per curves request
MAX_KEY_CHARS = 256
MAX_STEP = 10**12
Query = Mapping[str, list[str]]


def _one(query: Query, name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def run_of(query: Query) -> Run:
    """``?project=P&experiment_name=E``, both label values (``contract.runs.run_in_query``)."""
    return run_in_query(query)


def diff_from(query: Query) -> str | None:
    """``diff_from=E``: another experiment of the project, whose card the answer is compared with."""
    value = _one(query, "diff_from")
    if not value:
        return None
    problem = label_value_problem(value)
    if problem:
        raise BadInput(f"diff_from: {problem}")
    return value


def whole(text: str, name: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 13 or int(text) > MAX_STEP:
        raise BadInput(f"{name}: must be a whole number from 0 to {MAX_STEP}, not {text[:40]!r}")
    return int(text)


def step_of(query: Query) -> int:
    value = _one(query, "step")
    if value is None:
        raise BadInput("step: missing; give ?step=N")
    return whole(value, "step")


def keys_of(query: Query) -> list[str]:
    """``keys=k1,k2,...``: 1 to MAX_KEYS keys, each 1 to MAX_KEY_CHARS printable characters."""
    value = _one(query, "keys")
    if not value:
        raise BadInput("keys: missing; give ?keys=k1,k2 (verl's keys, e.g. critic/score/mean)")
    keys = [k for k in value.split(",") if k]
    if not keys:
        raise BadInput("keys: no key in it")
    if len(keys) > MAX_KEYS:
        raise BadInput(f"keys: {len(keys)} keys; at most {MAX_KEYS} a request")
    for key in keys:
        problem = label_value_problem(key, MAX_KEY_CHARS)
        if problem:
            raise BadInput(f"keys: {key[:40]!r} {problem}")
    return list(dict.fromkeys(keys))


def steps_of(query: Query) -> tuple[int | None, int | None]:
    """``steps=A:B`` (both included; A: or :B open), or (None, None)."""
    value = _one(query, "steps")
    if value is None or value == "":
        return None, None
    first, colon, last = value.partition(":")
    if not colon:
        raise BadInput(f"steps: {value[:40]!r} is not A:B")
    a = whole(first, "steps") if first else None
    b = whole(last, "steps") if last else None
    if a is not None and b is not None and a > b:
        raise BadInput(f"steps: {a} is after {b}")
    return a, b
