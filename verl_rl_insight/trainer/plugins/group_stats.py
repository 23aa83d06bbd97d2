"""Batch statistics of the step's rollouts, from the batch verl's ``compute_advantage`` returns
(rewards, advantages, lengths, groups and data sources all in one place), logged under ``rl_insight/``:

- ``rl_insight/group/zero_variance_share``: share of groups (verl's ``uid``) whose rewards are all
  equal (GRPO gives them no signal); ``solve_all_share`` / ``solve_none_share``: share of groups
  whose every reward equals the batch's highest / lowest reward; ``reward_std/mean``: the mean over
  groups of two or more of the rewards' standard deviation (``torch.std``, as GRPO's own);
- ``rl_insight/advantage/nonzero_share``: share of responses with a non-zero advantage on one of
  their response tokens;
- ``rl_insight/score/p10|p50|p90`` and ``rl_insight/response_length/p10|p50|p90``: percentiles
  (linear interpolation) of the sequence score and the response length as verl's
  ``compute_data_metrics`` defines them (score over the responses that were not aborted);
- ``rl_insight/source/<data_source>/score/mean``, ``.../response_length/mean``,
  ``.../clip_ratio`` and ``.../count``, per ``data_source``: the first 32 sources a run shows get
  their own keys, later ones are summed up as ``other``; a source of more than 48 characters is
  named by its start and a stable hash (``short_source``), so that its keys always fit; the full
  name goes out as a label: ``rl_insight_source_name{data_source="<full name>",source_key="<short>"} 1``
  (its first 256 characters, the longest label value the server takes), sent when the source is
  first seen and with every sampler round, so a user maps the hash back in Prometheus or Grafana.

A reward is the response's ``token_level_rewards`` summed (what GRPO normalises), a score its
``token_level_scores`` summed (verl's ``critic/score``). Computed while the training thread waits,
with torch and numpy ops, no loop over groups (benchmarks/bench_group_stats.py); merged into the
step's ``Tracking.log``, where a key verl already logged keeps verl's value.

Two passes over a whole mask (8,192 x 1,024 int64: 64 MB each) make most of the cost, and one
core reads memory only so fast: the response length's pass over the attention mask runs on one
helper thread while the training thread makes the non-zero advantage share's pass over the
response mask, where this process may use two CPUs (``os.sched_getaffinity``). Both are single
reductions that release the GIL; the training thread waits for the helper's result.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from verl_rl_insight.contract.wire_limits import MAX_LABEL_VALUE
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins.step_inbox import StepInbox

if TYPE_CHECKING:
    import numpy as np
    import pluggy
    import torch

    from verl_rl_insight.trainer.client.metric_batch import MetricBatch

logger = logging.getLogger("verl_rl_insight")

PREFIX = "rl_insight/"
MAX_SOURCES = 32  # per run; the rest are "other"
# a source's part of its keys: 19 + 18 + 48 + 21 characters make the longest metric name 106 of 200
SOURCE_NAME_METRIC = "rl_insight_source_name"  # a long source's full name and short key, as labels
MAX_SOURCE_NAME = 48
OTHER = "other"
KEYS = tuple(
    PREFIX + name
    for name in (
        "group/zero_variance_share",
        "group/solve_all_share",
        "group/solve_none_share",
        "group/reward_std/mean",
        "advantage/nonzero_share",
        *(f"{what}/p{q}" for what in ("score", "response_length") for q in (10, 50, 90)),
    )
)
SOURCE_STATS = ("score/mean", "response_length/mean", "clip_ratio", "count")
QUANTILES = (0.1, 0.5, 0.9)


def short_source(source: str) -> str:
    """``source`` as its keys name it: itself up to ``MAX_SOURCE_NAME`` characters, else its first
    characters and a stable hash of the whole (``<first 37>~<10 hex of sha256>``), so that a key of
    it always fits the server's 200-character metric names (a 200-character ``data_source`` made a
    name the server refused, and the sender lost the whole step). The full name is said once in the
    trainer's log and stands in verl's own ``val-core/<source>/...`` keys."""
    if len(source) <= MAX_SOURCE_NAME:
        return source
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{source[: MAX_SOURCE_NAME - len(digest) - 1]}~{digest}"


def source_key(source: str, stat: str) -> str:
    return f"{PREFIX}source/{short_source(source)}/{stat}"


def _codes(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The distinct values (as text, in order of first appearance) and each element's index into
    them (int64): pandas' hash-based factorize, 4x faster than numpy's sort on 8,192 uid strings."""
    import numpy as np
    import pandas as pd  # type: ignore[import-untyped]  # a dependency of verl

    codes, names = pd.factorize(np.asarray(values, dtype=object).reshape(-1))
    return [str(n) for n in names.tolist()], codes.astype(np.int64, copy=False)


