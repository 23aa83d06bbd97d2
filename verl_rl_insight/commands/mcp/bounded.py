"""The byte cap of an answer: an agent's context is small, and a run of 40,000 steps, a step of
1,000 lanes or a thousand findings would fill it. Past the cap the longest list in the answer loses
its second half, again until the answer fits, and the answer says ``truncated``; the first items of
each list (the worst findings, the earliest steps, the slowest ranks) stay."""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, JsonValue

DEFAULT_MAX_BYTES = 100_000  # about 25,000 tokens
Model = TypeVar("Model", bound=BaseModel)


def _size(value: JsonValue) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def _pair(item: list[JsonValue]) -> bool:
    """A [step, value] point: a shape, not a list to cut."""
    return len(item) == 2 and all(isinstance(v, (int, float)) for v in item)


def _longest(value: JsonValue) -> list[JsonValue] | None:
    """The list in ``value`` (itself included) with the most items, of those with two or more (a
    point is no list to cut)."""
    best: list[JsonValue] | None = None
    todo: list[JsonValue] = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            if len(item) >= 2 and not _pair(item) and (best is None or len(item) > len(best)):
                best = item
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return best


def fit(answer: Model, max_bytes: int) -> Model:
    """``answer`` within ``max_bytes`` of JSON (its lists cut, ``truncated`` set), or as it is."""
    data: JsonValue = answer.model_dump(mode="json")
    if _size(data) <= max_bytes:
        return answer
    while _size(data) > max_bytes:
        longest = _longest(data)
        if longest is None:
            break  # no list left to cut: one long text; the answer goes out whole
        del longest[max(1, len(longest) // 2) :]
    assert isinstance(data, dict)
    data["truncated"] = True
    return type(answer).model_validate(data)
