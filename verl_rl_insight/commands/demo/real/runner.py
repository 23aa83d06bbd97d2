"""A real verl 0.9.1 GRPO run on the CPU, watched by this package: what the CI test
(tests/e2e/test_real_verl_run.py) and `rl-insight demo --real` both start.

verl's own ``python -m verl.trainer.main_ppo`` with the README's overrides (``trainer.logger``
``console,file,rl_insight``, ``disable_log_stats=False``), a vLLM replica verl starts itself, a tiny
model and data made locally (inputs.py), in the venv of venv.py. What only the CPU needs is kept
apart and named: the environment and the overrides below marked "CPU", and cpu_platform.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from pathlib import Path

from verl_rl_insight.commands.demo.real import venv as real_venv

HERE = Path(__file__).resolve().parent
SITE = HERE / "site"  # sitecustomize: the CPU shim in every process of the run
STEPS = 3


@dataclasses.dataclass
class RealRun:
    """Where a real run's parts are: its inputs, verl's file logger output, its log, its profile folder."""

    folder: Path
    project: str
    experiment: str
    server_url: str
    steps: int = STEPS
    profile_dir: Path | None = None
    ray_address: str = ""  # set by start(): the Ray head of this run

    @property
    def metrics_file(self) -> Path:
        return self.folder / "verl_metrics.jsonl"

    @property
    def log_file(self) -> Path:
        return self.folder / "verl_run.log"


def overrides(run: RealRun, model: Path, data: Path) -> list[str]:
    """The Hydra overrides: a user's GRPO command, then what the CPU needs (marked)."""
    rollout = "actor_rollout_ref.rollout"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=8",
        "data.max_prompt_length=96",
        "data.max_response_length=24",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        f"{rollout}.name=vllm",
        f"{rollout}.n=2",
        f"{rollout}.tensor_model_parallel_size=1",
        f"{rollout}.log_prob_micro_batch_size_per_gpu=8",
        f"{rollout}.disable_log_stats=False",  # the replica serves /metrics (the README's override)
        f"{rollout}.calculate_log_probs=True",  # rollout log-probs: the log-prob mismatch
        f"{rollout}.trace.backend=rl_insight",  # the agent loop's trajectories
        f"{rollout}.max_model_len=160",
        f"{rollout}.max_num_batched_tokens=2048",
        "trainer.logger=[console,file,rl_insight]",
        f"trainer.project_name={run.project}",
        f"trainer.experiment_name={run.experiment}",
        f"trainer.total_training_steps={run.steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=True",  # validation generations
        "trainer.save_freq=-1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "+rl_insight.plugins.samples.enabled=True",
        "+rl_insight.plugins.profiler.arm=torch",  # `rl-insight profile` chooses the steps
        "+rl_insight.plugins.profiler.poll_interval_s=1",
        "+rl_insight.plugins.hardware.enabled=False",  # no GPU to sample
        *([f"+rl_insight.plugins.profiler.save_path={run.profile_dir}"] if run.profile_dir else []),
        # CPU: verl's engines and vLLM without CUDA (cpu_platform.py has why each is needed)
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"+{rollout}.enable_sleep_mode=False",
        f"{rollout}.free_cache_engine=False",
        f"{rollout}.enforce_eager=True",
        f"++ray_kwargs.ray_init.address={run.ray_address}",  # the head started here (start_ray_head)
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


def environment(run: RealRun) -> dict[str, str]:
    """The driver's environment: the user's (server URL) plus, for the CPU, the shim and its switches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_"))}
    env.pop("PYTHONPATH", None)  # the venv has the package (editable); nothing of the caller's
    home = os.environ.get("RL_INSIGHT_HOME")
    env.update(
        RL_INSIGHT_SERVER_URL=run.server_url,
        VERL_FILE_LOGGER_PATH=str(run.metrics_file),
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",  # the log follows the run
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # Ray on 127.0.0.1
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",  # Ray 2.60 made token auth the default; the head is on 127.0.0.1 for this run only
        RAY_DEDUP_LOGS="0",
        RAY_raylet_start_wait_time_s="300",  # a loaded 2-core machine starts Ray's processes slowly
        RAY_agent_register_timeout_ms="300000",
        RAY_DASHBOARD_STARTUP_TIMEOUT_S="600",
        RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT="300",
        # CPU
        PYTHONPATH=str(SITE),
        VERL_USE_EXTERNAL_MODULES="verl_rl_insight.commands.demo.real.cpu_platform",
        VERL_PLATFORM="cpu",
        VERL_ENGINE_DEVICE="cuda",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
    )
    if home:
        env["RL_INSIGHT_HOME"] = home
    return env


def command(python: Path, run: RealRun, model: Path, data: Path) -> list[str]:
    return [str(python), "-m", "verl.trainer.main_ppo", *overrides(run, model, data)]


def prepare(run: RealRun, venv: Path | None = None) -> tuple[Path, Path, Path]:
    """Build the venv (cached) and the inputs: the venv's python, the model and the data folders."""
    venv = venv or real_venv.default_venv()
    real_venv.build(venv, real_venv.package_root())
    python = real_venv.venv_python(venv)
    run.folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        [str(python), "-m", "verl_rl_insight.commands.demo.real.inputs", str(run.folder / "inputs")],
        check=True,
        capture_output=True,
        text=True,
    )
    model, data = (Path(p) for p in json.loads(made.stdout.strip().splitlines()[-1]))
    return python, model, data


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ray_head_ports() -> tuple[list[str], int]:
    """The ``ray start --head`` flags that choose every port free, and the head's own port: several
    Ray clusters on one machine (CI, other jobs) otherwise collide on Ray's fixed default ports and
    the raylet dies."""
    port = free_port()
    while 10001 <= port <= 19999:  # Ray keeps this range for worker ports
        port = free_port()
    ports = {
        "--port": port,
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--ray-client-server-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--metrics-export-port": free_port(),
        "--runtime-env-agent-port": free_port(),
    }
    return [f"{flag}={value}" for flag, value in ports.items()], port


