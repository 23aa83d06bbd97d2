"""The samples' spans (plugin ``samples``) as rows: what the trainer writes on the timeline's
``samples`` lane and what reads them back (``rl-insight samples``, the explorer's
``/api/v1/explorer/samples``) agree here.

Every sample is one span whose attributes carry ``state_lane_id = "samples"``, ``verl.step`` and
``sample.kind``:

- ``worst`` / ``best`` / ``mismatch``: a rollout of the training step (``sample.rank``, ``.index``,
  ``.score``, ``.length``, ``.mismatch``, ``.finish_reason``, ``.data_source``, ``.prompt``,
  ``.response``);
- ``group``: one response of a full GRPO group (``sample.group`` is verl's ``uid``; ``.rank`` its
  place in the group, ``.score``, ``.advantage``, ``.length``, ``.response``; ``.prompt``,
  ``.ground_truth`` and ``.data_source`` are the group's);
- ``validation``: one validation generation as verl hands its generation loggers (``sample.prompt``
  is the input, ``.response`` the output, ``.score``) with its ``.data_source`` and
  ``.ground_truth``;
- ``filtered``: the groups DAPO dropped at the step, one span per reward value (``sample.reward``,
  ``sample.groups``: how many groups had it), as verl's ``DapoFilteredRewardTableLogger`` gets them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from typing_extensions import TypedDict  # pydantic (the MCP answers' schema) refuses typing's before 3.12

LANE = "samples"
TRAIN_KINDS = ("worst", "best", "mismatch")
GROUP, VALIDATION, FILTERED = "group", "validation", "filtered"
Attributes = Mapping[str, object]


class SampleRow(TypedDict):
    """A rollout of a training step: the worst, best or mismatch sample (``kind``) with its rank,
    index in the batch, score, length, log-prob mismatch, finish reason, data source and texts."""

    kind: str
    rank: int | None
    index: int | None
    score: float | None
    length: int | None
    mismatch: float | None
    finish_reason: str | None
    data_source: str | None
    prompt: str
    response: str


class GroupResponse(TypedDict):
    rank: int | None
    index: int | None
    response: str
    score: float | None
    advantage: float | None
    length: int | None


class GroupRow(TypedDict):
    uid: str
    ground_truth: str | None
    data_source: str | None
    prompt: str
    responses: list[GroupResponse]


class ValidationRow(TypedDict):
    input: str
    output: str
    score: float | None
    data_source: str | None
    ground_truth: str | None


class FilteredRow(TypedDict):
    reward: float | None
    groups: int | None


class StepSamples(TypedDict):
    """One step's samples: the explorer's ``/api/v1/explorer/samples`` answer."""

    step: int
    samples: list[SampleRow]
    groups: list[GroupRow]
    validation: list[ValidationRow]
    filtered: list[FilteredRow]


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)


def _sample(attrs: Attributes, kind: str) -> SampleRow:
    return {
        "kind": kind,
        "rank": _count(attrs.get("sample.rank")),
        "index": _count(attrs.get("sample.index")),
        "score": _number(attrs.get("sample.score")),
        "length": _count(attrs.get("sample.length")),
        "mismatch": _number(attrs.get("sample.mismatch")),
        "finish_reason": _optional_text(attrs.get("sample.finish_reason")),
        "data_source": _optional_text(attrs.get("sample.data_source")),
        "prompt": _text(attrs.get("sample.prompt")),
        "response": _text(attrs.get("sample.response")),
    }


def _add_group_response(groups: dict[str, GroupRow], attrs: Attributes) -> None:
    uid = _text(attrs.get("sample.group"))
    group = groups.setdefault(
        uid, {"uid": uid, "ground_truth": None, "data_source": None, "prompt": "", "responses": []}
    )
    group["ground_truth"] = group["ground_truth"] or _optional_text(attrs.get("sample.ground_truth"))
    group["data_source"] = group["data_source"] or _optional_text(attrs.get("sample.data_source"))
    group["prompt"] = group["prompt"] or _text(attrs.get("sample.prompt"))
    group["responses"].append(
        {
            "rank": _count(attrs.get("sample.rank")),
            "index": _count(attrs.get("sample.index")),
            "response": _text(attrs.get("sample.response")),
            "score": _number(attrs.get("sample.score")),
            "advantage": _number(attrs.get("sample.advantage")),
            "length": _count(attrs.get("sample.length")),
        }
    )


def _validation(attrs: Attributes) -> tuple[int, ValidationRow]:
    row: ValidationRow = {
        "input": _text(attrs.get("sample.prompt")),
        "output": _text(attrs.get("sample.response")),
        "score": _number(attrs.get("sample.score")),
        "data_source": _optional_text(attrs.get("sample.data_source")),
        "ground_truth": _optional_text(attrs.get("sample.ground_truth")),
    }
    return _count(attrs.get("sample.rank")) or 0, row


def _empty(step: int) -> StepSamples:
    return {"step": step, "samples": [], "groups": [], "validation": [], "filtered": []}


def _rank_of(row: SampleRow) -> tuple[int, int]:
    kind = row["kind"]
    return (TRAIN_KINDS.index(kind) if kind in TRAIN_KINDS else len(TRAIN_KINDS), row["rank"] or 0)


def samples_by_step(spans: Iterable[Mapping[str, object]]) -> dict[int, StepSamples]:
    """step -> its samples, groups, validation generations and DAPO-filtered rewards, each in its
    order (kind and rank; a group's responses by rank; validation by rank; rewards ascending)."""
    steps: dict[int, StepSamples] = {}
    groups: dict[int, dict[str, GroupRow]] = {}
    validation: dict[int, list[tuple[int, ValidationRow]]] = {}
    for span in spans:
        attrs = span.get("attributes")
        if not isinstance(attrs, Mapping) or attrs.get("state_lane_id") != LANE or "sample.kind" not in attrs:
            continue
        step = _count(attrs.get("verl.step"))
        step = -1 if step is None else step
        found = steps.setdefault(step, _empty(step))
        kind = str(attrs["sample.kind"])
        if kind == GROUP:
            _add_group_response(groups.setdefault(step, {}), attrs)
        elif kind == VALIDATION:
            validation.setdefault(step, []).append(_validation(attrs))
        elif kind == FILTERED:
            found["filtered"].append(
                {"reward": _number(attrs.get("sample.reward")), "groups": _count(attrs.get("sample.groups"))}
            )
        else:
            found["samples"].append(_sample(attrs, kind))
    for step, found in steps.items():
        found["samples"].sort(key=_rank_of)
        found["groups"] = list(groups.get(step, {}).values())
        for group in found["groups"]:
            group["responses"].sort(key=lambda r: r["rank"] or 0)
        found["validation"] = [row for _, row in sorted(validation.get(step, []), key=lambda pair: pair[0])]
        found["filtered"].sort(key=lambda r: r["reward"] if r["reward"] is not None else float("inf"))
    return steps


def step_samples(spans: Iterable[Mapping[str, object]], step: int) -> StepSamples | None:
    """The samples of one step, or None when the spans hold none for it."""
    return samples_by_step(spans).get(step)
