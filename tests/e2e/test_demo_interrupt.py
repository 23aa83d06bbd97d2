"""Ctrl+C in `rl-insight demo`, as a person types it: the demo runs in a real terminal (tmux, its own
server socket) with the server and a real Prometheus; tmux sends C-c. The terminal shows the demo's
own lines only (no Ray or verl line, no log tail), the exit code is 130, and `rl-insight runs list`
shows the run finished, not running."""

import shutil
import subprocess
import sys
import uuid

import pytest

from tests.helpers import REPO, require_prometheus, rl_insight, wait_for, write_server_config

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)


def tmux(socket, *args):
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30)


def test_ctrl_c_in_the_demo_prints_no_ray_line_and_the_run_is_finished(tmp_path):
    require_prometheus()
    if shutil.which("tmux") is None:
        pytest.skip("no tmux: install the Debian package `tmux` (.ci/run does)")
    services = {name: {"enabled": False} for name in ("tempo", "grafana", "alertmanager")}
    path, _ = write_server_config(tmp_path, services=services)
    home = tmp_path / "home"
    env = {"RL_INSIGHT_HOME": str(home), "VERL_RL_INSIGHT_CONFIG": None}
    socket = f"rl-insight-test-{uuid.uuid4().hex[:8]}"
    demo = (
        f"cd {tmp_path} && env -u VERL_RL_INSIGHT_CONFIG RL_INSIGHT_HOME={home} PYTHONPATH={REPO} "
        f"{sys.executable} -m verl_rl_insight demo --steps 200 --step-seconds 1 --config {path} "
        "--experiment interrupted --no-transfer-queue; echo EXITED $?; sleep 600"
    )
    started = tmux(socket, "new-session", "-d", "-x", "200", "-y", "60", demo)
    assert started.returncode == 0, started.stderr

    def screen():
        return tmux(socket, "capture-pane", "-p", "-J", "-S", "-200").stdout

    try:
        wait_for(lambda: "SIMULATED step 2/200" in screen(), 300, 1, "the demo at step 2")
        assert tmux(socket, "send-keys", "C-c").returncode == 0
        wait_for(lambda: "EXITED" in screen(), 120, 0.5, "the demo to end")
        shown = screen()
        lines = [line for line in shown.splitlines() if line.strip()]
        assert "EXITED 130" in shown, shown
        ended = [line for line in lines if line.startswith("[demo] interrupted at step ")]
        assert len(ended) == 1 and "the run is marked finished (rl-insight runs list)" in ended[0], shown
        after = lines[lines.index(ended[0]) + 1 :]
        assert after == ["EXITED 130"], after  # nothing of Ray's after it
        theirs = [line for line in lines if not line.startswith("[demo]") and ("Ray" in line or "pid=" in line)]
        assert theirs == [] and "WARNING" not in shown, shown

        def state():
            listed = rl_insight("runs", "list", env=env)
            return [line.split()[-1] for line in listed.stdout.splitlines() if " interrupted " in line]

        assert wait_for(lambda: state() == ["finished"] and state(), 30, 1, "runs list: finished") == ["finished"]
    finally:
        tmux(socket, "kill-server")
        rl_insight("server", "stop", env=env, timeout=60)
