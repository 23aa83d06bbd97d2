"""The batch verl's v1 trainer (``verl.trainer.ppo.v1.trainer_base.PPOTrainer``, main_ppo's default in
0.9.1) hands ``compute_advantage``, with the fields the plugins read that it lacks.

v1 keeps a step's batch in TransferQueue and ``_compute_advantage`` reads only ``uid``,
``response_mask``, ``rm_scores`` and the log-probs from it: no ``prompts``, ``responses`` or
``attention_mask``, no ``data_source`` or ``reward_model``. The rest is still there under the same
keys (``_compute_metrics`` reads ``prompts`` and ``responses`` from it after the update). So the
plugins get a view: verl's tensors, plus those fields read from TransferQueue for the rows
``compute_advantage`` got, laid out as verl's v0 trainer lays a batch out (``prompts`` then
``responses``, an ``attention_mask`` over both) and ``meta_info["max_response_length"]`` (v1 pads to
the batch's longest response, not to the configured length). verl's own batch is never changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch
    from verl import DataProto

TEXT_FIELDS = ["prompts", "responses"]
ROW_FIELDS = ["data_source", "reward_model"]  # the dataset's columns, put with every trajectory
MAX_LENGTH = "max_response_length"


class BatchMeta(Protocol):
    """TransferQueue's ``KVBatchMeta``: where a step's rows are."""

    keys: list[str]
    partition_id: str


def _meta(frame: FrameType | None, depth: int = 4) -> tuple[BatchMeta, list[int] | None] | None:
    """The v1 trainer's ``batch`` (a KVBatchMeta) in the callers' frames and the rows of it that
    ``compute_advantage`` got: ``compute_advantage_for_multi_trajectories`` hands GRPO the final
    trajectory of each session only (its ``final_indices``)."""
    rows: list[int] | None = None
    for _ in range(depth):
        if frame is None:
            return None
        found = frame.f_locals.get("final_indices")
        if rows is None and isinstance(found, list):
            rows = [int(i) for i in found]
        batch = frame.f_locals.get("batch")
        if isinstance(getattr(batch, "keys", None), list) and isinstance(getattr(batch, "partition_id", None), str):
            return batch, rows  # type: ignore[return-value]
        frame = frame.f_back
    return None


def _padded(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A jagged tensor from TransferQueue as (right-padded rows, each row's length)."""
    return values.to_padded_tensor(padding=0), values.offsets().diff()


def _mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    import torch

    return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)


def _fetch(
    meta: BatchMeta, keys: Sequence[str], texts: bool
) -> tuple[dict[str, torch.Tensor], dict[str, list[object]]]:
    """The rows' prompts and responses (jagged tensors) where ``texts``, and the dataset's columns
    TransferQueue has (``reward_model`` only with the texts: samples alone read it)."""
    import transfer_queue as tq

    tensors = {}
    if texts:
        data = tq.kv_batch_get(keys=list(keys), partition_id=meta.partition_id, select_fields=TEXT_FIELDS)
        tensors = {name: data[name] for name in TEXT_FIELDS}
    columns: dict[str, list[object]] = {}
    for name in ROW_FIELDS if texts else ROW_FIELDS[:1]:
        try:  # a dataset without the column has none in TransferQueue either
            column = tq.kv_batch_get(keys=list(keys), partition_id=meta.partition_id, select_fields=[name])
            columns[name] = list(column[name])
        except Exception:
            continue
    return tensors, columns


def max_response_length(trainer: object) -> int | None:
    config = getattr(trainer, "config", None)
    for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):
        node: object = config
        for name in path:
            node = getattr(node, name, None) if node is not None else None
        if isinstance(node, int):
            return node
    return None


@dataclass
class Extra:
    """What the view adds to verl's batch: tensors, non-tensor columns, meta_info."""

    tensors: dict[str, torch.Tensor]
    columns: dict[str, np.ndarray]
    meta_info: dict[str, int]

    def on(self, data: DataProto) -> DataProto:
        """``data`` (verl's, unchanged) with these fields beside its own."""
        from tensordict import TensorDict
        from verl import DataProto

        tensors = data.batch
        merged = TensorDict({**dict(tensors.items()), **self.tensors}, batch_size=tensors.batch_size)
        columns = {**self.columns, **dict(data.non_tensor_batch or {})}
        return DataProto(batch=merged, non_tensor_batch=columns, meta_info={**self.meta_info, **(data.meta_info or {})})


def extra(data: DataProto, frame: FrameType | None, trainer: object, texts: bool = True) -> Extra | None:
    """The fields v1 left in TransferQueue for the rows of ``data``, or None where ``data`` is not
    a v1 batch (it has ``responses``, or no KVBatchMeta is in the callers' frames). ``texts``: also
    the prompts and responses (the samples plugin's; a step's every token read once more from
    TransferQueue on the training thread, so only where a plugin reads them: group statistics take
    the lengths from ``response_mask``)."""
    import numpy as np
    import torch

    tensors = data.batch
    if tensors is None or "responses" in tensors.keys() or "response_mask" not in tensors.keys():
        return None
    found = _meta(frame)
    if found is None:
        return None
    meta, rows = found
    keys = [meta.keys[i] for i in rows] if rows is not None else list(meta.keys)
    if len(keys) != len(data):
        return None
    fetched_tensors, fetched = _fetch(meta, keys, texts)
    added: dict[str, torch.Tensor] = {}
    if fetched_tensors:
        prompts, prompt_lengths = _padded(fetched_tensors["prompts"])
        responses, response_lengths = _padded(fetched_tensors["responses"])
        width = tensors["response_mask"].shape[-1]  # verl's own padding of this batch
        responses = torch.nn.functional.pad(responses[:, :width], (0, width - min(width, responses.shape[-1])))
        attention_mask = torch.cat([_mask(prompt_lengths, prompts.shape[-1]), _mask(response_lengths, width)], -1)
        added = {"prompts": prompts, "responses": responses, "attention_mask": attention_mask}
    columns = {}
    for name, values in fetched.items():
        column: np.ndarray = np.empty(len(keys), dtype=object)
        column[:] = values
        columns[name] = column
    limit = max_response_length(trainer)
    return Extra(added, columns, {} if limit is None else {MAX_LENGTH: limit})
