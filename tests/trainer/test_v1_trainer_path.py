"""verl 0.9.1's v1 trainer (what ``python -m verl.trainer.main_ppo`` runs) as the simulated trainer
takes it (commands/demo/v1_path.py), without the real-verl venv: the step's rows in the real
TransferQueue, verl's own ``compute_advantage_for_multi_trajectories`` handed the few fields v1 reads
(no prompts, responses or data_source), v1's own ``_start_profiling``/``_stop_profiling`` around the
step. What a user sees must be what the real run shows: the GRPO group with its prompt, responses and
data source in ``rl-insight samples --group``, the group statistics at the step, the profiler's step
boundaries at the step.

Stand-ins (named): the rollout (verl_step.rollout_batch: the demo's batch), the tokenizer (the demo's
SimulatedTokenizer), the actor's profiler (a recorder of what v1 asks of it)."""

import json

import pytest

from tests.helpers import free_port, http, rl_insight, run_python, start_hub_process, stop_group

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

CONFIG = {"plugins": {"hardware": {"enabled": False}, "samples": {"enabled": True, "groups": 1}}}
STEP = 3

V1_STEP = """
import json, os
import ray
from verl_rl_insight.commands.demo import ray_start
ray_start.init(num_cpus=8, include_dashboard=False)  # logical CPUs: TransferQueue's actors each ask for one
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo import verl_step
from verl_rl_insight.commands.demo.simulation import SimulatedTokenizer
from verl_rl_insight.commands.demo.v1_path import V1Steps
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.hookspecs import hookimpl

tq.init({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
tracking = Tracking("samples", "v1", default_backend=["rl_insight"])
points = []
class Recorder:  # what the profiler plugin is told at verl's step boundaries
    @hookimpl
    def rl_insight_profile_point(self, run, trainer, phase, when, step):
        points.append([phase, when, step, trainer is this])
runtime.get_runtime().pm.register(Recorder(), name="recorder")

asked = []
class ActorProfiler:  # the actor worker group's profiler: what v1's own methods ask of it
    def start(self, role=None, profile_step=None):
        asked.append(["start", profile_step])
    def stop(self, run_command=False):
        asked.append(["stop", run_command])

class Trainer(V1Steps):
    def __init__(self):
        self.config = OmegaConf.create({"global_profiler": {"steps": [STEP], "profile_continuous_steps": False}})
        self.tokenizer = SimulatedTokenizer()
        self.init_v1(self.config, ActorProfiler(), total=STEP)
        self.curr_step_profile = True  # v1 decided it at the end of the step before
        self.global_steps = STEP

this = Trainer()
full = verl_step.rollout_batch(STEP, prompts=2)
rows = {key: value.clone() for key, value in full.batch.items()}
this._start_profiling()
out = this.advantage_step(tq, full, verl_step.ROLLOUT_N)
this._stop_profiling()
tracking.log({"training/global_step": STEP}, step=STEP)
tracking.finish()
tq.close()
ray.shutdown()
decode = SimulatedTokenizer().decode
mask = rows["response_mask"].bool()
width = rows["responses"].shape[-1]
print(json.dumps({
    "points": points,
    "asked": asked,
    "responses": [decode(rows["responses"][i][mask[i]].tolist()) for i in range(len(mask))],
    "prompts": [decode(p[m].tolist()) for p, m in zip(rows["prompts"], rows["attention_mask"][:, :-width].bool())],
    "uids": [str(u) for u in full.non_tensor_batch["uid"]],
    "sources": [str(s) for s in full.non_tensor_batch["data_source"]],
    "advantages": out.batch["advantages"].sum(-1).div(mask.sum(-1)).tolist(),
}))
""".replace("STEP", str(STEP))


@pytest.fixture
def v1_run(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path)
    hub = f"http://127.0.0.1:{port}"
    try:
        env = {"RL_INSIGHT_SERVER_URL": hub, "VERL_RL_INSIGHT_CONFIG": json.dumps(CONFIG)}
        result = run_python(V1_STEP, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        yield hub, json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        stop_group(process)


def test_v1s_grpo_group_statistics_and_profiler_boundaries_reach_the_user(v1_run):
    hub, run = v1_run
    # the GRPO group: prompt, responses and data source from TransferQueue, at v1's step
    shown = rl_insight("samples", "--project", "samples", "--experiment", "v1", "--server", hub, "--group", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["step"] == STEP and len(found["groups"]) == 1, found
    [group] = found["groups"]
    members = [i for i, uid in enumerate(run["uids"]) if uid == group["uid"]]
    assert group["prompt"] == run["prompts"][members[0]] and group["data_source"] == run["sources"][members[0]]
    responses = group["responses"]
    assert [r["index"] for r in responses] == members
    assert [r["response"] for r in responses] == [run["responses"][i] for i in members]
    assert [r["advantage"] for r in responses] == pytest.approx([run["advantages"][i] for i in members], abs=1e-5)
    # the group statistics at the step v1 logged
    text = http("GET", hub + "/metrics")[1].decode()
    share = "rl_insight_monitor_rl_insight_group_zero_variance_share{"
    assert [line for line in text.splitlines() if line.startswith(share)], "no group statistics"
    # the profiler's step boundaries: v1's own methods, at the step, with the trainer; verl's own logic
    # then started and stopped the actor's profiler for the step
    assert run["points"] == [
        ["start_profile", "enter", STEP, True],
        ["start_profile", "exit", STEP, True],
        ["stop_profile", "enter", STEP, True],
        ["stop_profile", "exit", STEP, True],
    ]
    assert run["asked"] == [["start", STEP], ["stop", True]]
