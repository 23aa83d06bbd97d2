"""Driver for tests/trainer/test_rollout_engines.py: verl's real LLMServerManager._initialize_llm_servers
(0.8+, imports on CPU) with SIMULATED replicas whose servers serve real engine metric names.
argv: ENGINE REPLICAS PROJECT EXPERIMENT DISABLE_LOG_STATS(0|1). Prints READY, waits for a line on stdin."""

import asyncio
import sys

from omegaconf import OmegaConf

from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator

engine, replicas, project, experiment, disable = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

import verl  # noqa: E402
from verl.utils.tracking import Tracking  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerManager  # noqa: E402


class StandInReplica:
    """STAND-IN for vLLMReplica / SGLangReplica: same constructor and init_standalone contract."""

    def __init__(self, replica_rank, config, model_config, gpus_per_node, **kwargs):
        self.replica_rank = replica_rank
        self.config = config

    async def init_standalone(self):
        self.engine = EngineSimulator(engine, self.replica_rank)
        self._server_address = self.engine.address
        self._server_handle = None


tracking = Tracking(
    project,
    experiment,
    default_backend=["console", "rl_insight"],
    config={"trainer": {"project_name": project, "experiment_name": experiment}},
)
manager = LLMServerManager.__new__(LLMServerManager)  # the real class; only its constructor is skipped
manager.rollout_config = OmegaConf.create(
    {
        "name": engine,
        "disable_log_stats": disable == "1",
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
manager.rollout_replica_class = StandInReplica
manager.start_rank = 0
asyncio.run(manager._initialize_llm_servers())
print("READY", verl.__version__, " ".join(manager.server_addresses), flush=True)
sys.stdin.readline()
finish = getattr(tracking, "finish", None)
(finish or tracking.logger["rl_insight"].finish)()
print("DONE", flush=True)
