"""``/api/v1/explorer/samples``: the rollouts behind a step (plugin ``samples``: its spans on the
``samples`` lane, what ``rl-insight samples`` reads): worst / best / mismatch in rank order, the
full GRPO group of a sample, a validation step's generations and DAPO's filtered groups, read by
the same function as the command (contract/samples.py)."""

from __future__ import annotations

from collections.abc import Sequence

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.samples import StepSamples, step_samples
from verl_rl_insight.server.explorer.sources import SpanRecord


def samples_answer(spans: Sequence[SpanRecord], run: Run, step: int) -> StepSamples:
    """The step's samples (none: the plugin is off, by default, or the step had none kept)."""
    return step_samples(spans, step) or {"step": step, "samples": [], "groups": [], "validation": [], "filtered": []}
