"""Failures that build over tens of steps, after a healthy start: what the issue's "a failure is
usually slow" means, on the realistic long-CoT GRPO shape (``health_shapes.grpo_run``).

Each mode's failure begins at ``ONSET`` (step 200 of 300: a healthy start of 200 steps, the score
still rising slowly) and reaches its full size ``over`` steps later (20, 40, 60), linearly (a
product for entropy, which falls and rises by factors). Where a mode's consequence is part of the
failure (an entropy collapse or blow-up, responses looping or breaking off), the training score
slides with it, by a third over the same steps, as in the runs the issue describes (the entropy
to a fifteenth over 60 steps while the score slides). The validation shape validates every 5 steps
(verl's test_freq): a slide over 60 steps needs three validations below the level to be told from
the set's noise, which test_freq=10 cannot give within 25 steps.

``healthy(seed)`` is the same shape with no failure: what must stay quiet.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.health_shapes import Run, grpo_run, key
from verl_rl_insight.server.health import detectors

ONSET = 200
OVERS = (20, 40, 60)
WITHIN = 25  # steps from the onset to the first warning or critical
SLIDE = 1 / 3  # the training score's slide where the failure's consequence is part of it


def _ramp(step: int, over: int) -> float:
    return 0.0 if step < ONSET else min(1.0, (step - ONSET + 1) / over)


def _change(run: Run, k: str, how: Callable[[float, float], float], over: int) -> None:
    name = key(k)
    run.history[name] = [(s, how(v, _ramp(s, over)) if s >= ONSET else v) for s, v in run.history[name]]


def _slide(run: Run, over: int, share: float = SLIDE) -> None:
    for k in ("critic/score/mean", "critic/rewards/mean"):
        _change(run, k, lambda v, r: v * (1 - share * r), over)


# the failures of ``health_shapes.inject`` at the same sizes, spread over ``over`` steps; entropy
# collapses to a fifteenth (the run) rather than a fiftieth
GRADUAL: dict[str, Callable[[Run, int], object]] = {
    "entropy_collapse": lambda run, over: (
        _change(run, "actor/entropy", lambda v, r: v * 15**-r, over),
        _slide(run, over),
    ),
    "entropy_blowup": lambda run, over: (
        _change(run, "actor/entropy", lambda v, r: v * (1 + 9 * r) + 0.5 * r, over),
        _slide(run, over),
    ),
    "reward_collapse": lambda run, over: _slide(run, over, 0.8),
    "kl_blowup": lambda run, over: _change(run, "actor/kl_loss", lambda v, r: max(v, 0.01) * 30**r + 0.3 * r, over),
    "grad_norm_spike": lambda run, over: _change(run, "actor/grad_norm", lambda v, r: v * (1 + 9 * r), over),
    "clip_ratio_runaway": lambda run, over: _change(run, "actor/pg_clipfrac", lambda v, r: v + 0.3 * r, over),
    "response_length_explosion": lambda run, over: (
        _change(run, "response_length/mean", lambda v, r: v * (1 + 2 * r), over),
        _slide(run, over),
    ),
    "response_length_collapse": lambda run, over: (
        _change(run, "response_length/mean", lambda v, r: v * (1 - 0.9 * r), over),
        _slide(run, over),
    ),
    "response_truncation": lambda run, over: _change(
        run, "response_length/clip_ratio", lambda v, r: min(1.0, v + 0.5 * r), over
    ),
    "throughput_drop": lambda run, over: _change(run, "perf/throughput", lambda v, r: v * (1 - 0.8 * r), over),
    "validation_drop": lambda run, over: _change(run, "val-core/math/acc/mean@1", lambda v, r: v * (1 - 0.4 * r), over),
}


def healthy(seed: int, mode: str = "") -> Run:
    """The shape the failures are injected into, with none."""
    return grpo_run("r1", seed, validate_every=5 if mode == "validation_drop" else 10)


def gradual(mode: str, over: int, seed: int) -> Run:
    run = healthy(seed, mode)
    run.name, run.failure, run.inject_at = f"{mode} over {over} steps #{seed}", mode, ONSET
    GRADUAL[mode](run, over)
    return run


def first_alarm(found: list[detectors.Finding]) -> int | None:
    """Steps from the onset to the first warning or critical found at or after it (any detector:
    what a person is told), None where none is."""
    steps = [f.found_at or f.first_step for f in found if f.severity != "info" and (f.found_at or 0) >= ONSET]
    return min(steps) - ONSET if steps else None


def mode_alarm(run: Run, found: list[detectors.Finding]) -> int | None:
    """Steps from the onset to the first warning or critical of the run's own mode."""
    mine = [f.found_at or f.first_step for f in found if f.detector == run.failure and f.severity != "info"]
    mine = [s for s in mine if s >= ONSET]
    return min(mine) - ONSET if mine else None
