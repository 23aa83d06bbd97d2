"""`rl-insight watch`: a run pushed to a real hub + Prometheus (and a STAND-IN vLLM replica,
demo/simulated_engines.py, registered as a target) seen in one frame (`--once`) and in the live
view driven in a real terminal (tmux), left with q and with Ctrl+C."""

import contextlib
import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.helpers import REPO, http, push, rl_insight, wait_for
from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator

PROJECT, EXPERIMENT = "watch", "run-a"


def log_run(hub, steps=12, project=PROJECT, experiment=EXPERIMENT):
    for step in range(1, steps + 1):
        batch = {
            "project": project,
            "experiment_name": experiment,
            "step": step,
            "time": time.time() - steps + step,
            "metrics": {
                "rl_insight_monitor_critic_score_mean": 0.2 + 0.05 * step,
                "rl_insight_monitor_actor_entropy": 1.0 / step,
                "rl_insight_monitor_training_rollout_probs_diff_mean": 0.02,
                "rl_insight_monitor_timing_s_step": 4.5,
                "DCGM_FI_DEV_GPU_UTIL": 87.0,
                "DCGM_FI_DEV_FB_USED": 60000.0,
                "DCGM_FI_DEV_FB_FREE": 20000.0,
            },
        }
        assert push(hub, {"batches": [batch]})[0] == 200


@contextlib.contextmanager
def run_with_a_replica(hub, env=None):
    """The run (and an older one) logged to ``hub``, a stand-in vLLM replica of it registered and
    scraped, both seen by `watch` (run in ``env``)."""
    engine = EngineSimulator("vllm", 0)
    try:
        engine.simulate_generate(requests=4, response_tokens=50)
        target = {
            "address": engine.address,
            "job": "vllm",
            "ttl_s": 0,
            "labels": {"replica": "0", "project": PROJECT, "experiment_name": EXPERIMENT},
        }
        assert http("POST", hub + "/api/v1/targets", json.dumps(target).encode())[0] == 200
        log_run(hub, 3, experiment="older-run")
        log_run(hub)
        shown = lambda: rl_insight("watch", "--once", "--server", hub, env=env).stdout  # noqa: E731
        wait_for(lambda: "12" in shown(), 30, what="the run in Prometheus")
        wait_for(lambda: "vllm replica" in shown(), 30, what="the replica scraped")
        yield
    finally:
        engine.close()


@pytest.fixture(scope="module")
def shared_run(shared_monitoring_server):
    """One stack and run for every test that only reads them (no test here writes to it)."""
    hub, prom, env = shared_monitoring_server
    with run_with_a_replica(hub, env):
        yield hub, prom, env["RL_INSIGHT_HOME"]


@pytest.fixture
def watched_run(shared_run, monkeypatch):
    """The shared run, the test in the stack's home (where `watch` finds the login of its Prometheus)."""
    hub, prom, home = shared_run
    monkeypatch.setenv("RL_INSIGHT_HOME", home)
    return hub, prom


@pytest.fixture
def own_watched_run(monitoring_server):
    """A stack and run of the test's own, for a test that sends more to it."""
    with run_with_a_replica(monitoring_server[0]):
        yield monitoring_server


def test_once_prints_the_newest_run_its_step_score_replicas_and_gpus(watched_run):
    hub, _ = watched_run
    shown = rl_insight("watch", "--once", "--server", hub, env={"COLUMNS": "80", "LINES": "24"})
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"{PROJECT}/{EXPERIMENT}" in out and "step 12" in out and "step time 4.5 s" in out
    [score] = [line for line in out.splitlines() if line.startswith("score")]
    assert score.split()[-1] == "0.8"  # the last logged score, with its sparkline
    assert any(c in score for c in "▁▂▃▄▅▆▇█")
    assert "logp mismatch (0.005/0.01)" in out and "GPUs 1: utilisation 87%, memory 75% used" in out
    assert max(len(line) for line in out.splitlines()) <= 80 and len(out.splitlines()) <= 24
    older = rl_insight("watch", "--once", "--server", hub, "--experiment", "older-run")
    assert "watch/older-run" in older.stdout and "step 3" in older.stdout


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("an unknown experiment", ["--experiment", "nope"], "no run */nope (known: watch/run-a, watch/older-run)"),
        ("an unknown project", ["--project", "elsewhere"], "no run elsewhere/* (known: watch/run-a, watch/older-run)"),
    ],
)
def test_no_such_run_is_one_line(watched_run, case, args, message):
    hub, _ = watched_run
    shown = rl_insight("watch", "--once", "--server", hub, *args)
    assert shown.returncode == 1 and message in shown.stderr and "Traceback" not in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1


