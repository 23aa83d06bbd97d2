"""The SIMULATED training run of ``rl-insight demo``: a task runner for verl's real ``run_ppo``
that does no training but goes through the real patched paths every step: ``Tracking``,
``marked_timer`` phases, a real ``DataProto`` into the real ``compute_advantage`` (log-prob
mismatch metrics), replicas started through the real ``LLMServerManager`` (simulated
engines), TransferQueue's real exporter when it starts, and simulated GPUs where there are none.
Metric curves look like a PPO/GRPO run: score rising, entropy falling, a slowly drifting mismatch.
"""

import asyncio
import math
import random
import sys
import threading
import time

import ray

from . import simulated_nvml


class SimulatedReplica:
    """Stands in for vLLMReplica / SGLangReplica (same constructor and init_standalone contract)."""

    engine = "vllm"

    def __init__(self, replica_rank, config, model_config, gpus_per_node, **kwargs):
        self.replica_rank = replica_rank

    async def init_standalone(self):
        from .simulated_engines import EngineSimulator

        self.simulator = EngineSimulator(self.engine, self.replica_rank)
        self._server_address = self.simulator.address
        self._server_handle = None


def start_replicas(engine, replicas):
    """verl's real LLMServerManager._initialize_llm_servers, with simulated replicas."""
    from omegaconf import OmegaConf

    from verl.workers.rollout.llm_server import LLMServerManager

    replica_class = type("SimulatedReplica", (SimulatedReplica,), {"engine": engine})
    manager = LLMServerManager.__new__(LLMServerManager)
    manager.rollout_config = OmegaConf.create({
        "name": engine, "disable_log_stats": False, "tensor_model_parallel_size": 1, "data_parallel_size": 1,
        "pipeline_model_parallel_size": 1, "n_gpus_per_node": replicas, "nnodes": 1, "prometheus": {"enable": False}})
    manager.model_config = None
    manager.worker_group = None
    manager.rollout_replica_class = replica_class
    manager.start_rank = 0
    asyncio.run(manager._initialize_llm_servers())
    return [r.simulator for r in manager.rollout_replicas]


def start_transfer_queue(timeout_s=60):
    """The real transferqueue with its metrics exporter, or None (not installed, or it did not start)."""
    result = {}

    def init():
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
    return result.get("tq")


def exchange_through(tq, step):
    """Put, get and clear one sample: TransferQueue's controller counts real requests."""
    import torch

    try:
        tq.kv_put(key=f"sample_{step}", partition_id="demo", fields={"tokens": torch.ones(1, 8)})
        tq.kv_batch_get(keys=[f"sample_{step}"], partition_id="demo")
        tq.kv_clear(keys=[f"sample_{step}"], partition_id="demo")
    except Exception as exc:
        if step == 1:
            print(f"[demo] TransferQueue exchange failed ({exc}); its request panels stay empty", flush=True)


