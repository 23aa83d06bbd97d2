"""Samples worth reading (plugin samples): validation generations from verl's own validation path,
the full GRPO group with its ground truth from verl's real compute_advantage, DAPO's filtered groups
from verl's own filter, each through verl's real Tracking in a process of its own, its spans through
the real OTLP path into a real server, read back by `rl-insight samples --validation / --group /
--filtered`.

Stand-ins (named): the rollout replicas (vLLM / SGLang cannot run here) answer validation prompts
with known tokens and rm_scores; the tokenizer is the demo's SimulatedTokenizer (no tokenizer files
can be downloaded here); TransferQueue's store (DAPO's trajectories) is a dict behind
``tq.kv_batch_get``."""

import contextlib
import json
import re

import pytest

from tests.conftest import isolated
from tests.helpers import hub_process, rl_insight, run_python

CONFIG = {"plugins": {"hardware": {"enabled": False}, "samples": {"enabled": True, "validation": 4, "groups": 1}}}

VALIDATION = """
import json
import numpy as np, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.tracking import Tracking, ValidationGenerationsLogger
from verl_rl_insight.commands.demo.simulation import SimulatedTokenizer

PROMPTS, N, P, R = 6, 2, 4, 5
SOURCES = ["openai/gsm8k", "math", "openai/gsm8k", "math", "aime", "openai/gsm8k"]
TRUTHS = [str(17 * i + 3) for i in range(PROMPTS)]
data = {
    "input_ids": torch.arange(PROMPTS * P).reshape(PROMPTS, P) * 3 % 29 + 1,
    "attention_mask": torch.ones(PROMPTS, P, dtype=torch.long),
    "data_source": np.array(SOURCES, dtype=object),
    "reward_model": np.array([{"ground_truth": t, "style": "rule"} for t in TRUTHS], dtype=object),
}
data["raw_prompt_ids"] = np.array([row.tolist() for row in data["input_ids"]] + [None], dtype=object)[:-1]


class StandInRollout:  # the rollout replicas: known responses and a known score at each one's last token
    def generate_sequences(self, batch):
        rows = len(batch)
        prompts = torch.tensor([list(ids) for ids in batch.non_tensor_batch["raw_prompt_ids"]])
        responses = (torch.arange(rows * R).reshape(rows, R) * 7 + 5) % 31
        scores = torch.zeros(rows, R)
        scores[:, -1] = torch.arange(rows, dtype=torch.float32) / 10
        return DataProto.from_dict(tensors={"prompts": prompts, "responses": responses, "rm_scores": scores})


handed = []
class Spy(ValidationGenerationsLogger):  # verl's own logger, recording what verl hands it
    def log(self, loggers, samples, step):
        handed.extend([list(s) for s in samples])
        return super().log(loggers, samples, step)


trainer = object.__new__(RayPPOTrainer)
trainer.config = OmegaConf.create({
    "trainer": {"log_val_generations": 4, "logger": ["console"], "validation_data_dir": None},
    "actor_rollout_ref": {"rollout": {"val_kwargs": {"n": N, "do_sample": True}, "agent": {"num_workers": 1}}},
})
trainer.val_dataloader = [data]
trainer.tokenizer = SimulatedTokenizer()
trainer.tokenizer.eos_token_id, trainer.tokenizer.pad_token_id = 0, 0
trainer.async_rollout_manager = StandInRollout()
trainer.use_rm = False
trainer.global_steps = 5
trainer.validation_generations_logger = Spy("samples", "val")

tracking = Tracking("samples", "val", default_backend=["rl_insight"])
metrics = trainer._validate()  # verl's own validation path
tracking.log({**metrics, "training/global_step": 5}, step=5)
tracking.finish()
inputs = [SimulatedTokenizer().decode(row) for row in data["input_ids"].repeat_interleave(N, 0)]
truth_of = {text: TRUTHS[i // N] for i, text in enumerate(inputs)}
source_of = {text: SOURCES[i // N] for i, text in enumerate(inputs)}
print(json.dumps({"handed": handed, "truth_of": truth_of, "source_of": source_of, "metrics": sorted(metrics)}))
"""

