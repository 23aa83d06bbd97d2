"""The sequences a step a run trains on, which the explorer's compare view draws runs by when their batch
sizes differ: from a real run's config where it has one, else from what its every step logged; a real
multi-turn agent run whose logged lengths do not sum to its token count gets no number and a reason."""

import json
from pathlib import Path

import pytest

from verl_rl_insight.commands.run_file import read_run
from verl_rl_insight.commands.run_formats import read_file
from verl_rl_insight.contract.naming import metric_name
from verl_rl_insight.contract.verl_keys import PROMPT_LENGTH_MEAN, RESPONSE_LENGTH_MEAN, TOTAL_TOKENS
from verl_rl_insight.server.explorer.samples_seen import from_card, from_logged, of_run
from verl_rl_insight.server.health.detectors import PREFIX
from verl_rl_insight.server.history.run_history import RunHistory

REAL = Path(__file__).resolve().parents[2] / "data" / "real_runs"


def logged(name):
    history = read_run(REAL / f"{name}.jsonl")
    return from_logged(
        *(history.get(metric_name(PREFIX, k), []) for k in (TOTAL_TOKENS, PROMPT_LENGTH_MEAN, RESPONSE_LENGTH_MEAN))
    )


def config(name):
    return json.loads((REAL / f"{name}.config.json").read_text())


@pytest.mark.parametrize(
    ("name", "per_step", "said"),
    [
        # the authors' command lines (their .source.json): train_batch_size=1024, rollout.n=5; PPO, train_batch_size=256
        ("diqiu_gpg_qwen2_7b_gsm8k_math_fsdp", 5120, "train_batch_size=1024"),
        ("diqiu_gpg_qwen2_7b_gsm8k_math_megatron", 5120, None),
        ("bihan_dstack_ppo_qwen25_7b_gsm8k_mi300x_resumed", 256, "train_batch_size=256"),
    ],
)
def test_a_real_runs_logged_tokens_give_the_batch_its_authors_configured(name, per_step, said):
    seen = logged(name)
    assert seen.per_step == per_step, seen
    assert seen.source.startswith(f"logged: {TOTAL_TOKENS}"), seen
    if said:
        assert said in (REAL / f"{name}.source.json").read_text()


def test_a_runs_config_and_its_log_agree_on_its_batch():
    name = "jianghoucheng_opd_qwen25_3b_teacherkl0001"
    carded = from_card({"config": config(name)})
    assert carded is not None and carded.per_step == logged(name).per_step == 32 * 16
    assert carded.source == "card: data.train_batch_size 32 x actor_rollout_ref.rollout.n 16"


def test_what_the_steps_logged_wins_over_a_card_that_says_otherwise_and_the_card_is_named():
    name = "jianghoucheng_opd_qwen25_3b_teacherkl0001"
    history = RunHistory()
    for step, values in read_file(REAL / f"{name}.jsonl").steps.items():
        history.add(step, float(step), tuple(metric_name(PREFIX, k) for k in values), list(values.values()))
    other = {"config": config("jianghoucheng_opd_qwen25_3b_teacherkl00005_bs64")}
    seen = of_run(history, other)
    assert seen.per_step == 512, seen
    assert seen.source.endswith("its card: data.train_batch_size 64 x actor_rollout_ref.rollout.n 16 = 1024"), seen
    assert of_run(None, other).per_step == 1024  # no step here yet: the card


def test_a_multi_turn_run_whose_lengths_do_not_sum_to_its_tokens_gets_no_number_and_says_why():
    name = "jianghoucheng_opd_qwen25_3b_teacherkl00005_bs64"
    seen = logged(name)
    assert seen.per_step is None
    assert "at step 1 and" in seen.source and "not one batch size" in seen.source and "card" in seen.source, seen
    carded = from_card({"config": config(name)})
    assert carded is not None and carded.per_step == 64 * 16


def test_a_run_that_logged_no_token_count_gets_no_number():
    seen = logged("verldata_ppo_qwen05b_gsm8k_resp512")
    assert seen.per_step is None and TOTAL_TOKENS in seen.source


@pytest.mark.parametrize(
    "card",
    [
        None,
        {},
        {"config": "data"},
        {"config": {"data": {"train_batch_size": 64}}},  # no rollout.n
        {"config": {"data": {"train_batch_size": True}, "actor_rollout_ref": {"rollout": {"n": 4}}}},
        {"config": {"data": {"train_batch_size": "64"}, "actor_rollout_ref": {"rollout": {"n": 4}}}},
        {"config": {"data": {"train_batch_size": 0}, "actor_rollout_ref": {"rollout": {"n": 4}}}},
        {"config": {"data": {"train_batch_size": 6.5}, "actor_rollout_ref": {"rollout": {"n": 4}}}},
        {"config": {"data": {"train_batch_size": 10**9}, "actor_rollout_ref": {"rollout": {"n": 10**9}}}},
        {"config": {"data": [64], "actor_rollout_ref": {"rollout": {"n": 4}}}},
    ],
)
def test_a_card_without_two_sane_whole_numbers_gives_none(card):
    assert from_card(card) is None