def _group_metrics(rewards: torch.Tensor, uids: np.ndarray) -> dict[str, float]:
    """Per-group reductions as numpy ufunc reductions over the responses sorted by group (verl's
    groups are contiguous already: the sort is a pass over sorted codes), no loop over groups."""
    import numpy as np

    codes = _codes(uids)[1]
    order = np.argsort(codes, kind="stable")
    values = rewards.detach().cpu().numpy()[order]
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    size = np.diff(np.r_[starts, len(values)]).astype(np.float64)
    low, high = np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)
    mean = np.add.reduceat(values, starts) / size
    squares = np.add.reduceat((values - np.repeat(mean, size.astype(np.int64))) ** 2, starts)
    several = size > 1
    metrics = {
        PREFIX + "group/zero_variance_share": float((low == high).mean()),
        PREFIX + "group/solve_all_share": float((low == values.max()).mean()),
        PREFIX + "group/solve_none_share": float((high == values.min()).mean()),
    }
    if several.any():
        metrics[PREFIX + "group/reward_std/mean"] = float(np.sqrt(squares[several] / (size[several] - 1)).mean())
    return metrics


def _nonzero_share(advantages: torch.Tensor, mask: torch.Tensor) -> float:
    """Share of responses with a non-zero advantage on one of their response tokens: numpy's
    compare and ``logical_and`` into one bool buffer, the row's any() over 8-byte words."""
    import numpy as np
    import torch

    if advantages.dtype in (torch.bfloat16, torch.float16) or advantages.device.type != "cpu":
        rows_any = (advantages.ne(0) & mask.bool()).view(torch.uint8).amax(-1)
        return float(rows_any.double().mean().item())
    nonzero = advantages.detach().numpy() != 0
    np.logical_and(nonzero, mask.detach().numpy(), out=nonzero)  # the mask read once, no bool copy of it
    width = nonzero.shape[-1]
    rows = nonzero.view(np.uint64).any(-1) if width % 8 == 0 else nonzero.any(-1)
    return float(rows.mean())


def _quantiles(name: str, values: torch.Tensor) -> dict[str, float]:
    import numpy as np

    if values.numel() == 0:
        return {}
    found = np.quantile(values.detach().cpu().double().numpy(), QUANTILES).tolist()  # linear, as torch's
    return {f"{PREFIX}{name}/p{round(q * 100)}": v for q, v in zip(QUANTILES, found)}


def _source_metrics(
    sources: np.ndarray,
    score: torch.Tensor,
    length: torch.Tensor,
    clipped: torch.Tensor | None,
    scored: torch.Tensor,
    known: dict[str, None],
) -> dict[str, float]:
    import torch

    names, inverse = _codes(sources)
    labels = []
    for name in names:
        if name not in known and len(known) < MAX_SOURCES:
            known[name] = None
            if short_source(name) != name:
                logger.info("rl-insight: data_source %r is logged as %s...", name, source_key(name, ""))
        labels.append(name if name in known else OTHER)
    merged = sorted(set(labels))
    slot = torch.tensor([merged.index(label) for label in labels], dtype=torch.int64)
    index = slot[torch.from_numpy(inverse)]
    n = len(merged)

    def summed(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.float64).index_add_(0, index, values.double())

    count, scored_count = summed(torch.ones_like(length)), summed(scored)
    length_mean = summed(length) / count
    clip_ratio = None if clipped is None else summed(clipped) / count
    score_mean = summed(torch.where(scored, score, torch.zeros_like(score))) / scored_count
    metrics: dict[str, float] = {}
    for i, label in enumerate(merged):
        metrics[source_key(label, "count")] = count[i].item()
        metrics[source_key(label, "response_length/mean")] = length_mean[i].item()
        if clip_ratio is not None:
            metrics[source_key(label, "clip_ratio")] = clip_ratio[i].item()
        if scored_count[i] > 0:
            metrics[source_key(label, "score/mean")] = score_mean[i].item()
    return metrics