def test_a_server_that_is_down_is_one_line(tmp_path):
    from tests.helpers import free_port

    shown = rl_insight("watch", "--once", "--server", f"http://127.0.0.1:{free_port()}")
    assert shown.returncode == 1 and "cannot reach the server" in shown.stderr and "Traceback" not in shown.stderr


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("leave", ["q", "C-c"])
def test_the_live_view_in_a_real_terminal(watched_run, tmp_path, leave):
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    hub, _ = watched_run
    session = f"rli-watch-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "exit-code"
    command = (
        f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -m verl_rl_insight watch --server "
        f"{hub} --interval 1; echo $? > {shlex.quote(str(done))}; sleep 30"
    )
    assert tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", command).returncode == 0
    try:
        pane = wait_for(
            lambda: (lambda text: text if "step 12" in text else None)(
                tmux("capture-pane", "-p", "-t", session).stdout
            ),
            30,
            what="the frame in the terminal",
        )
        assert f"{PROJECT}/{EXPERIMENT}" in pane and "q or Ctrl+C quits" in pane and "vllm replica" in pane
        tmux("send-keys", "-t", session, leave)
        wait_for(done.exists, 10, what="watch to exit")
        assert done.read_text().strip() == "0"
        after = tmux("capture-pane", "-p", "-t", session).stdout
        assert "Traceback" not in after and "interrupted" not in after
    finally:
        tmux("kill-session", "-t", session)


def test_a_server_without_runs_yet_is_one_line(monitoring_server):
    hub, _ = monitoring_server
    shown = rl_insight("watch", "--once", "--server", hub)
    assert shown.returncode == 1 and "no run has logged a step yet" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1


def test_the_last_step_as_a_text_swimlane(own_watched_run):
    """Spans of the run sent through the real OTLP path: the frame draws the newest step the
    server made (step 2: step 3's span has come) as lanes, the trainer's phases and each replica's
    generate calls, with the long tail named, still within 80x24."""
    from tests.server.stores.test_timeline_store import otlp
    from tests.server.timeline.test_summary import S, shaped_run

    hub, _ = own_watched_run
    spans = shaped_run((int(time.time()) - 60) * S, 3, slow_steps={2})
    body = otlp(spans, project=PROJECT, experiment=EXPERIMENT).SerializeToString()
    assert http("POST", hub + "/v1/traces", body, {"Content-Type": "application/x-protobuf"})[0] == 200
    shown = rl_insight("watch", "--once", "--server", hub, env={"COLUMNS": "80", "LINES": "24"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(line.startswith("timeline of step 2 (10 s): long tail x5.0, slowest replica_2") for line in lines)
    [trainer] = [line for line in lines if line.startswith("trainer ")]
    [slow] = [line for line in lines if line.startswith("replica_2 ")]
    [fast] = [line for line in lines if line.startswith("replica_0 ")]
    bars = trainer.split(" ", 1)[1].strip()
    assert bars.startswith("ggg") and "u" in bars and bars.endswith("·")  # gen, update_actor, then idle
    assert 0 < fast.split()[1].count("G") < slow.split()[1].count("G") / 3  # 1 s against 5 s of 10
    assert any("· idle" in line and "g gen" in line and "G vllm_generate" in line for line in lines)
    assert max(len(line) for line in lines) <= 80 and len(lines) <= 24


def test_once_with_json_is_the_frames_data_for_scripts(watched_run):
    hub, _ = watched_run
    shown = rl_insight("watch", "--once", "--json", "--server", hub)
    assert shown.returncode == 0, shown.stderr
    frame = json.loads(shown.stdout)
    assert frame["project"] == PROJECT and frame["experiment"] == EXPERIMENT and frame["step"] == 12
    score = {label: points for label, points, _ in frame["curves"]}["score"]
    assert score[-1] == [12, pytest.approx(0.2 + 0.05 * 12)]
    missing = rl_insight("watch", "--once", "--json", "--server", hub, "--experiment", "nope")
    assert missing.returncode == 1 and "no run */nope" in missing.stderr and missing.stdout == ""
    # the same data in an 80-column terminal, for a run with a long name: the header stays one line
    # with the step and state, and no line of the frame is wider than the terminal
    from rich.console import Console

    from verl_rl_insight.commands.watch.view import frame as draw

    frame["experiment"] = "grpo-qwen2.5-7b-math-lr1e-6-kl0.001-rollout16-" + "x" * 40
    frame["throughput"] = 123456.7
    console = Console(width=80, record=True, color_system=None)
    console.print(draw(frame, 80, 24))
    lines = console.export_text().splitlines()
    assert lines[0].startswith(f"{PROJECT}/grpo-qwen") and "step 12" in lines[0] and lines[0].endswith("(running)")
    assert max(len(line) for line in lines) <= 80
