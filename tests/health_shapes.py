"""What the training-health detectors are judged on.

- ``real_runs()``: public verl runs their authors committed (``tests/data/real_runs``, with
  their sources), in verl's ``file`` logger format. Labelled healthy by
  their authors: a finding there is a false finding, unless the run's ``.source.json`` describes
  what the detector saw (``KNOWN``).
- ``healthy_shapes()``: realistic long-CoT GRPO runs of the shapes the issue names (slow entropy
  decay, a base model's fast entropy drop while it learns the format, R1-style length growth,
  truncation rising with length, a 30-question validation set, checkpoint steps 3x longer,
  40-minute steps, one mini-batch per step, a solved task). Seeded.
- ``failures()``: a real healthy run (or a realistic shape) with one failure injected at
  ``inject_at`` that grows over tens of steps, as failures do.

A run is ``{verl key: [(step, value)]}`` and its steps' times.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from verl_rl_insight.commands.run_file import read_run
from verl_rl_insight.server.health import detectors

ROOT = Path(__file__).resolve().parent.parent
# inside the repository, so that a clone anywhere passes its tests (the team's shared/real_runs is copied in)
REAL_RUN_DIRS = (ROOT / "tests" / "data" / "real_runs",)

# What a run's .source.json says the run really shows (its "observed"), by run and detector: a
# finding of these there is the detector describing the run, not a false one.
KNOWN = {
    "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp": {
        # "from step 156 response_length/mean climbs from ~215 to ~610 ... clip_ratio from 0.004 to
        # 0.41-0.49 ... the validation samples repeat the answer; step 160 has timing_s/step 22543.5
        # (a ~6 h step; other steps ~210-370 s)"
        "response_length_explosion": (150, 180),
        "response_truncation": (150, 185),
        "stall": (160, 160),
    },
}

# Real runs their source labels failures, and what must be found in them by which step.
EXPECTED = {
    "jianghoucheng_opd_grpo_qwen3_4b_dapo_math_collapse": {
        # "response_length/mean 1759 (step 1) -> ... 4.8 (11) -> 1.0 from step 12 to the end; actor/entropy
        # 0.21 -> 0.007 (12); critic/score/mean -0.68 -> -1.0 (the minimum) from step 11"
        "response_length_collapse": 16,
        "entropy_collapse": 16,
        "no_learning_signal": 14,
        "kl_blowup": 10,  # "actor/reward_kl_penalty 0.83 -> 16.6"
    },
}

History = dict[str, list[tuple[int, float]]]


@dataclass
class Run:
    name: str
    history: History  # series name -> [(step, value)] (NaN where verl wrote null)
    times: list[tuple[int, float]] = field(default_factory=list)  # (step, seconds since the start)
    failure: str | None = None
    inject_at: int | None = None
    source: str = ""


def real_run_files() -> list[Path]:
    """Every real run, by name (a run in both folders once: tests/data's copy)."""
    found: dict[str, Path] = {}
    for folder in REAL_RUN_DIRS:
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
            found[path.stem] = path
    return [found[name] for name in sorted(found)]


@functools.lru_cache(maxsize=64)
def _read(path: Path) -> tuple[History, str]:
    source = path.with_suffix(".source.json")
    return read_run(path), json.loads(source.read_text()).get("label", "") if source.exists() else ""


def real_runs(label: str | None = "healthy") -> list[Run]:
    """The real runs whose source's label starts with ``label`` (None: every one); each call gets
    its own copy to change."""
    runs = []
    for path in real_run_files():
        history, text = _read(path)
        if label is None or text.startswith(label):
            runs.append(Run(path.stem, dict(history), source=text))
    return runs


def real_run(name: str) -> Run:
    [run] = [r for r in real_runs(None) if r.name == name]
    return run


# ---------------------------------------------------------------- realistic healthy shapes

STEPS = 300
VALIDATE_EVERY = 10


def key(k: str) -> str:
    return detectors.series_name(k)


def grpo_run(
    name: str,
    seed: int = 0,
    steps: int = STEPS,
    base_model: bool = False,
    length_growth: bool = True,
    questions: int = 500,
    step_s: float = 600.0,
    checkpoint_every: int = 0,
    solved: bool = False,
    validate_every: int = VALIDATE_EVERY,
) -> Run:
    """A long-CoT GRPO run as verl logs it (the keys of compute_data_metrics, the actor update,
    timing and throughput): the score climbs and levels off, entropy decays, responses grow
    R1-style and more of them reach the limit as they grow, grad norms are heavy-tailed, ppo_kl is
    noise around 0 (one mini-batch per step), a validation every ``validate_every`` steps over ``questions``
    questions (binomial noise)."""
    rng = random.Random(f"{name}/{seed}")
    history: History = {}
    times: list[tuple[int, float]] = []
    t = 0.0
    max_length = 8192

    def put(k: str, step: int, v: float) -> None:
        history.setdefault(key(k), []).append((step, v))

    for step in range(1, steps + 1):
        x = step / steps
        p = 0.97 - 0.02 * math.exp(-step / 20) if solved else 0.15 + 0.55 / (1 + math.exp(-8 * (x - 0.35)))
        score = min(1.0, max(0.0, p + rng.gauss(0, math.sqrt(p * (1 - p) / 1024) + 0.005)))
        if base_model:  # learns the answer format in its first tens of steps: entropy falls fast, then slowly
            entropy = 0.35 + 0.9 * math.exp(-step / 12) - 0.1 * x
        else:
            entropy = 0.55 * math.exp(-1.2 * x) + 0.05
        entropy *= math.exp(rng.gauss(0, 0.03))
        length = (900 + 2600 * x if length_growth else 900 - 200 * x) * math.exp(rng.gauss(0, 0.03))
        clip = min(0.6, max(0.0, 0.25 * (length / max_length) ** 2 / 0.18 + rng.gauss(0, 0.01)))
        grad = 0.25 * math.exp(rng.gauss(0, 0.25)) * (rng.choice((3, 5, 8)) if rng.random() < 0.03 else 1)
        duration = step_s * math.exp(rng.gauss(0, 0.08))
        if checkpoint_every and step % checkpoint_every == 0:
            duration *= 3
        t += duration
        times.append((step, t))
        values = {
            "training/epoch": step // 100,  # training/global_step is the step itself (the hub's own series)
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/score/min": 0.0,
            "critic/rewards/mean": score,
            "critic/advantages/mean": rng.gauss(0, 0.003),
            "critic/advantages/max": 2.2 + rng.gauss(0, 0.1),
            "critic/advantages/min": -2.2 + rng.gauss(0, 0.1),
            "actor/entropy": entropy,
            "actor/ppo_kl": rng.gauss(0, 0.0004),  # one mini-batch per step: on-policy, noise around 0
            "actor/kl_loss": 0.001 + 0.02 * x * math.exp(rng.gauss(0, 0.1)),
            "actor/pg_loss": rng.gauss(0, 0.02),
            "actor/pg_clipfrac": max(0.0, 0.002 + rng.gauss(0, 0.0005)),
            "actor/grad_norm": grad,
            "response_length/mean": length,
            "response_length/max": max_length,
            "response_length/clip_ratio": clip,
            "perf/throughput": 2500 * length / 2000 * 600 / duration * math.exp(rng.gauss(0, 0.03)),
            "timing_s/step": duration,
        }
        if step % validate_every == 0:
            correct = sum(rng.random() < min(1.0, p + 0.03) for _ in range(questions))
            values["val-core/math/acc/mean@1"] = correct / questions
        for k, v in values.items():
            put(k, step, float(v))
    return Run(name, history, times)


HEALTHY_SHAPES: dict[str, Callable[[int], Run]] = {
    "slow entropy decay, R1 length growth, truncation rising with length": lambda s: grpo_run("r1", s),
    "base model: entropy falls fast while it learns the format": lambda s: grpo_run("base", s, base_model=True),
    "30-question validation set": lambda s: grpo_run("val30", s, questions=30, validate_every=5),
    "40-minute steps, checkpoint steps 3x longer": lambda s: grpo_run("slowsteps", s, step_s=2400, checkpoint_every=20),
    "a solved task (the score levels off near 1)": lambda s: grpo_run("solved", s, solved=True, length_growth=False),
}


def healthy_shapes(seeds: int = 1) -> list[Run]:
    """Every realistic healthy shape (``seeds`` of each); ppo_kl is noise around 0 in all of them."""
    return [
        Run(f"{name} #{seed}", r.history, r.times, source="healthy")
        for name, make in HEALTHY_SHAPES.items()
        for seed in range(seeds)
        for r in [make(seed)]
    ]


# ---------------------------------------------------------------- failures that grow over tens of steps


def _ramp(step: int, at: int, over: int) -> float:
    """0 before ``at``, then up to 1 over ``over`` steps."""
    return 0.0 if step < at else min(1.0, (step - at + 1) / over)


def _change(run: Run, k: str, at: int, how: Callable[[int, float, float], float], over: int = 30) -> None:
    name = k if k.startswith(detectors.PREFIX) else key(k)
    run.history[name] = [(s, how(s, v, _ramp(s, at, over)) if s >= at else v) for s, v in run.history[name]]


def _validation(run: Run) -> str:
    name = detectors.key_of(detectors.BY_NAME["validation_drop"], list(run.history))
    assert name is not None, run.name
    return name


def inject(base: Run, failure: str, at: int) -> Run:
    """``base`` with ``failure`` from step ``at`` on, growing over about 30 steps."""
    run = Run(f"{failure} in {base.name}", {k: list(v) for k, v in base.history.items()}, list(base.times), failure, at)
    entropy = next(k for k in detectors.ENTROPY if key(k) in run.history)
    score = next(k for k in detectors.SCORE if key(k) in run.history)
    if failure == "entropy_collapse":  # 50x down over 30 steps
        _change(run, entropy, at, lambda s, v, r: v * math.exp(-math.log(50) * r))
    elif failure == "entropy_blowup":  # 10x up over 30 steps: gibberish
        _change(run, entropy, at, lambda s, v, r: v * (1 + 9 * r) + 0.5 * r)
    elif failure == "response_length_collapse":  # to a tenth over 30 steps
        _change(run, "response_length/mean", at, lambda s, v, r: v * (1 - 0.9 * r))
    elif failure == "response_length_explosion":  # 3x over 30 steps: repetition loops
        _change(run, "response_length/mean", at, lambda s, v, r: v * (1 + 2 * r))
    elif failure == "response_truncation":  # half the responses cut within 30 steps
        _change(run, "response_length/clip_ratio", at, lambda s, v, r: min(1.0, v + 0.5 * r))
    elif failure == "reward_collapse":  # the score loses 80 % over 30 steps
        _change(run, score, at, lambda s, v, r: v * (1 - 0.8 * r))
    elif failure == "kl_blowup":  # the KL the run is held to grows 20x over 30 steps
        k = next(k for k in detectors.BY_NAME["kl_blowup"].keys if key(k) in run.history)
        _change(run, k, at, lambda s, v, r: max(v, 0.01) * math.exp(math.log(30) * r) + 0.3 * r)
    elif failure == "grad_norm_spike":  # the gradient norm climbs 10x over 30 steps: a divergence
        _change(run, "actor/grad_norm", at, lambda s, v, r: v * (1 + 9 * r))
    elif failure == "clip_ratio_runaway":
        _change(run, "actor/pg_clipfrac", at, lambda s, v, r: v + 0.3 * r)
    elif failure == "throughput_drop":
        _change(run, "perf/throughput", at, lambda s, v, r: v * (1 - 0.8 * r), over=20)
    elif failure == "validation_drop":  # validation loses 40 % over 30 steps
        _change(run, _validation(run), at, lambda s, v, r: v * (1 - 0.4 * r))
    elif failure == "train_val_divergence":  # validation slides while the training score rises
        _change(run, _validation(run), at, lambda s, v, r: v - 0.25 * r, over=50)
        _change(run, score, at, lambda s, v, r: min(1.0, v + 0.2 * r), over=50)
    elif failure == "no_learning_signal":  # reward, advantages and gradient exactly 0
        for k in ("critic/score/mean", "critic/score/max", "critic/score/min", "critic/rewards/mean",
                  "critic/rewards/max", "critic/rewards/min", "critic/advantages/mean", "critic/advantages/max",
                  "critic/advantages/min", "actor/grad_norm"):  # fmt: skip
            if key(k) in run.history:
                _change(run, k, at, lambda s, v, r: 0.0)
    elif failure == "non_finite":
        _change(run, "actor/pg_loss", at, lambda s, v, r: math.nan if s == at else v)
    elif failure == "logprob_mismatch":
        _change(run, "training/rollout_probs_diff_mean", at, lambda s, v, r: v + 0.012 * r, over=10)
    elif failure == "stall":  # one step hangs for 10x the run's median step time
        _change(run, "timing_s/step", at, lambda s, v, r: v * 10 if s == at else v)
    else:
        raise ValueError(failure)
    return run


FAILURES: dict[str, tuple[str, int]] = {  # failure: (the run it is injected into, step)
    "entropy_collapse": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "entropy_blowup": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "response_length_collapse": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "response_length_explosion": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "reward_collapse": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "kl_blowup": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "grad_norm_spike": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "clip_ratio_runaway": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "validation_drop": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "train_val_divergence": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "no_learning_signal": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "non_finite": ("verldata_ppo_qwen05b_gsm8k_resp512", 250),
    "response_truncation": ("diqiu_gpg_qwen2_7b_gsm8k_math_megatron", 60),
    "throughput_drop": ("diqiu_gpg_qwen2_7b_gsm8k_math_megatron", 60),
    "logprob_mismatch": ("diqiu_gpg_qwen2_7b_gsm8k_math_megatron", 60),
    "stall": ("diqiu_gpg_qwen2_7b_gsm8k_math_megatron", 60),
}
SHAPE_FAILURES = tuple(FAILURES)  # the same failures injected into the realistic GRPO shape at step 150


def failures(on_shapes: bool = True, seeds: int = 1) -> list[Run]:
    """Each failure injected into its real run, and (``on_shapes``) into the realistic GRPO shape."""
    real = {r.name: r for r in real_runs()}
    runs = [inject(real[base], failure, at) for failure, (base, at) in FAILURES.items()]
    if on_shapes:
        for seed in range(seeds):
            shape = grpo_run("r1", seed)
            shape.name = f"long-CoT GRPO shape #{seed}"
            runs += [inject(shape, failure, 150) for failure in SHAPE_FAILURES if failure != "logprob_mismatch"]
    return runs


def detection(run: Run, found: list[detectors.Finding]) -> int | None:
    """Steps from the injection to the first finding of the injected mode (None: not found)."""
    assert run.failure is not None and run.inject_at is not None
    mine = [f for f in found if f.detector == run.failure and f.last_step >= run.inject_at]
    if not mine:
        return None
    return (mine[0].found_at or mine[0].first_step) - run.inject_at


def diagnose(run: Run, resets: tuple[int, ...] = ()) -> list[detectors.Finding]:
    return detectors.diagnose(run.history, run.times, resets=resets)


def known(run: Run, finding: detectors.Finding) -> bool:
    """A finding the run's source describes (``KNOWN``)."""
    span = KNOWN.get(run.name, {}).get(finding.detector)
    return span is not None and span[0] <= finding.first_step <= span[1]