def _response_lengths(tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """verl's response length (metric_utils._compute_response_info): the batch's own
    ``response_length``, or the response part of the attention mask; where the batch has neither
    (verl's v1 trainer hands compute_advantage a few fields only), the response mask."""
    keys = tensors.keys()
    if "response_length" in keys:
        return tensors["response_length"].double()
    if "attention_mask" in keys and "responses" in keys:
        width = tensors["responses"].shape[-1]
        return tensors["attention_mask"][:, -width:].sum(-1).double()
    return tensors["response_mask"].sum(-1).double()


class HelperThread:
    """One helper thread for this process, made when first needed and made again after a fork (a
    child has the executor but not its thread). ``submit`` gives None where this process may use
    one CPU only, or at interpreter shutdown: the caller then does the work itself."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        self.pid = 0

    def submit(self, work: Callable[[], torch.Tensor]) -> Future[torch.Tensor] | None:
        if len(os.sched_getaffinity(0)) < 2:
            return None
        with self.lock:
            if self.pool is None or self.pid != os.getpid():
                self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl-insight-group-stats")
                self.pid = os.getpid()
            try:
                return self.pool.submit(work)
            except RuntimeError:  # the interpreter is shutting down: the caller does it itself
                return None


HELPER = HelperThread()


def batch_metrics(
    batch: object, known_sources: dict[str, None] | None = None, helper: HelperThread | None = HELPER
) -> dict[str, float] | None:
    """The statistics of a verl DataProto after advantage estimation, or None when it lacks what
    they are made of (rewards, scores and the response mask). What needs more is left out where the
    batch lacks it: groups without ``uid``, the non-zero advantage share without ``advantages``, the
    per-source keys without ``data_source``, the clip ratio without ``responses`` (the configured
    maximum length). ``known_sources`` (changed in place) are the sources that already have keys of
    their own in this run; ``helper`` (None: all on the calling thread) makes the length's pass."""
    import torch

    tensors = getattr(batch, "batch", None)
    needed = ("token_level_rewards", "token_level_scores", "response_mask")
    if tensors is None or any(k not in tensors.keys() for k in needed) or len(tensors["response_mask"]) == 0:
        return None
    non_tensors = getattr(batch, "non_tensor_batch", None) or {}
    with torch.no_grad():
        on_cpu = tensors["response_mask"].device.type == "cpu"
        pending = helper.submit(lambda: _response_lengths(tensors)) if helper is not None and on_cpu else None
        try:
            score = tensors["token_level_scores"].sum(-1).double()
            # the rewards are the scores themselves without KL in the reward: verl's default
            same = tensors["token_level_rewards"] is tensors["token_level_scores"]
            rewards = score if same else tensors["token_level_rewards"].sum(-1).double()
            metrics: dict[str, float] = {}
            if "uid" in non_tensors:
                metrics.update(_group_metrics(rewards, non_tensors["uid"]))
            if "advantages" in tensors.keys():
                share = _nonzero_share(tensors["advantages"], tensors["response_mask"])
                metrics[PREFIX + "advantage/nonzero_share"] = share
        finally:
            length = _response_lengths(tensors) if pending is None else pending.result()
        scored = length != 0  # verl's score statistics leave aborted responses out
        metrics.update(_quantiles("score", score[scored]))
        metrics.update(_quantiles("response_length", length))
        if "data_source" in non_tensors:
            limit = (getattr(batch, "meta_info", None) or {}).get("max_response_length")
            width = tensors["responses"].shape[-1] if "responses" in tensors.keys() else None
            width = limit if isinstance(limit, int) and width is not None else width
            clipped = None if width is None else (length == width).double()
            known = {} if known_sources is None else known_sources
            metrics.update(_source_metrics(non_tensors["data_source"], score, length, clipped, scored, known))
        return metrics


class Plugin:
    """The plugin: the step's statistics wait in an inbox until that step's ``Tracking.log``; each
    run remembers the sources that have keys of their own."""

    def __init__(self) -> None:
        self.inbox = StepInbox()
        self.sources: dict[Hashable, dict[str, None]] = {}  # run -> the sources that have keys of their own
        self.lock = threading.Lock()
        self.pm: pluggy.PluginManager | None = None  # its rl_insight_export_batch sends, from configure
        self.named: dict[Hashable, set[str]] = {}  # run -> the long sources whose full name was sent

    @hookimpl
    def rl_insight_configure(self, config: object, pm: pluggy.PluginManager) -> None:
        self.inbox.clear()
        self.pm = pm
        with self.lock:
            self.sources.clear()
            self.named.clear()

    @hookimpl
    def rl_insight_advantage_batch(self, run: Hashable, batch: object, step: int | None) -> None:
        with self.lock:
            known = self.sources.setdefault(run, {})
        metrics = batch_metrics(batch, known)
        if metrics is not None:
            self.inbox.put(run, step, metrics)
        with self.lock:
            named = self.named.setdefault(run, set())
            new = [s for s in list(known) if s not in named and short_source(s) != s]
            named.update(new)
        if new and self.pm is not None:
            for made in source_names(run, new):
                self.pm.hook.rl_insight_export_batch(batch=made)

    @hookimpl
    def rl_insight_collect(self, run: Hashable) -> list[MetricBatch] | None:
        """The run's long sources' full names again (a live series: the hub keeps it on /metrics)."""
        with self.lock:
            named = sorted(self.named.get(run, ()))
        return source_names(run, named) or None

    @hookimpl(tryfirst=True)
    def rl_insight_log_metrics(
        self, run: Hashable, metrics: dict[str, object], step: int | None, timestamp: float
    ) -> None:
        self.inbox.merge_into(run, step, metrics)


def source_names(run: Hashable, sources: list[str]) -> list[MetricBatch]:
    """One batch per long source: its full name and its short key, as labels of a series of 1."""
    import time

    from verl_rl_insight.trainer.client.metric_batch import MetricBatch

    project, experiment = getattr(run, "project", None), getattr(run, "experiment_name", None)
    if not isinstance(project, str) or not isinstance(experiment, str):
        return []
    now = time.time()
    return [
        MetricBatch(project, experiment, None, now, {SOURCE_NAME_METRIC: 1.0}, labels={
            "data_source": source[:MAX_LABEL_VALUE], "source_key": short_source(source)
        })
        for source in sources
    ]  # fmt: skip
