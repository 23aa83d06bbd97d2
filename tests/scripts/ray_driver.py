"""Driver for tests/trainer/test_ray_workers.py: verl's real run_ppo with a small task runner that logs
through real ``Tracking`` inside a Ray worker. argv: RAY_ADDRESS PROJECT EXPERIMENT STEPS [OVERRIDES...]"""

import os
import sys

import ray
import verl.trainer.main_ppo as main_ppo
from hydra import compose, initialize_config_dir

address, project, experiment, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
overrides = sys.argv[5:]


@ray.remote(num_cpus=0)
class LoggingTaskRunner:
    """Stands in for verl's TaskRunner: no model, but the real Tracking in a real Ray worker."""

    def run(self, config):
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        tracking = Tracking(
            project_name=config.trainer.project_name,
            experiment_name=config.trainer.experiment_name,
            default_backend=config.trainer.logger,
            config=OmegaConf.to_container(config, resolve=True),
        )
        for step in range(1, int(config.trainer.total_training_steps) + 1):
            tracking.log({"actor/pg_loss": 1.0 / step, "worker/pid": os.getpid()}, step=step)
        finish = getattr(tracking, "finish", None)
        if finish is not None:
            finish()
        else:  # verl < 0.9 has no Tracking.finish: the backend is flushed at exit, do it now
            tracking.logger["rl_insight"].finish()
        return os.getpid()


config_dir = os.path.join(os.path.dirname(main_ppo.__file__), "config")
with initialize_config_dir(config_dir=config_dir, version_base=None):
    cfg = compose(
        config_name="ppo_trainer",
        overrides=[
            "trainer.logger=[console,rl_insight]",
            f"trainer.project_name={project}",
            f"trainer.experiment_name={experiment}",
            f"trainer.total_training_steps={steps}",
            f"++ray_kwargs.ray_init.address={address}",
            *overrides,
        ],
    )
main_ppo.run_ppo(cfg, task_runner_class=LoggingTaskRunner)
print("DRIVER_PID", os.getpid())
