"""The samples behind a number, off by default (prompts can be private): with
``plugins.samples.enabled``, every step keeps the ``k`` lowest- and ``k`` highest-scoring rollouts
and the ``k`` with the largest train/inference log-prob mismatch: prompt, response (decoded with
the trainer's tokenizer, cut to ``max_chars``), score, length, finish reason, data source.

They go out as spans on the timeline's ``samples`` lane (one per rollout, attributes
``sample.*``), through the state timeline's exporter: the server keeps them where it keeps spans
(``rl-insight samples``), Tempo where it runs (the dashboards' samples table). The training thread
only picks the rows (a few tensor reductions over the batch); decoding and export happen on a
thread of their own.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl

logger = logging.getLogger("verl_rl_insight")
LANE = "samples"

_settings: Any = None
_work: queue.Queue[tuple[Any, int | None, Any, list[dict[str, Any]]]] = queue.Queue(maxsize=8)
_thread: threading.Thread | None = None


def pick(batch: Any, k: int) -> list[dict[str, Any]]:
    """The rows to keep: {kind, rank, index, score, length, mismatch, finish_reason, data_source,
    prompt_ids, response_ids}, worst first, then best, then largest mismatch."""
    import torch

    tensors = batch.batch
    scores_by_token = tensors["token_level_scores"] if "token_level_scores" in tensors.keys() else None
    if scores_by_token is None and "token_level_rewards" in tensors.keys():
        scores_by_token = tensors["token_level_rewards"]
    responses = tensors["responses"]
    if "response_mask" in tensors.keys():
        mask = tensors["response_mask"]
    else:
        mask = tensors["attention_mask"][:, -responses.shape[1] :]
    lengths = mask.sum(-1)
    scores = scores_by_token.sum(-1).float() if scores_by_token is not None else torch.zeros(len(lengths))
    mismatch = None
    if "old_log_probs" in tensors.keys() and "rollout_log_probs" in tensors.keys():
        diff = (tensors["old_log_probs"].exp() - tensors["rollout_log_probs"].exp()).abs() * mask
        mismatch = diff.sum(-1) / mask.sum(-1).clamp(min=1)
    n = len(scores)
    k = max(0, min(k, n))
    chosen: list[tuple[str, list[int]]] = [
        ("worst", torch.argsort(scores)[:k].tolist()),
        ("best", torch.argsort(scores, descending=True)[:k].tolist()),
    ]
    if mismatch is not None:
        chosen.append(("mismatch", torch.argsort(mismatch, descending=True)[:k].tolist()))
    sources = batch.non_tensor_batch.get("data_source") if batch.non_tensor_batch else None
    max_length = responses.shape[1]
    rows = []
    for kind, indices in chosen:
        for rank, i in enumerate(indices, 1):
            length = int(lengths[i])
            prompt = tensors["prompts"][i] if "prompts" in tensors.keys() else None
            if prompt is not None and "attention_mask" in tensors.keys():
                prompt = prompt[tensors["attention_mask"][i, : prompt.shape[0]].bool()]
            rows.append(
                {
                    "kind": kind,
                    "rank": rank,
                    "index": int(i),
                    "score": float(scores[i]),
                    "length": length,
                    "mismatch": float(mismatch[i]) if mismatch is not None else None,
                    "finish_reason": "length" if length >= max_length else "stop",
                    "data_source": str(sources[i]) if sources is not None else None,
                    "prompt_ids": prompt.tolist() if prompt is not None else [],
                    "response_ids": responses[i, :length].tolist(),
                }
            )
    return rows


def _text(tokenizer: Any, ids: list[int], max_chars: int) -> str:
    if tokenizer is None:
        return f"({len(ids)} tokens; no tokenizer on the trainer to decode them)"
    try:
        text = str(tokenizer.decode(ids, skip_special_tokens=True))
    except Exception as exc:
        return f"({len(ids)} tokens; the tokenizer could not decode them: {type(exc).__name__})"
    return text if len(text) <= max_chars else text[:max_chars] + " ..."


def _send(run: Any, step: int | None, tokenizer: Any, rows: list[dict[str, Any]]) -> None:
    from verl_rl_insight.trainer.plugins import state_timeline

    tracer = state_timeline._tracer
    if tracer is None:
        return
    from opentelemetry import context, trace

    now = time.time_ns()
    parent = tracer.start_span(
        "rollout samples",
        context=context.Context(),
        start_time=now,
        attributes=state_timeline._attributes(run, "samples", LANE, {"step": step, "samples": len(rows)}),
    )
    inside = trace.set_span_in_context(parent)
    max_chars = int(_settings.max_chars)
    for row in rows:
        attributes = {
            "step": step,
            "sample.kind": row["kind"],
            "sample.rank": row["rank"],
            "sample.index": row["index"],
            "sample.score": row["score"],
            "sample.length": row["length"],
            "sample.mismatch": row["mismatch"],
            "sample.finish_reason": row["finish_reason"],
            "sample.data_source": row["data_source"],
            "sample.prompt": _text(tokenizer, row["prompt_ids"], max_chars),
            "sample.response": _text(tokenizer, row["response_ids"], max_chars),
        }
        span = tracer.start_span(
            f"sample {row['kind']} {row['rank']}",
            context=inside,
            start_time=now,
            attributes=state_timeline._attributes(run, "sample", LANE, attributes),
        )
        span.end(end_time=now + 1)
    parent.end(end_time=now + 1)


def _loop() -> None:
    while True:
        run, step, tokenizer, rows = _work.get()
        try:
            _send(run, step, tokenizer, rows)
        except Exception:
            logger.debug("rl-insight: could not send the step's samples", exc_info=True)


@hookimpl
def rl_insight_configure(config: Any) -> None:
    global _settings, _thread
    _settings = plugin_settings(config, "samples")
    if _settings.get("enabled") and _thread is None:
        _thread = threading.Thread(target=_loop, name="rl-insight-samples", daemon=True)
        _thread.start()


@hookimpl
def rl_insight_train_batch(run: Any, batch: Any, step: int | None, trainer: Any) -> None:
    if _settings is None or not _settings.get("enabled") or run is None:
        return
    rows = pick(batch, int(_settings.k))
    try:
        _work.put_nowait((run, step, getattr(trainer, "tokenizer", None), rows))
    except queue.Full:  # the exporter is behind: this step's samples are not kept
        pass
