"""The samples behind a number, off by default (prompts can be private): with
``plugins.samples.enabled`` the plugin keeps, per training step, the ``k`` lowest- and
``k`` highest-scoring rollouts and the ``k`` with the largest train/inference log-prob mismatch
(prompt, response decoded with the trainer's tokenizer, score, length, finish reason, data source)
and the ``groups`` full GRPO groups with the widest reward spread (every response's score and
advantage, the ground truth); at every validation the ``validation`` generations verl's own
``_maybe_log_val_generations`` picks (input, output, score, data source, ground truth); where DAPO
filters, the rewards of the groups it dropped (sample_picks.py picks them all).

They go out as spans on the timeline's ``samples`` lane (contract/samples.py), through the state
timeline's tracer (``Services.timeline``, which the runtime hands every plugin): the server keeps
them where it keeps spans (``rl-insight samples``), Tempo where it runs. Text is cut to
``max_chars``; prompts and responses never go to a log. The training thread only picks the rows;
decoding and export happen on a thread of their own, behind a bounded queue (a step whose samples
find it full keeps none).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from verl_rl_insight.contract.samples import LANE
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins import sample_picks
from verl_rl_insight.trainer.plugins.sample_picks import SpanRow
from verl_rl_insight.trainer.plugins.span_export import span_attributes
from verl_rl_insight.trainer.services import Services, Timeline

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from verl import DataProto

logger = logging.getLogger("verl_rl_insight")
GROUPS = 1  # per step: the full GRPO groups kept (plugins.samples.groups)
VALIDATION = 16  # per validation: the generations kept (plugins.samples.validation)
FILTERED = 32  # per step: the reward values of DAPO's dropped groups kept
TEXT_KEYS = ("sample.prompt", "sample.response", "sample.ground_truth")


class Tokenizer(Protocol):
    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> object: ...


@dataclass
class Outgoing:
    """One batch of sample spans under one parent span ("rollout samples", "validation samples")."""

    run: RunInfo
    step: int | None
    title: str
    rows: list[SpanRow]
    tokenizer: Tokenizer | None = None


def decode(tokenizer: Tokenizer | None, ids: list[int]) -> str:
    if tokenizer is None:
        return f"({len(ids)} tokens; no tokenizer on the trainer to decode them)"
    try:
        return str(tokenizer.decode(ids, skip_special_tokens=True))
    except Exception as exc:
        return f"({len(ids)} tokens; the tokenizer could not decode them: {type(exc).__name__})"


def cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + " ..."


def _tokenizer(trainer: object) -> Tokenizer | None:
    found = getattr(trainer, "tokenizer", None)
    return found if callable(getattr(found, "decode", None)) else None


class Plugin:
    """The plugin: its settings, the exporter thread and the queue to it live on the instance."""

    def __init__(self) -> None:
        self.timeline = Timeline()  # the process's from configure on; its tracer is set once the timeline's is
        self.enabled = False
        self.k = 3
        self.groups = GROUPS
        self.validation = VALIDATION
        self.max_chars = 1000
        self.work: queue.Queue[Outgoing] = queue.Queue(maxsize=8)
        self.thread: threading.Thread | None = None

    def settle(self, settings: Mapping[str, object] | DictConfig) -> None:
        def number(name: str, default: int) -> int:
            value = settings.get(name, default)
            return int(value) if isinstance(value, (int, float)) else default

        self.enabled = bool(settings.get("enabled", False))
        self.k = number("k", 3)
        self.groups = number("groups", GROUPS)
        self.validation = number("validation", VALIDATION)
        self.max_chars = number("max_chars", 1000)

    def offer(self, outgoing: Outgoing) -> None:
        if not outgoing.rows:
            return
        try:
            self.work.put_nowait(outgoing)
        except queue.Full:  # the exporter is behind: these samples are not kept
            pass

    def attributes(self, row: SpanRow, tokenizer: Tokenizer | None) -> dict[str, object]:
        attributes: dict[str, object] = dict(row.attributes)
        for key, ids in row.token_ids.items():
            attributes[key] = decode(tokenizer, ids)
        for key in TEXT_KEYS:
            value = attributes.get(key)
            if isinstance(value, str):
                attributes[key] = cut(value, self.max_chars)
        return attributes

    def send(self, outgoing: Outgoing) -> None:
        tracer = self.timeline.tracer
        if tracer is None:
            return
        from opentelemetry import context, trace

        run, step, now = outgoing.run, outgoing.step, time.time_ns()
        parent = tracer.start_span(
            outgoing.title,
            context=context.Context(),
            start_time=now,
            attributes=span_attributes(run, "samples", LANE, {"step": step, "samples": len(outgoing.rows)}),
        )
        inside = trace.set_span_in_context(parent)
        for row in outgoing.rows:
            attributes = {"step": step, **self.attributes(row, outgoing.tokenizer)}
            span = tracer.start_span(
                row.name,
                context=inside,
                start_time=now,
                attributes=span_attributes(run, "sample", LANE, attributes),
            )
            span.end(end_time=now + 1)
        parent.end(end_time=now + 1)

    def loop(self) -> None:
        while True:
            outgoing = self.work.get()
            try:
                self.send(outgoing)
            except Exception:
                logger.debug("rl-insight: could not send samples", exc_info=True)

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, services: Services) -> None:
        self.timeline = services.timeline
        self.settle(plugin_settings(config, "samples"))
        if self.enabled and self.thread is None:
            self.thread = threading.Thread(target=self.loop, name="rl-insight-samples", daemon=True)
            self.thread.start()

    @hookimpl
    def rl_insight_train_batch(self, run: RunInfo, batch: DataProto, step: int | None, trainer: object) -> None:
        if self.enabled and run is not None:
            rows = sample_picks.train_rows(batch, self.k)
            self.offer(Outgoing(run, step, "rollout samples", rows, _tokenizer(trainer)))

    @hookimpl
    def rl_insight_advantage_batch(self, run: RunInfo, batch: DataProto, step: int | None, trainer: object) -> None:
        if self.enabled and run is not None and self.groups > 0:
            rows = sample_picks.group_rows(batch, self.groups)
            self.offer(Outgoing(run, step, "rollout groups", rows, _tokenizer(trainer)))

    @hookimpl
    def rl_insight_validation_generations(
        self,
        run: RunInfo,
        step: int | None,
        inputs: Sequence[str],
        outputs: Sequence[str],
        scores: Sequence[float],
        data_sources: Sequence[object] | None,
        ground_truths: Sequence[object] | None,
    ) -> None:
        if self.enabled and run is not None and self.validation > 0:
            rows = sample_picks.validation_rows(inputs, outputs, scores, data_sources, ground_truths, self.validation)
            self.offer(Outgoing(run, step, "validation samples", rows))

    @hookimpl
    def rl_insight_dapo_filtered(self, run: RunInfo, step: int | None, reward_counts: Mapping[float, int]) -> None:
        if self.enabled and run is not None:
            self.offer(Outgoing(run, step, "dapo filtered groups", sample_picks.filtered_rows(reward_counts, FILTERED)))
