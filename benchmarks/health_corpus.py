"""A corpus of run histories for the training-health detectors: healthy runs of several shapes
and runs with one failure mode injected at a known step. Seeded: the same corpus every time.

Shapes (the score; the other keys follow it as in a GRPO run): ``rising`` (0.2 to 0.8), ``noisy``
(the same with three times the noise), ``slow`` (0.2 to 0.5), ``flat`` (0.5 throughout: only
``reward_plateau`` may speak). Failures are injected into a rising run at ``INJECT_AT``.
"""

from __future__ import annotations

import math
import random
from typing import Any

STEPS = 100
INJECT_AT = 60
VALIDATE_EVERY = 5
HEALTHY = ("rising", "noisy", "slow", "flat")
FAILURES = (
    "non_finite",
    "entropy_collapse",
    "reward_collapse",
    "reward_plateau",
    "kl_blowup",
    "grad_norm_spike",
    "clip_ratio_runaway",
    "response_length_explosion",
    "response_truncation",
    "validation_drop",
    "throughput_drop",
    "logprob_mismatch",
    "stall",
)
STEP_S = 1.0  # seconds between steps (the corpus is pushed compressed in time)
STALL_S = 90.0  # the stall: this long before step INJECT_AT (run with stalled_for under it, e.g. 60s)


def _score(shape: str, step: int) -> float:
    x = step / STEPS
    if shape == "flat":
        return 0.5
    if shape == "slow":
        return 0.2 + 0.3 * x
    return 0.2 + 0.6 / (1 + math.exp(-5 * (x - 0.6)))  # rising / noisy: a logistic climb, still rising at the end


def run(shape: str = "rising", failure: str | None = None, seed: int = 0, steps: int = STEPS) -> list[dict[str, float]]:
    """The scalars verl logs at steps 1..steps (index i is step i + 1)."""
    rng = random.Random(f"{shape}/{failure}/{seed}")
    noise = 3.0 if shape == "noisy" else 1.0
    history = []
    for step in range(1, steps + 1):
        after = failure is not None and step >= INJECT_AT
        base = "rising" if failure == "reward_plateau" and not after else shape
        score = _score(base, step) if not (failure == "reward_plateau" and after) else _score("rising", INJECT_AT)
        progress = step / steps

        def jitter(scale: float) -> float:
            return rng.gauss(0.0, scale * noise)

        m = {
            "critic/score/mean": score + jitter(0.02),
            "critic/rewards/mean": score + jitter(0.02),
            "actor/entropy": 1.2 - 0.5 * progress + jitter(0.02),
            "actor/ppo_kl": 0.002 + jitter(0.0002),
            "actor/kl_loss": 0.01 + 0.01 * progress + jitter(0.001),
            "actor/grad_norm": 0.8 + jitter(0.08),
            "actor/pg_clipfrac": 0.01 + jitter(0.001),
            "actor/pg_loss": -0.02 + jitter(0.01),
            "response_length/mean": 400 + 100 * progress + jitter(15),
            "response_length/clip_ratio": max(0.0, 0.01 + jitter(0.005)),
            "perf/throughput": 2000 + jitter(60),
            "training/rollout_probs_diff_mean": 0.002 + jitter(0.0002),
            "timing_s/step": 10 + jitter(0.3),
        }
        if step % VALIDATE_EVERY == 0:
            m["val-core/gsm8k/reward/mean@1"] = score + 0.05 + jitter(0.01)
        if after:
            _inject(failure, m, step, rng)
        history.append(m)
    return history


def _inject(failure: str | None, m: dict[str, float], step: int, rng: random.Random) -> None:
    if failure == "non_finite" and step == INJECT_AT:
        m["actor/pg_loss"] = math.nan
        m["actor/grad_norm"] = math.inf
    elif failure == "entropy_collapse":
        m["actor/entropy"] *= 0.1
    elif failure == "reward_collapse":
        m["critic/score/mean"] = m["critic/rewards/mean"] = 0.05 + rng.gauss(0, 0.01)
        if "val-core/gsm8k/reward/mean@1" in m:
            m["val-core/gsm8k/reward/mean@1"] = 0.1
    elif failure == "kl_blowup":
        m["actor/ppo_kl"] *= 20 * (1 + 0.1 * (step - INJECT_AT))
    elif failure == "grad_norm_spike" and step == INJECT_AT:
        m["actor/grad_norm"] *= 10
    elif failure == "clip_ratio_runaway":
        m["actor/pg_clipfrac"] = 0.1 + 0.02 * (step - INJECT_AT)
    elif failure == "response_length_explosion":
        m["response_length/mean"] *= 2.5
    elif failure == "response_truncation":
        m["response_length/clip_ratio"] = 0.3
    elif failure == "validation_drop" and "val-core/gsm8k/reward/mean@1" in m:
        m["val-core/gsm8k/reward/mean@1"] *= 0.6
    elif failure == "throughput_drop":
        m["perf/throughput"] *= 0.3
    elif failure == "logprob_mismatch":
        m["training/rollout_probs_diff_mean"] = 0.015


def times(failure: str | None, steps: int = STEPS) -> list[float]:
    """Seconds from the run's start at which each step is logged."""
    return [
        STEP_S * step + (STALL_S if failure == "stall" and step >= INJECT_AT else 0.0) for step in range(1, steps + 1)
    ]


def runs() -> list[tuple[str, str | None, list[dict[str, float]]]]:
    """(name, the failure injected or None, history) of the whole corpus."""
    out: list[tuple[str, str | None, list[dict[str, float]]]] = [(shape, None, run(shape)) for shape in HEALTHY]
    out += [(f"inject-{failure}", failure, run("rising", failure)) for failure in FAILURES]
    return out


def as_series(history: list[dict[str, Any]], name: Any) -> dict[str, list[tuple[int, float]]]:
    """{series name: [(step, value)]} of a history (``name`` maps a verl key to its series name)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for i, metrics in enumerate(history):
        for key, value in metrics.items():
            out.setdefault(name(key), []).append((i + 1, value))
    return out
