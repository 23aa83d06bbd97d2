"""The SIMULATED training run of ``rl-insight demo``: a task runner for verl's real ``run_ppo``
that does no training but goes through the real patched paths every step: ``Tracking``,
``marked_timer`` phases, a real ``DataProto`` into the real ``compute_advantage`` (log-prob
mismatch metrics), replicas started through the real ``LLMServerManager`` (simulated
engines), TransferQueue's real exporter when it starts, and simulated GPUs where there are none.
Every step logs the dict verl's trainer logs (``verl_step``: ``training/global_step``,
``training/epoch``, verl's own data, timing and throughput metrics, validation every 5 steps); its
curves look like a PPO/GRPO run: score rising, entropy falling, a slowly drifting mismatch.
"""

import asyncio
import random
import threading
import time
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import ray

from verl_rl_insight.commands.demo import verl_step
from verl_rl_insight.commands.demo.v1_path import V1Steps
from verl_rl_insight.commands.demo.verl_step import StepMetrics
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.plugins import hardware
from verl_rl_insight.trainer.samplers import simulated_nvml

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from verl import DataProto

    from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator


class SimulatedReplica:
    """Stands in for vLLMReplica / SGLangReplica (same constructor and init_standalone contract)."""

    engine = "vllm"

    def __init__(
        self, replica_rank: int, config: object, model_config: object, gpus_per_node: int, **kwargs: object
    ) -> None:
        self.replica_rank = replica_rank

    async def init_standalone(self) -> None:
        from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator

        self.simulator = EngineSimulator(self.engine, self.replica_rank)
        self._server_address = self.simulator.address
        self._server_handle = None


def start_replicas(engine: str, replicas: int) -> list["EngineSimulator"]:
    """verl's real LLMServerManager._initialize_llm_servers, with simulated replicas."""
    from omegaconf import OmegaConf
    from verl.workers.rollout.llm_server import LLMServerManager

    replica_class = type("SimulatedReplica", (SimulatedReplica,), {"engine": engine})
    manager = LLMServerManager.__new__(LLMServerManager)
    manager.rollout_config = OmegaConf.create(
        {
            "name": engine,
            "disable_log_stats": False,
            "tensor_model_parallel_size": 1,
            "data_parallel_size": 1,
            "pipeline_model_parallel_size": 1,
            "n_gpus_per_node": replicas,
            "nnodes": 1,
            "prometheus": {"enable": False},
        }
    )
    manager.model_config = None
    manager.worker_group = None
    manager.rollout_replica_class = replica_class
    manager.start_rank = 0
    asyncio.run(manager._initialize_llm_servers())
    return [r.simulator for r in manager.rollout_replicas]


