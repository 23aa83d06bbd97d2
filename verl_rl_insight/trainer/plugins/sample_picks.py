"""What the samples plugin keeps, picked from what verl holds (contract/samples.py names the spans):

- ``train_rows``: the ``k`` lowest- and highest-scoring rollouts of a step's batch and the ``k`` with
  the largest train/inference log-prob mismatch;
- ``group_rows``: the full GRPO groups (verl's ``uid``) with the widest reward spread (the groups
  GRPO learns most from; ties by batch order), every response with its score and advantage, the
  group's ``reward_model.ground_truth`` where the batch carries it;
- ``validation_rows``: the validation generations verl's ``_maybe_log_val_generations`` picks for
  its loggers (sorted by input, shuffled with seed 42, the first ``n``), with their data source and
  ground truth;
- ``filtered_rows``: the rewards of the groups DAPO dropped, as its filtered-reward table gets them.

The training thread only picks (tensor reductions, a few rows); token ids are decoded and text cut
on the exporter's thread (``SpanRow.token_ids``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from verl_rl_insight.contract.samples import FILTERED, GROUP, VALIDATION

if TYPE_CHECKING:
    import numpy as np
    import torch
    from verl import DataProto

AttributeValue = bool | int | float | str | None


@dataclass
class SpanRow:
    """One sample span: its name, its attributes, and the token ids to decode into attributes."""

    name: str
    attributes: dict[str, AttributeValue]
    token_ids: dict[str, list[int]] = field(default_factory=dict)


def _has(tensors: Mapping[str, torch.Tensor], key: str) -> bool:
    return key in tensors.keys()


def _scores(tensors: Mapping[str, torch.Tensor], rows: int) -> torch.Tensor:
    import torch

    for key in ("token_level_scores", "token_level_rewards"):
        if _has(tensors, key):
            return tensors[key].sum(-1).float()
    return torch.zeros(rows)


def _response_mask(tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    if _has(tensors, "response_mask") or not _has(tensors, "responses"):
        return tensors["response_mask"]
    return tensors["attention_mask"][:, -tensors["responses"].shape[1] :]


def _prompt_ids(tensors: Mapping[str, torch.Tensor], i: int) -> list[int]:
    if not _has(tensors, "prompts"):
        return []
    prompt = tensors["prompts"][i]
    if _has(tensors, "attention_mask"):
        prompt = prompt[tensors["attention_mask"][i, : prompt.shape[0]].bool()]
    return [int(t) for t in prompt.tolist()]


def _item(values: object, i: int) -> object:
    """``values[i]`` of a list or numpy array (verl's non-tensor batch), None where it has none."""
    try:
        return values[i] if isinstance(values, Sequence) or hasattr(values, "__getitem__") else None
    except (IndexError, KeyError, TypeError):
        return None


def _text_of(values: object, i: int) -> str | None:
    value = _item(values, i) if values is not None else None
    return None if value is None else str(value)


def ground_truth(batch: DataProto, i: int) -> str | None:
    """``reward_model.ground_truth`` of row ``i`` where the batch carries it (verl's RL datasets do)."""
    rewards = (batch.non_tensor_batch or {}).get("reward_model")
    info = _item(rewards, i) if rewards is not None else None
    value = info.get("ground_truth") if isinstance(info, Mapping) else None
    return None if value is None else str(value)


def max_length(batch: DataProto, responses: torch.Tensor) -> int:
    """The configured response length: ``meta_info["max_response_length"]`` where the batch says it
    (verl's v1 trainer pads to the batch's longest response), else the padded width (v0 pads to it)."""
    limit = (batch.meta_info or {}).get("max_response_length")
    return limit if isinstance(limit, int) else int(responses.shape[1])


def train_rows(batch: DataProto, k: int) -> list[SpanRow]:
    """Worst first, then best, then largest mismatch; rank 1 is the most extreme. None where the
    batch has no ``responses``."""
    import torch

    tensors = batch.batch
    if not _has(tensors, "responses"):
        return []
    responses = tensors["responses"]
    limit = max_length(batch, responses)
    mask = _response_mask(tensors)
    lengths = mask.sum(-1)
    scores = _scores(tensors, len(lengths))
    mismatch = None
    if _has(tensors, "old_log_probs") and _has(tensors, "rollout_log_probs"):
        diff = (tensors["old_log_probs"].exp() - tensors["rollout_log_probs"].exp()).abs() * mask
        mismatch = diff.sum(-1) / mask.sum(-1).clamp(min=1)
    k = max(0, min(k, len(scores)))
    chosen = [
        ("worst", torch.argsort(scores)[:k].tolist()),
        ("best", torch.argsort(scores, descending=True)[:k].tolist()),
    ]
    if mismatch is not None:
        chosen.append(("mismatch", torch.argsort(mismatch, descending=True)[:k].tolist()))
    sources = (batch.non_tensor_batch or {}).get("data_source")
    rows = []
    for kind, indices in chosen:
        for rank, i in enumerate(indices, 1):
            length = int(lengths[i])
            attributes: dict[str, AttributeValue] = {
                "sample.kind": kind,
                "sample.rank": rank,
                "sample.index": int(i),
                "sample.score": float(scores[i]),
                "sample.length": length,
                "sample.mismatch": float(mismatch[i]) if mismatch is not None else None,
                "sample.finish_reason": "length" if length >= limit else "stop",
                "sample.data_source": _text_of(sources, i),
            }
            ids = {"sample.prompt": _prompt_ids(tensors, i), "sample.response": responses[i, :length].tolist()}
            rows.append(SpanRow(f"sample {kind} {rank}", attributes, ids))
    return rows


def _widest_groups(scores: torch.Tensor, uids: np.ndarray, n: int) -> list[np.ndarray]:
    """The row indices of the ``n`` groups with the widest reward spread (max - min), ties by the
    group's first row: numpy reductions over the rows sorted by group, no loop over groups."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]  # a dependency of verl

    codes = pd.factorize(np.asarray(uids, dtype=object).reshape(-1))[0].astype(np.int64)
    order = np.argsort(codes, kind="stable")
    values = scores.detach().cpu().double().numpy()[order]
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    spread = np.maximum.reduceat(values, starts) - np.minimum.reduceat(values, starts)
    ends = np.r_[starts[1:], len(order)]
    picked = np.argsort(-spread, kind="stable")[: max(0, n)]
    return [order[starts[g] : ends[g]] for g in picked]


def group_rows(batch: DataProto, n: int) -> list[SpanRow]:
    """Every response of the ``n`` picked groups; needs ``uid`` (verl's groups) and ``advantages``."""
    tensors = batch.batch
    non_tensors = batch.non_tensor_batch or {}
    if "uid" not in non_tensors or not _has(tensors, "advantages") or n <= 0:
        return []
    mask = _response_mask(tensors)
    scores = _scores(tensors, len(mask))
    has_responses = _has(tensors, "responses")
    rows = []
    for members in _widest_groups(scores, non_tensors["uid"], n):
        first = int(members[0])
        uid = str(non_tensors["uid"][first])
        shared: dict[str, AttributeValue] = {
            "sample.kind": GROUP,
            "sample.group": uid,
            "sample.ground_truth": ground_truth(batch, first),
            "sample.data_source": _text_of(non_tensors.get("data_source"), first),
        }
        for rank, i in enumerate(int(m) for m in members):
            row_mask = mask[i].bool()
            length = int(row_mask.sum())
            advantage = float(tensors["advantages"][i][row_mask].mean()) if length else 0.0
            attributes: dict[str, AttributeValue] = {
                **shared,
                "sample.rank": rank + 1,
                "sample.index": i,
                "sample.score": float(scores[i]),
                "sample.advantage": advantage,
                "sample.length": length,
            }
            ids = {"sample.response": tensors["responses"][i][row_mask].tolist()} if has_responses else {}
            if rank == 0:  # the group's one prompt, once
                ids["sample.prompt"] = _prompt_ids(tensors, i)
            rows.append(SpanRow(f"group {uid} {rank + 1}", attributes, ids))
    return rows


def verl_validation_order(inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float]) -> list[int]:
    """The indices verl's ``_maybe_log_val_generations`` logs, in its order: (input, output, score)
    sorted by input, shuffled by ``np.random.RandomState(42)``."""
    import numpy as np

    order = sorted(range(len(inputs)), key=lambda i: inputs[i])  # verl's sort is stable on the input
    np.random.RandomState(42).shuffle(order)
    return order


def validation_rows(
    inputs: Sequence[str],
    outputs: Sequence[str],
    scores: Sequence[float],
    data_sources: Sequence[object] | None,
    ground_truths: Sequence[object] | None,
    n: int,
) -> list[SpanRow]:
    rows = []
    for rank, i in enumerate(verl_validation_order(inputs, outputs, scores)[: max(0, n)], 1):
        attributes: dict[str, AttributeValue] = {
            "sample.kind": VALIDATION,
            "sample.rank": rank,
            "sample.index": i,
            "sample.prompt": str(inputs[i]),
            "sample.response": str(outputs[i]),
            "sample.score": float(scores[i]),
            "sample.data_source": _text_of(data_sources, i) if data_sources is not None else None,
            "sample.ground_truth": _text_of(ground_truths, i) if ground_truths is not None else None,
        }
        rows.append(SpanRow(f"validation {rank}", attributes))
    return rows


def filtered_rows(reward_counts: Mapping[float, int], n: int) -> list[SpanRow]:
    """One row per reward value of the groups DAPO dropped (the ``n`` most frequent)."""
    counts = sorted(((float(v), int(c)) for v, c in reward_counts.items()), key=lambda vc: -vc[1])
    return [
        SpanRow(f"filtered reward {value:g}", {"sample.kind": FILTERED, "sample.reward": value, "sample.groups": count})
        for value, count in counts[: max(0, n)]
    ]
