"""The demo on a machine so busy that Ray's own start fails: the raylet gives its dashboard agent a
fixed 15 s to report its ports and ends when it does not; ``ray.init`` then says the node timed out
during startup (seen in the suite on 2 loaded cores: the demo died before its first step). The demo
starts Ray once more and the run goes on.

TEST DOUBLE: the slow agent. A ``sitecustomize`` on the demo's PYTHONPATH holds the first Ray
dashboard agent process 25 s before it starts (as import on saturated cores does); everything else
is real: Ray, its raylet crashing, verl's ``run_ppo``, the server and Prometheus."""

import os
import textwrap

import pytest

from tests.helpers import require_prometheus, rl_insight, write_server_config
from verl_rl_insight.commands.demo.command import RAY_AGAIN

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

SLOW_FIRST_AGENT = """
import os, time
try:
    command = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ")
except OSError:
    command = b""
if b"dashboard/agent.py" in command or b"ray.dashboard.agent" in command:
    try:
        os.close(os.open({marker!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        time.sleep(25)  # the first agent only: past the raylet's 15 s
    except FileExistsError:
        pass
"""


def test_a_ray_start_that_times_out_on_a_busy_machine_is_tried_once_more_and_the_demo_runs(tmp_path):
    require_prometheus()
    slow = tmp_path / "slow-agent"
    slow.mkdir()
    marker = tmp_path / "first-agent-held"
    (slow / "sitecustomize.py").write_text(textwrap.dedent(SLOW_FIRST_AGENT.format(marker=str(marker))))
    services = {name: {"enabled": False} for name in ("tempo", "grafana", "alertmanager")}
    path, _ = write_server_config(tmp_path, services=services)
    env = {
        "RL_INSIGHT_HOME": str(tmp_path / "home"),
        "VERL_RL_INSIGHT_CONFIG": None,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(slow), os.environ.get("PYTHONPATH")])),
    }
    try:
        done = rl_insight(
            "demo", "--steps", "2", "--step-seconds", "1", "--config", str(path), "--experiment", "busy",
            "--no-transfer-queue", env=env, timeout=600,
        )  # fmt: skip
        assert marker.exists()  # the double held an agent: the first start was the slow one
        assert RAY_AGAIN in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "SIMULATED step 2/2" in done.stdout
    finally:
        rl_insight("server", "stop", env=env, timeout=60)
