"""Activation and environment propagation in real Ray workers.

The Ray cluster is started separately (`ray start --head --block`, its own session) with no
RL_INSIGHT_* variable; only the driver has RL_INSIGHT_SERVER_URL. verl's real ``run_ppo``
runs a small task runner that logs through real ``Tracking`` inside a Ray worker: data at
the hub proves that the worker was patched and got the variable through verl's runtime_env.
"""

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, wait_for
from tests.ray_cluster import RAY_ENV, ray_head


@pytest.fixture
def ray_cluster():
    with ray_head() as address:  # tests/ray_cluster.py: a head of its own, no RL_INSIGHT_* variable
        yield address


def test_worker_logs_reach_the_hub_with_env_from_the_driver_only(ray_cluster, hub_server):
    token = "driver-only-token"
    server = hub_server(token=token)
    url = server.url.replace("http://", f"http://rl-insight:{token}@")
    env = dict(os.environ, RL_INSIGHT_SERVER_URL=url, **RAY_ENV)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "scripts" / "ray_driver.py"),
            ray_cluster,
            "ray-proj",
            "ray-exp",
            "3",
            "+rl_insight.plugins.metric_push.max_batches_per_request=1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # verl prints what Ray workers get (`ray init kwargs: {... runtime_env ...}`): a run credential,
    # not the server's token, and the workers' pushes with it arrive (below)
    assert "RL_INSIGHT_TOKEN" in result.stdout + result.stderr and token not in result.stdout + result.stderr
    driver_pid = int(result.stdout.split("DRIVER_PID")[1].split()[0])
    [stream] = wait_for(lambda: server.hub.streams(), 10, what="data from the worker")
    assert stream["labels"] == {"project": "ray-proj", "experiment_name": "ray-exp"}
    assert stream["step"] == 3
    from tests.helpers import http

    text = http("GET", server.url + "/metrics")[1].decode()
    worker_pid = [line for line in text.splitlines() if line.startswith("rl_insight_monitor_worker_pid{")][-1]
    assert int(float(worker_pid.split()[1])) != driver_pid  # logged from a Ray worker, not the driver
    # max_batches_per_request=1 (a Hydra override) reached the worker: one request per batch, though
    # the worker logs its steps back to back (the sender's default would put them in one request)
    batches = server.hub.stats.batches
    assert batches >= 3 and server.hub.stats.pushes == batches, server.hub.stats
    # the run's card, sent from the Ray worker with the run credential: the driver's command line
    # and its working folder's commit (the worker's own are Ray's)
    card = wait_for(
        lambda: len(server.api.parts.run_cards) and server.api.parts.run_cards.get("ray-proj", "ray-exp")["card"], 10
    )
    # as typed: the interpreter, then the script and its arguments
    assert card["command"][0] == sys.executable and card["command"][1].endswith("ray_driver.py"), card["command"]
    assert card["command"][3:5] == ["ray-proj", "ray-exp"], card["command"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert card["git"]["commit"] == head.strip() and card["config"]["trainer"]["experiment_name"] == "ray-exp"