GROUP = """
import json
import numpy as np, torch
from verl import DataProto
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.simulation import SimulatedTokenizer
from verl_rl_insight.commands.demo.verl_step import step_metrics

P, R = 4, 6
# (uid, ground truth, scores): g2 has the widest spread, so its group is the one kept
GROUPS = [("g1", "12", [1.0, 1.0, 1.0, 1.0]), ("g2", "x = 7", [0.0, 1.0, 0.0, 0.5]), ("g3", "42", [0.0, 0.2, 0.0, 0.0])]
rows = [(uid, truth, s) for uid, truth, scores in GROUPS for s in scores]
n = len(rows)
lengths = torch.tensor([3, 6, 2, 5] * len(GROUPS))
mask = (torch.arange(R)[None, :] < lengths[:, None]).long()
scores = torch.zeros(n, R)
scores[torch.arange(n), lengths - 1] = torch.tensor([s for *_, s in rows])
data = DataProto.from_dict(
    tensors={
        "prompts": torch.arange(n * P).reshape(n, P) % 23 + 1,
        "responses": (torch.arange(n * R).reshape(n, R) * 5 + 2) % 29,
        "attention_mask": torch.cat([torch.ones(n, P, dtype=torch.long), mask], dim=1),
        "response_mask": mask,
        "token_level_scores": scores,
        "token_level_rewards": scores,
    },
    non_tensors={
        "uid": np.array([uid for uid, *_ in rows], dtype=object),
        "data_source": np.array(["math"] * n, dtype=object),
        "reward_model": np.array([{"ground_truth": truth, "style": "rule"} for _, truth, _ in rows], dtype=object),
    },
)


class Trainer:
    global_steps = 7
    tokenizer = SimulatedTokenizer()

    def step(self):
        with ray_trainer.marked_timer("adv", {}):
            return ray_trainer.compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO)


tracking = Tracking("samples", "group", default_backend=["rl_insight"])
out = Trainer().step()
tracking.log(step_metrics(7), step=7)
tracking.finish()
adv = out.batch["advantages"]
members = [i for i, (uid, *_) in enumerate(rows) if uid == "g2"]
print(json.dumps({
    "index": members,
    "scores": [rows[i][2] for i in members],
    "advantages": [float(adv[i, 0]) for i in members],
    "responses": [SimulatedTokenizer().decode(out.batch["responses"][i, : int(lengths[i])].tolist()) for i in members],
}))
"""


DAPO = """
import json
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.v1 import replay_buffer
from verl.utils.tracking import DapoFilteredRewardTableLogger, Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics

# (uid, each trajectory's reward): g1 and g4 all solved, g2 none, g3 mixed (kept)
GROUPS = {"g1": [1.0, 1.0, 1.0], "g2": [0.0, 0.0, 0.0], "g3": [0.0, 1.0, 0.0], "g4": [1.0, 1.0, 1.0]}
store = {f"{uid}_0_{j}": torch.tensor([0.0, r]) for uid, rewards in GROUPS.items() for j, r in enumerate(rewards)}


class StandInTransferQueue:  # TransferQueue's store of finished trajectories (its Ray actors do not run here)
    @staticmethod
    def kv_batch_get(keys, partition_id, select_fields):
        return {"rm_scores": [store[k] for k in keys]}


replay_buffer.tq = StandInTransferQueue
buffer = replay_buffer.ReplayBuffer(
    trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
    max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=lambda *args: None,
    filter_groups_metric="reward", train_batch_size=4, gen_batch_size=4,
)
buffer.partitions["train"] = {key: {} for key in store}
buffer.finished_keys["train"] = set(GROUPS)
_, dropped, _, counts = buffer._terminal_eviction_reasons(9, "train")  # verl's DAPO filter

tracking = Tracking("samples", "dapo", default_backend=["rl_insight"])
tracking.log(step_metrics(9), step=9)
DapoFilteredRewardTableLogger("samples", "dapo").log(["console"], counts, 9)  # as the v1 trainer does
tracking.finish()
print(json.dumps({"dropped": sorted(dropped), "counts": {str(k): v for k, v in counts.items()}}))
"""