def ray_head_command(python: Path, temp_dir: Path) -> tuple[list[str], str]:
    """``ray start --head`` on 127.0.0.1 with every port chosen free (ray_head_ports). 16 logical
    CPUs (TransferQueue's storage actors and verl's workers need more than 2 to be scheduled at
    all) and 1 logical GPU (verl asks Ray for trainer.n_gpus_per_node GPUs): CPU."""
    flags, port = ray_head_ports()
    argv = [
        str(python.parent / "ray"),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=16",
        "--num-gpus=1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *flags,
    ]
    return argv, f"127.0.0.1:{port}"


@dataclasses.dataclass
class Started:
    """The run's processes: the Ray head and verl's driver, each in a session of its own."""

    head: subprocess.Popen[bytes]
    driver: subprocess.Popen[bytes]

    def stop(self) -> None:
        """End the driver, then the Ray head and every process of both sessions."""
        import signal

        for process in (self.driver, self.head):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(15)
                    break
                except subprocess.TimeoutExpired:
                    continue


def _raylet_died(temp_dir: Path) -> bool:
    """Whether the head's raylet died on a failed check (`ray start` then waits on, for minutes)."""
    return any(b"Check failed" in path.read_bytes() for path in temp_dir.glob("session_2*/logs/raylet.out"))


def _wait_for_head(head: subprocess.Popen[bytes], log: Path, temp_dir: Path, timeout_s: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_bytes()
        if b"block forever" in text:
            return
        if head.poll() is not None or b"Failed to start the dashboard" in text or _raylet_died(temp_dir):
            break
        time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not start; its output: {log}")


def start_head(python: Path, run: RealRun, env: dict[str, str], attempts: int = 3) -> subprocess.Popen[bytes]:
    """The run's Ray head, tried ``attempts`` times: on a loaded machine the raylet gives its dashboard
    agent a fixed time to start and dies when the agent is slower (Ray's WaitForPersistedPort)."""
    head_env = {k: v for k, v in env.items() if not k.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_"))}
    for attempt in range(1, attempts + 1):
        # short: Ray's socket paths under it must stay within AF_UNIX's 107 bytes (a pytest tmp path is not)
        temp_dir = Path(tempfile.mkdtemp(prefix="rl-real-ray-"))
        argv, run.ray_address = ray_head_command(python, temp_dir)
        head_log = run.folder / f"ray_head_{attempt}.log"
        with open(head_log, "wb") as out:
            head = subprocess.Popen(
                argv, env=head_env, cwd=str(run.folder), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            _wait_for_head(head, head_log, temp_dir)
            return head
        except BaseException as exc:  # an interrupted wait too: no head left behind
            Started(head, head).stop()
            if attempt == attempts or not isinstance(exc, RuntimeError):
                raise
    raise AssertionError("unreachable")


def start(run: RealRun, venv: Path | None = None) -> Started:
    """The Ray head, then verl's driver against it, its output in ``run.log_file``. The head gets
    the CPU environment (its workers inherit it); the run's own variables reach the workers the
    way they do on any cluster: through verl's runtime_env."""
    python, model, data = prepare(run, venv)
    env = environment(run)
    head = start_head(python, run, env)
    try:
        argv = command(python, run, model, data)
        with open(run.log_file, "wb") as log:
            driver = subprocess.Popen(
                argv, env=env, cwd=str(run.folder), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
    except BaseException:
        Started(head, head).stop()
        raise
    return Started(head, driver)