def start_transfer_queue(timeout_s: int = 180) -> ModuleType | None:
    """The real transferqueue with its metrics exporter, or None (not installed, or it did not start:
    its Ray actors each import torch, which takes a minute and more on 2 busy cores)."""
    result: dict[str, ModuleType | Exception] = {}

    def init() -> None:
        try:
            import transfer_queue as tq

            tq.init({"metrics": {"enabled": True}, "backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
            result["tq"] = tq
        except Exception as exc:
            result["error"] = exc

    thread = threading.Thread(target=init, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "tq" not in result:
        print(f"[demo] TransferQueue not simulated ({result.get('error', 'did not start in time')})", flush=True)
    tq = result.get("tq")
    return tq if isinstance(tq, ModuleType) else None


def exchange_through(tq: ModuleType, step: int) -> None:
    """Put and get one sample: TransferQueue's controller counts real requests; the partition
    keeps its samples (as a step's batch lives on) so its progress is reported."""
    import torch

    try:
        tq.kv_put(key=f"sample_{step}", partition_id="demo", fields={"tokens": torch.ones(1, 8)})
        tq.kv_batch_get(keys=[f"sample_{step}"], partition_id="demo")
    except Exception as exc:
        if step == 1:
            print(f"[demo] TransferQueue exchange failed ({exc}); its request panels stay empty", flush=True)


TEST_FREQ = 5  # trainer.test_freq of the simulated run: validation keys every 5 steps and at the last


def verl_metrics(batch: "DataProto", timing: dict[str, float], step: int = 1, total: int = 100) -> StepMetrics:
    """What verl's own trainer logs at a step (``verl_step.step_metrics``: fit's keys, by verl's own
    functions on the step's batch and timings), and the rollout-correction metrics fit adds when
    ``algorithm.rollout_correction`` is set."""
    from verl.trainer.ppo import rollout_corr_helper

    metrics = verl_step.step_metrics(step, total, batch=batch, timing=timing, test_freq=TEST_FREQ)
    metrics.update(
        rollout_corr_helper.compute_rollout_corr_metrics_from_logprobs(
            batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], batch.batch["response_mask"]
        )
    )
    return metrics


# actor/kl_loss of a healthy public GRPO run (tests/data/real_runs/yushengsu_amd_grpo_deepseek7b_gsm8k.jsonl:
# deepseek-7b on GSM8K, use_kl_loss with kl_coef 0.001, 1119 steps) at 0 %, 10 %, ... 100 % of the run;
# the demo's run, however long, follows it scaled to its own length (tests/e2e/test_demo_curves.py reads it back)
HEALTHY_KL_LOSS = (0.001, 0.062, 0.068, 0.068, 0.064, 0.075, 0.072, 0.069, 0.08, 0.089, 0.08)
HEALTHY_KL_COEF = 0.001


def along(points: Sequence[float], progress: float) -> float:
    """The value at ``progress`` (0 to 1) of a curve given at evenly spaced points (linear between)."""
    at = min(max(progress, 0.0), 1.0) * (len(points) - 1)
    i = min(int(at), len(points) - 2)
    return points[i] + (points[i + 1] - points[i]) * (at - i)


def healthy(key: str, step: int, total: int, rng: random.Random, metrics: StepMetrics) -> float | None:
    """A healthy run's value of a key verl logs under another set-up (kl loss, reward KL, memory), or None."""
    progress = verl_step.progress_of(step, total)
    noise = 1 + rng.gauss(0, 0.05)
    if key in ("actor/kl_loss", "actor/reward_kl_penalty"):
        return along(HEALTHY_KL_LOSS, progress) * noise
    if key in ("actor/kl_coef", "actor/reward_kl_penalty_coeff"):
        return HEALTHY_KL_COEF
    if key == "actor/entropy_loss":  # (older verl's name of the entropy)
        entropy = metrics.get("actor/entropy")
        return float(entropy) if isinstance(entropy, (int, float)) else None
    memory = {
        "perf/max_memory_allocated_gb": 38.0,
        "perf/max_memory_reserved_gb": 52.0,
        "perf/cpu_memory_used_gb": 96.0,
    }
    return memory[key] * (1 + rng.gauss(0, 0.01)) if key in memory else None


def curves(step: int, total: int, rng: random.Random, timing: dict[str, float], batch: "DataProto") -> StepMetrics:
    """The step's metrics: the dict verl's trainer logs (``verl_metrics``: the score rises with the
    batch's rewards, the entropy falls), and a plausible value for every other key of an every-step
    group of the dashboards that this run's set-up does not log, so that every panel has data."""
    from verl_rl_insight.dashboards import keys

    metrics = verl_metrics(batch, timing, step, total)
    for key in sorted(keys.trainer_keys()):  # every other key of an every-step group
        group = keys.group_of(key)
        by_plugins = key.startswith(("training/rollout_", "rl_insight/"))  # probs_diff, group_stats: from the batch
        if key not in metrics and group is not None and keys.GROUPS[group][1] is None and not by_plugins:
            value = healthy(key, step, total, rng, metrics)
            if value is None:
                value = abs(rng.gauss(0.05, 0.02)) if keys.is_fraction(key) else abs(rng.gauss(1.0, 0.1))
            metrics[key] = value
    return metrics


CALLS_PER_STEP = 4  # generate calls each replica serves per step
STRAGGLER_CHANCE = 0.25  # the share of steps in which one replica's last call takes four times as long


def generation_plan(replicas: int, seconds: float, step: int) -> list[list[float]]:
    """The seconds of each generate call of each replica at ``step``: lengths long-tailed
    (log-normal) as response lengths are, about ``seconds`` in all per replica; now and then one
    straggler holds the step back. Seeded by the step: the same demo draws the same timeline."""
    rng = random.Random(step)
    plan = [
        [seconds / CALLS_PER_STEP * 0.8 * min(3.0, rng.lognormvariate(0.0, 0.5)) for _ in range(CALLS_PER_STEP)]
        for _ in range(replicas)
    ]
    if replicas and rng.random() < STRAGGLER_CHANCE:
        plan[rng.randrange(replicas)][-1] *= 4
    return plan


def generate_on(engines: Sequence["EngineSimulator"], seconds: float, step: int) -> None:
    """Each replica serves its calls of ``generation_plan``, each reported on its timeline lane
    through verl's own RLInsightLogger.trace_state, as verl's vLLM / SGLang servers report every
    generate call."""
    from verl.utils.tracking import RLInsightLogger

    def replica(engine: "EngineSimulator", calls: list[float]) -> None:
        for call_s in calls:
            with RLInsightLogger.trace_state(
                f"{engine.engine}_generate", state_lane_id=f"replica_{engine.replica_rank}"
            ):
                engine.simulate_generate(requests=16 // CALLS_PER_STEP, response_tokens=400)
                time.sleep(call_s)

    plan = generation_plan(len(engines), seconds, step)
    threads = [threading.Thread(target=replica, args=(engine, calls)) for engine, calls in zip(engines, plan)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class SimulatedTokenizer:
    """Stands in for the trainer's tokenizer: token ids to words of a small vocabulary, so that the
    demo's samples (plugin samples) read as text."""

    WORDS = (
        "the answer is so we add then multiply each side by two and check that it holds "
        "first note step one two three four five six seven eight nine ten therefore"
    ).split()

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return " ".join(self.WORDS[int(i) % len(self.WORDS)] for i in ids)


class SimulatedActor:
    """The actor worker's profiler, built as verl's workers build it (engine_workers: DistProfiler
    from ``actor_rollout_ref.actor.profiler`` with its tool's config), and a little real torch
    work in its update, so that a profiled step's trace holds something."""

    def __init__(self, config: "DictConfig") -> None:
        from omegaconf import OmegaConf
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.profiler import DistProfiler, ProfilerConfig

        # resolved, as verl's TaskRunner resolves the config before it builds the workers
        profiler: Any = OmegaConf.create(OmegaConf.to_container(config.actor_rollout_ref.actor.profiler, resolve=True))
        tool = profiler.get("tool")
        tool_config = omega_conf_to_dataclass(profiler.tool_config.get(tool)) if tool in ("torch", "nsys") else None
        self.profiler = DistProfiler(
            rank=0,
            config=omega_conf_to_dataclass(profiler, dataclass_type=ProfilerConfig),
            tool_config=tool_config,
            save_file_prefix="actor",
        )

    def update(self, seconds: float) -> None:
        import torch

        deadline = time.monotonic() + seconds
        weights = torch.randn(64, 64)
        # the range verl's engine_workers put around it (DistProfiler.annotate(role="actor_update") is a
        # record_function of that name in the torch tool's continuous mode): the trace names the stage
        with torch.profiler.record_function("actor_update"):
            while time.monotonic() < deadline:
                weights = torch.tanh(weights @ weights.T / 64)
                time.sleep(0.01)


class StepParts(NamedTuple):
    """What a step of the demo drives."""

    engines: list["EngineSimulator"]  # the replicas
    transfer_queue: ModuleType | None  # TransferQueue, when the demo runs it
    actor: SimulatedActor
    load: simulated_nvml.SimulatedLoad  # the GPUs' load


@ray.remote(num_cpus=0)
class SimulatedTaskRunner(V1Steps):
    """verl's TaskRunner replaced by the simulation; ``run(config)`` as run_ppo calls it. Its loop is
    verl 0.9.1's v1 trainer's (what main_ppo runs): v1's own ``_start_profiling``/``_stop_profiling``
    around the step, the advantages through v1's helper (``v1_path``)."""

    def step_phases(
        self, step: int, total: int, timing: dict[str, float], parts: "StepParts", step_s: float
    ) -> "DataProto":
        """One step's phases as verl's fit times them (``marked_timer``), each taking its share of the
        step; the batch is verl's own (``rollout_batch``), its advantages verl's GRPO."""
        from verl.trainer.ppo import ray_trainer

        engines, tq, actor, load = parts.engines, parts.transfer_queue, parts.actor, parts.load
        marked_timer = ray_trainer.marked_timer
        with marked_timer("gen", timing):
            load.set(0.85)
            generate_on(engines, step_s * 0.4, step)
            if tq is not None:
                exchange_through(tq, step)
            time.sleep(step_s * 0.05)
        batch = verl_step.rollout_batch(step, total, prompts=verl_step.PROMPTS)
        for phase, share in (("reward", 0.05), ("old_log_prob", 0.1), ("ref", 0.05), ("values", 0.05)):
            with marked_timer(phase, timing):
                time.sleep(step_s * share)
        with marked_timer("adv", timing):  # v1's: its rows in TransferQueue, compute_advantage from a helper
            batch = self.advantage_step(tq, batch, verl_step.ROLLOUT_N)
        with marked_timer("update_critic", timing):
            time.sleep(step_s * 0.05)
        with marked_timer("update_actor", timing):
            load.set(0.95)
            actor.update(step_s * 0.25)
        with marked_timer("update_weights", timing):
            load.set(0.3)
            time.sleep(step_s * 0.05)
        return batch

    def run(self, config: "DictConfig") -> int:
        from omegaconf import OmegaConf
        from verl.trainer.ppo import ray_trainer
        from verl.utils.tracking import Tracking

        demo = config.rl_insight_demo
        self.config = config  # what verl's trainers read global_profiler from, as the plugins do
        self.tokenizer = SimulatedTokenizer()  # what the samples plugin decodes the batch with
        actor = SimulatedActor(config)
        rng = random.Random(0)
        load = simulated_nvml.SimulatedLoad(0.05)  # handed to the hardware plugin: simulate_gpus is the demo's
        runtime.start(config, plugins={"hardware": hardware.Plugin(simulated_load=load)})
        engines = start_replicas(demo.engine, int(demo.replicas))
        tq = start_transfer_queue() if demo.transfer_queue else None
        tracking = Tracking(
            config.trainer.project_name,
            config.trainer.experiment_name,
            default_backend=list(config.trainer.logger),
            config=OmegaConf.to_container(config),
        )
        total = int(config.trainer.total_training_steps)
        step_s = float(demo.step_seconds)
        marked_timer = ray_trainer.marked_timer
        # v1's fit loop: whether a step is profiled is decided at the end of the step before
        self.init_v1(config, actor.profiler, total)
        for step in range(1, total + 1):
            self.global_steps = step  # what the patches read, as in verl's trainers
            timing: dict[str, float] = {}
            with marked_timer("step", timing):
                self._start_profiling()
                batch = self.step_phases(step, total, timing, StepParts(engines, tq, actor, load), step_s)
                self._stop_profiling()
            tracking.log(curves(step, total, rng, timing, batch), step=step)
        time.sleep(float(demo.linger_s))  # let Prometheus scrape the replicas once more
        tracking.finish()
        if tq is not None:
            tq.close()
        for engine in engines:
            engine.close()
        return total
