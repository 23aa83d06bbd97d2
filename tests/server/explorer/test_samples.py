"""The samples behind a number (plugin samples): a batch of known scores and mismatches through
verl's real compute_advantage and Tracking in a process of its own, its spans through the real
OTLP path into the server, read back by `rl-insight samples`. The tokenizer is the demo's
STAND-IN (token ids to words): no tokenizer files can be downloaded here."""

import json

import pytest

from tests.helpers import free_port, rl_insight, run_python, start_hub_process, stop_group
from verl_rl_insight.commands.demo.verl_step import DATA_SOURCES

SCRIPT = """
import json, random
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.simulation import SimulatedTokenizer
from verl_rl_insight.commands.demo.verl_step import rollout_batch, step_metrics

data = rollout_batch(3, prompts=2)  # 8 responses, 4 to a prompt
scores = data.batch["token_level_scores"].sum(-1)
scores += __import__("torch").arange(8) * 0.01  # distinct scores: one right order
data.batch["token_level_scores"][:, 0] += __import__("torch").arange(8) * 0.01
mask = data.batch["response_mask"]
diff = (data.batch["old_log_probs"].exp() - data.batch["rollout_log_probs"].exp()).abs() * mask
mismatch = diff.sum(-1) / mask.sum(-1)

class Trainer:
    global_steps = 3
    tokenizer = SimulatedTokenizer()

    def step(self):
        with ray_trainer.marked_timer("adv", {}):
            return ray_trainer.compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO)

tracking = Tracking("samples", "run", default_backend=["rl_insight"])
Trainer().step()
tracking.log(step_metrics(3), step=3)  # what verl's trainer logs at a step
tracking.finish()
length = int(mask[int(scores.argmin())].sum())
worst_text = SimulatedTokenizer().decode(data.batch["responses"][int(scores.argmin()), :length].tolist())
print(json.dumps({"worst": scores.argsort().tolist()[:2], "best": scores.argsort(descending=True).tolist()[:2],
                  "mismatch": mismatch.argsort(descending=True).tolist()[:2], "worst_text": worst_text,
                  "worst_score": float(scores.min())}))
"""


@pytest.fixture
def hub(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path)
    yield f"http://127.0.0.1:{port}"
    stop_group(process)


def run_job(hub, config):
    env = {"RL_INSIGHT_SERVER_URL": hub, "VERL_RL_INSIGHT_CONFIG": json.dumps(config)}
    result = run_python(SCRIPT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def samples(hub, *more):
    return rl_insight("samples", "--project", "samples", "--experiment", "run", "--server", hub, *more)


def test_off_by_default_nothing_is_kept(hub):
    run_job(hub, {"plugins": {"hardware": {"enabled": False}}})
    shown = samples(hub)
    assert shown.returncode == 1
    assert "no samples of samples/run" in shown.stderr and "+rl_insight.plugins.samples.enabled=True" in shown.stderr


def test_on_the_worst_best_and_mismatch_rollouts_are_what_the_batch_held(hub):
    expected = run_job(hub, {"plugins": {"hardware": {"enabled": False}, "samples": {"enabled": True, "k": 2}}})
    shown = samples(hub, "--json")
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert found["step"] == 3
    by_kind = {}
    for row in found["samples"]:
        by_kind.setdefault(row["kind"], []).append(row)
    for kind in ("worst", "best", "mismatch"):
        assert [r["index"] for r in by_kind[kind]] == expected[kind], kind
        assert [r["rank"] for r in by_kind[kind]] == [1, 2]
    worst = by_kind["worst"][0]
    assert worst["score"] == pytest.approx(expected["worst_score"])
    assert worst["response"] == expected["worst_text"] and worst["finish_reason"] in ("stop", "length")
    assert worst["data_source"] in DATA_SOURCES and worst["prompt"]  # a source the batch carries
    text = samples(hub, "--worst")
    assert text.returncode == 0
    assert "samples/run step 3: 2 samples (worst)" in text.stdout
    assert f"worst 1: score {expected['worst_score']:.4g}" in text.stdout
    assert "response: " + expected["worst_text"][:50] in text.stdout