def batch_for(step, rng, batch=8, length=64):
    """A DataProto like a rollout's: log probs of rollout and actor with a mismatch that drifts."""
    import numpy as np
    import torch

    from verl import DataProto

    g = torch.Generator().manual_seed(step)
    rollout = torch.log(torch.rand(batch, length, generator=g) * 0.9 + 0.05)
    drift = 0.004 + 0.002 * math.sin(step / 5) + (0.01 if rng.random() < 0.05 else 0.0)
    actor = rollout + torch.randn(batch, length, generator=g) * drift
    lengths = torch.randint(length // 4, length, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), lengths - 1] = (torch.rand(batch, generator=g) < 0.3 + step / 100).float()
    return DataProto.from_dict(
        tensors={"responses": torch.randint(0, 1000, (batch, length), generator=g), "rollout_log_probs": rollout,
                 "old_log_probs": actor, "response_mask": mask, "token_level_rewards": rewards},
        non_tensors={"uid": np.array([f"q{i // 4}" for i in range(batch)], dtype=object)})


def curves(step, total, rng, timing, tokens):
    progress = step / max(total, 1)
    noise = lambda scale: rng.gauss(0, scale)  # noqa: E731
    score = 0.25 + 0.55 * (1 - math.exp(-3 * progress)) + noise(0.03)
    metrics = {
        "critic/score/mean": score, "critic/rewards/mean": score, "critic/score/max": 1.0, "critic/score/min": 0.0,
        "actor/pg_loss": -0.02 * (1 - progress) + noise(0.01), "actor/entropy": 1.2 * math.exp(-progress) + noise(0.02),
        "actor/grad_norm": 0.8 + 0.3 * math.exp(-4 * progress) + abs(noise(0.1)),
        "actor/reward_kl_penalty": 0.001 + 0.01 * progress, "actor/reward_kl_penalty_coeff": 0.001,
        "critic/vf_loss": 0.5 * math.exp(-2 * progress) + abs(noise(0.02)),
        "response_length/mean": 300 + 400 * progress + noise(20), "response_length/max": 1024.0,
        "response_length/clip_ratio": max(0.0, 0.02 + noise(0.01)),
        "perf/throughput": tokens / max(timing.get("step", 1.0), 1e-3) / 8, "training/epoch": 0,
    }
    metrics.update({f"timing_s/{name}": seconds for name, seconds in timing.items()})
    return metrics


@ray.remote(num_cpus=0)
class SimulatedTaskRunner:
    """verl's TaskRunner replaced by the simulation; ``run(config)`` as run_ppo calls it."""

    def run(self, config):
        from omegaconf import OmegaConf

        from verl.trainer.ppo import ray_trainer
        from verl.trainer.ppo.core_algos import AdvantageEstimator
        from verl.utils.tracking import Tracking

        demo = config.rl_insight_demo
        rng = random.Random(0)
        simulated_nvml.load_level[0] = 0.05
        engines = start_replicas(demo.engine, int(demo.replicas))
        tq = start_transfer_queue() if demo.transfer_queue else None
        tracking = Tracking(config.trainer.project_name, config.trainer.experiment_name,
                            default_backend=list(config.trainer.logger), config=OmegaConf.to_container(config))
        total = int(config.trainer.total_training_steps)
        step_s = float(demo.step_seconds)
        marked_timer = ray_trainer.marked_timer
        for step in range(1, total + 1):
            self.global_steps = step            # what the patches read, as in verl's trainers
            timing = {}
            tokens = 0
            with marked_timer("step", timing):
                with marked_timer("gen", timing):
                    simulated_nvml.load_level[0] = 0.85
                    for engine in engines:
                        engine.simulate_generate(requests=16, response_tokens=400)
                        tokens += 16 * 400
                    if tq is not None:
                        exchange_through(tq, step)
                    time.sleep(step_s * 0.45)
                batch = batch_for(step, rng)
                with marked_timer("reward", timing):
                    time.sleep(step_s * 0.05)
                with marked_timer("old_log_prob", timing):
                    time.sleep(step_s * 0.1)
                with marked_timer("ref", timing):
                    time.sleep(step_s * 0.1)
                with marked_timer("adv", timing):
                    batch = ray_trainer.compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO)
                with marked_timer("update_actor", timing):
                    simulated_nvml.load_level[0] = 0.95
                    time.sleep(step_s * 0.25)
                with marked_timer("update_weights", timing):
                    simulated_nvml.load_level[0] = 0.3
                    time.sleep(step_s * 0.05)
            tracking.log(curves(step, total, rng, timing, tokens), step=step)
            done = int(30 * step / total)
            print(f"[demo] SIMULATED step {step}/{total} [{'#' * done}{'.' * (30 - done)}] "
                  f"{time.strftime('%H:%M:%S')}", flush=True, file=sys.stdout)
        time.sleep(float(demo.linger_s))   # let Prometheus scrape the replicas once more
        tracking.finish()
        if tq is not None:
            tq.close()
        for engine in engines:
            engine.close()
        return total