@pytest.fixture
def hub(tmp_path):
    with hub_process(tmp_path) as url:
        yield url


@pytest.fixture(scope="module")
def group_run(tmp_path_factory):
    """(hub, what the job handed verl's loggers): the GRPO job's run, for the tests that only read it."""
    folder = tmp_path_factory.mktemp("group")
    with contextlib.ExitStack() as stack:
        with isolated(folder / "home"):
            url = stack.enter_context(hub_process(folder))
            expected = run_job(url, GROUP)
        yield url, expected


def run_job(hub, script, config=CONFIG):
    env = {"RL_INSIGHT_SERVER_URL": hub, "VERL_RL_INSIGHT_CONFIG": json.dumps(config)}
    result = run_python(script, env=env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def samples(hub, experiment, *more):
    return rl_insight("samples", "--project", "samples", "--experiment", experiment, "--server", hub, *more)


def test_validation_generations_are_the_ones_verls_own_validation_hands_its_loggers(hub):
    expected = run_job(hub, VALIDATION)
    assert len(expected["handed"]) == 4 and any(k.startswith("val-core/") for k in expected["metrics"])
    shown = samples(hub, "val", "--validation", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["step"] == 5
    rows = found["validation"]
    assert [[r["input"], r["output"], r["score"]] for r in rows] == [
        [i, o, pytest.approx(s)] for i, o, s in expected["handed"]
    ]  # verl's pick, in verl's order
    assert [r["data_source"] for r in rows] == [expected["source_of"][i] for i, _, _ in expected["handed"]]
    assert [r["ground_truth"] for r in rows] == [expected["truth_of"][i] for i, _, _ in expected["handed"]]
    text = samples(hub, "val", "--validation")
    assert text.returncode == 0, text.stderr
    first = expected["handed"][0]
    assert "samples/val step 5: 4 validation generations" in text.stdout
    assert f"validation 1: score {first[2]:.4g}, {expected['source_of'][first[0]]}" in text.stdout
    assert "output: " + first[1][:40] in text.stdout


def test_the_grpo_group_with_its_ground_truth_reaches_samples_group(group_run):
    hub, expected = group_run
    shown = samples(hub, "group", "--group", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["step"] == 7 and len(found["groups"]) == 1
    group = found["groups"][0]
    assert group["uid"] == "g2" and group["ground_truth"] == "x = 7" and group["data_source"] == "math"
    responses = group["responses"]
    assert [r["index"] for r in responses] == expected["index"]
    assert [r["score"] for r in responses] == pytest.approx(expected["scores"])
    assert [r["advantage"] for r in responses] == pytest.approx(expected["advantages"], abs=1e-5)
    assert [r["response"] for r in responses] == expected["responses"] and group["prompt"]
    text = samples(hub, "group", "--group")
    assert text.returncode == 0, text.stderr
    assert "group g2: 4 responses, scores 0..1, math" in text.stdout
    assert "ground truth: x = 7" in text.stdout
    best = max(range(4), key=lambda i: expected["scores"][i])
    assert re.search(rf"score +1 +advantage +{expected['advantages'][best]:.4g} ", text.stdout), text.stdout


def test_without_validation_the_view_says_so_and_how_to_get_samples(group_run):
    hub, _ = group_run
    shown = samples(hub, "group", "--validation")
    assert shown.returncode == 1
    assert "no validation generations of samples/group" in shown.stderr and "trainer.test_freq" in shown.stderr


def test_the_groups_dapo_dropped_are_what_verls_filter_counted(hub):
    expected = run_job(hub, DAPO)
    assert expected == {"dropped": ["g1", "g2", "g4"], "counts": {"1.0": 2, "0.0": 1}}
    shown = samples(hub, "dapo", "--filtered", "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["step"] == 9
    assert found["filtered"] == [{"reward": 0.0, "groups": 1}, {"reward": 1.0, "groups": 2}]
    text = samples(hub, "dapo", "--filtered")
    assert text.returncode == 0, text.stderr
    assert "DAPO dropped 3 groups" in text.stdout
    assert re.search(r"reward +1: 2 groups", text.stdout) and re.search(r"reward +0: 1 groups", text.stdout)
