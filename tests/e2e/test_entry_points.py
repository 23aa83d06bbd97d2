"""verl's entry points run as users run them (``python -m verl.trainer.main_ppo ...``, the file as a
script, the experimental trainers' mains): the run's project, experiment and run credential reach
the Ray workers, whose replicas register under the run's labels.

Run as ``python -m``, verl's ``main_ppo`` executes as ``__main__``: no module named
``verl.trainer.main_ppo`` is imported, so a patch on it never applies (the bug this file checks).
The driver is the real entry point with the user's overrides plus the address of a real Ray head
that did not inherit the driver's environment (tests/ray_cluster.py). In the cluster, verl's own
``VERL_USE_EXTERNAL_MODULES`` loads tests/scripts/entry_probe.py into the TaskRunner's worker, which
registers a replica address through verl's ``RLInsightLogger`` (what verl's rollout manager does)
and records what the driver handed it, then ends the worker (no model is loaded).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import verl

from tests.helpers import REPO, free_port, wait_for
from tests.ray_cluster import RAY_ENV, ray_head
from verl_rl_insight.contract import environment, run_credential

TOKEN = "entry-point-token"


@pytest.fixture(scope="module")
def probed_cluster(tmp_path_factory):
    probe_dir = tmp_path_factory.mktemp("probe")
    replica = f"127.0.0.1:{free_port()}"
    env = {
        "VERL_USE_EXTERNAL_MODULES": "entry_probe",  # top level: verl's checkout may hold a `tests` of its own
        "ENTRY_PROBE_DIR": str(probe_dir),
        "ENTRY_PROBE_REPLICA": replica,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests" / "scripts"), str(REPO)])),
    }
    # logical CPUs only (verl's task runners ask for some; a 2-core machine runs them all the same); no
    # idle workers started ahead for each of them
    env["RAY_prestart_worker_first_driver"] = "0"
    with ray_head(env, num_cpus=max(2, *TASK_RUNNER_CPUS.values())) as address:
        yield address, probe_dir, replica


def run_entry_point(entry, cluster, server, experiment):
    """The entry point as a user starts it, against the server; what the worker got and the driver said."""
    address, probe_dir, _ = cluster
    for stale in probe_dir.iterdir():
        stale.unlink()
    url = server.url.replace("http://", f"http://rl-insight:{TOKEN}@")
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    env.update(RAY_ENV, RL_INSIGHT_SERVER_URL=url, PYTHONPATH=str(REPO))
    command = [
        sys.executable,
        *entry,
        *USER_OVERRIDES,
        "trainer.project_name=entry-proj",
        f"trainer.experiment_name={experiment}",
        f"++ray_kwargs.ray_init.address={address}",
    ]
    # in verl's checkout, as its docs run it (the experimental configs find verl/trainer/config from there)
    checkout = os.path.dirname(os.path.dirname(verl.__file__))
    driver = subprocess.Popen(
        command, env=env, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        seen = wait_for(lambda: list(probe_dir.glob("*.json")) or driver.poll() is not None, 180, what="the worker")
        if seen is True:
            pytest.fail("the driver ended before a worker started:\n" + driver.stdout.read()[-4000:])
        worker_env = json.loads(seen[0].read_text())
        deadline = time.monotonic() + 15
        while not server.api.parts.targets.list() and time.monotonic() < deadline:
            time.sleep(0.2)
        targets = server.api.parts.targets.list()
    finally:
        (probe_dir / "release").touch()
        try:
            output, _ = driver.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            driver.kill()
            output, _ = driver.communicate()
    return worker_env, targets, output


# a user's GRPO command, as short as verl's config checks allow
USER_OVERRIDES = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "trainer.logger=[console,rl_insight]",
]
ENTRY_POINTS = {
    "python -m verl.trainer.main_ppo": ["-m", "verl.trainer.main_ppo"],
    "python verl/trainer/main_ppo.py": ["SCRIPT"],
    "python -m verl.experimental.fully_async_policy.fully_async_main": [
        "-m",
        "verl.experimental.fully_async_policy.fully_async_main",
    ],
    "python -m verl.experimental.one_step_off_policy.main_ppo": [
        "-m",
        "verl.experimental.one_step_off_policy.main_ppo",
    ],
}


def _task_runner_cpus(module):
    """The logical CPUs an entry point's task runner asks Ray for (``@ray.remote(num_cpus=N)``), read
    from its source: one-step-off-policy's OneStepTaskRunner asks for 10 ("make sure main_task is not
    scheduled on head"), so on a head with fewer it is never scheduled and its worker never starts."""
    source = Path(importlib.util.find_spec(module).origin).read_text()
    return max([1, *(int(n) for n in re.findall(r"@ray\.remote\(num_cpus=(\d+)", source))])


TASK_RUNNER_CPUS = {
    module: _task_runner_cpus(module)
    for module in ("verl.trainer.main_ppo", *(e[1] for e in ENTRY_POINTS.values() if e[0] == "-m"))
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_the_run_labels_and_credential_reach_the_workers_whatever_entry_point_starts_the_driver(
    name, probed_cluster, hub_server
):
    import verl.trainer.main_ppo

    entry = ENTRY_POINTS[name]
    if entry == ["SCRIPT"]:
        entry = [verl.trainer.main_ppo.__file__]
    server = hub_server(token=TOKEN)
    experiment = "exp-" + name.split()[-1].replace("/", "-").replace(".", "-")
    worker_env, targets, output = run_entry_point(entry, probed_cluster, server, experiment)
    context = f"{name}: the worker got {sorted(worker_env)}\n{output[-3000:]}"
    # what verl prints (`ray init kwargs: ...`) and hands the workers: a credential for this run only
    assert worker_env.get(environment.PROJECT) == "entry-proj", context
    assert worker_env.get(environment.EXPERIMENT) == experiment, context
    assert run_credential.verify(TOKEN, worker_env.get(environment.TOKEN, "")) == ("entry-proj", experiment), context
    assert worker_env[environment.SERVER_URL] == server.url and TOKEN not in output, context
    # what a user sees: the replica's scrape target under the run's labels (`rl-insight targets`)
    [target] = targets
    assert target["address"] == probed_cluster[2] and target["job"] == "vllm", targets
    assert (target["labels"]["project"], target["labels"]["experiment_name"]) == ("entry-proj", experiment), targets
