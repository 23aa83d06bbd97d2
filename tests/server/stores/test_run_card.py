"""The run's card: verl's real Hydra config, handed to verl's real ``Tracking`` as ``main_ppo``'s
trainer hands it, reaches the real server with the first logged step; ``rl-insight runs show``
prints it, ``runs diff`` prints the keys two runs were started differently with, and no secret of
the config is in the server's files, its /metrics, its log or the CLI's output."""

import json
import os
import shlex
import stat
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers import free_port, http, rl_insight, wait_for, write_server_config
from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.run_card import MASK, differences, redact, redact_argv, secret_key
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.trainer.client import run_card as card_client
from verl_rl_insight.trainer.config import ServerUrl

PROJECT = "cards"
URL_PASSWORD = "url-pass-5f1e9c"
WANDB_KEY = "wandb-key-0a9b8c7d"
HF_TOKEN = "hf_tok_3e4f5a6b"
SECRETS = (URL_PASSWORD, WANDB_KEY, HF_TOKEN)


def ppo_config(overrides):
    """verl's own ppo_trainer config, composed by Hydra from the installed verl with ``overrides``."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        config = compose("ppo_trainer", overrides=list(overrides))
    GlobalHydra.instance().clear()
    return config


def verl_config(experiment, lr, n):
    """verl's own ppo_trainer config, with secrets in it."""
    return ppo_config(
        [
            f"trainer.project_name={PROJECT}",
            f"trainer.experiment_name={experiment}",
            "trainer.logger=[console,rl_insight]",
            f"actor_rollout_ref.actor.optim.lr={lr}",
            f"actor_rollout_ref.rollout.n={n}",
            "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
            "++ray_kwargs.ray_init.runtime_env.env_vars.RL_INSIGHT_SERVER_URL="
            f"'http://rl-insight:{URL_PASSWORD}@127.0.0.1:18080'",
            f"+trainer.wandb_api_key={WANDB_KEY}",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.hf_token={HF_TOKEN}",
        ]
    )


def verl_step(step):
    """What verl's trainer logs for a step: verl's own metric functions on a batch, plus fit's keys."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    from verl_rl_insight.commands.demo.simulation import verl_metrics
    from verl_rl_insight.commands.demo.verl_step import rollout_batch

    timing = {"gen": 0.5, "reward": 0.1, "old_log_prob": 0.2, "adv": 0.05, "update_actor": 0.4, "step": 1.5}
    batch = ray_trainer.compute_advantage(rollout_batch(step), adv_estimator=AdvantageEstimator.GRPO)
    metrics = verl_metrics(batch, timing)
    metrics.update({"training/global_step": step, "training/epoch": 0})
    return metrics


def run_like_main_ppo(config):
    """What verl's main_ppo does with the config: our run_ppo hook first, then RayPPOTrainer.fit's
    ``Tracking(..., config=OmegaConf.to_container(config, resolve=True))`` and one logged step."""
    from omegaconf import OmegaConf
    from verl.utils.tracking import Tracking

    from verl_rl_insight.trainer.verl_api.propagation import prepare_driver_environment

    prepare_driver_environment(config)
    tracking = Tracking(
        project_name=config.trainer.project_name,
        experiment_name=config.trainer.experiment_name,
        default_backend=config.trainer.logger,
        config=OmegaConf.to_container(config, resolve=True),
    )
    tracking.log(data=verl_step(1), step=1)
    return tracking


@pytest.fixture
def card_server(tmp_path):
    """`rl-insight server start --detach` (the hub alone) with a token; its URL carries the token."""
    config, settings = write_server_config(
        tmp_path,
        token="server-token-7c6d5e4f",
        services={name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")},
    )
    started = rl_insight("server", "start", "--detach", "--config", str(config))
    assert started.returncode == 0, started.stdout + started.stderr
    url = rl_insight("server", "url", "--local").stdout.strip()
    yield url, Path(settings["data_dir"])
    rl_insight("server", "stop")


def card_of(base, token, experiment):
    query = urllib.parse.urlencode({"project": PROJECT, "experiment_name": experiment})
    status, body = http("GET", f"{base}/api/v1/runs/card?{query}", headers={"Authorization": f"Bearer {token}"})
    return json.loads(body) if status == 200 else None


def test_the_run_card_from_verls_hydra_config_is_shown_diffed_and_holds_no_secret(card_server, monkeypatch):
    from verl_rl_insight.contract import server_url

    url, data = card_server
    base, token = server_url.split(url)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    for experiment, lr, n in (("lr1e-6-n4", "1e-6", 4), ("lr3e-6-n8", "3e-6", 8)):
        tracking = run_like_main_ppo(verl_config(experiment, lr, n))
        wait_for(lambda e=experiment: card_of(base, token, e) is not None, 20, what=f"the card of {experiment}")
        tracking.finish()

    shown = rl_insight("runs", "show", f"{PROJECT}/lr1e-6-n4")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    fields = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in lines[:7]}
    assert fields["run"] == f"{PROJECT}/lr1e-6-n4"
    assert fields["versions"].startswith("verl 0.9.1, verl_rl_insight ")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert fields["commit"].startswith(head)  # pytest runs in the repository: its commit
    assert fields["command"] == shlex.join(sys.orig_argv)  # the driver's command line, as typed (python -m ...)
    assert fields["nodes x GPUs"] == "1 x 8" and fields["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert lines[7].startswith("config (") and all(line.startswith("  ") and " = " in line for line in lines[8:])
    assert "  actor_rollout_ref.actor.optim.lr = 1e-06" in lines
    assert "  actor_rollout_ref.rollout.n = 4" in lines
    assert f"  trainer.wandb_api_key = {MASK}" in lines
    assert f"  ray_kwargs.ray_init.runtime_env.env_vars.RL_INSIGHT_SERVER_URL = http://{MASK}@127.0.0.1:18080" in lines

    diff = rl_insight("runs", "diff", f"{PROJECT}/lr1e-6-n4", f"{PROJECT}/lr3e-6-n8")
    assert diff.returncode == 0, diff.stderr
    config, _, curves = diff.stdout.partition("their curves")  # then where the curves part: none in this short run
    rows = [line.split() for line in config.splitlines()]
    assert rows[0] == ["KEY", f"{PROJECT}/lr1e-6-n4", f"{PROJECT}/lr3e-6-n8"] and curves.startswith(" do not part")
    table = [r for r in rows[1:] if not r[0].startswith("(")]
    assert table == [["actor_rollout_ref.actor.optim.lr", "1e-06", "3e-06"], ["actor_rollout_ref.rollout.n", "4", "8"]]
    as_json = json.loads(rl_insight("runs", "diff", f"{PROJECT}/lr1e-6-n4", f"{PROJECT}/lr3e-6-n8", "--json").stdout)
    assert [d["key"] for d in as_json["differences"]] == [
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.rollout.n",
    ]
    # set apart, not hidden: the names, and the keys verl's config copies from rollout.n
    assert {"trainer.experiment_name", "actor_rollout_ref.actor.rollout_n"} <= set(as_json["by_nature"])
    assert (
        json.loads(rl_insight("runs", "show", f"{PROJECT}/lr3e-6-n8", "--json").stdout)["card"]["config"][
            "actor_rollout_ref"
        ]["rollout"]["n"]
        == 8
    )

    metrics = http("GET", base + "/metrics")[1].decode()
    rl_insight("server", "stop")  # its log is whole
    kept = [p for p in data.rglob("*") if p.is_file()]
    cards = list((data / "run-cards").iterdir())
    assert len(cards) == 2 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cards)
    assert stat.S_IMODE((data / "run-cards").stat().st_mode) == 0o700
    assert any(p.name == "server.log" for p in kept)
    for secret in SECRETS:
        for where, text in [("runs show", shown.stdout), ("runs diff", diff.stdout), ("/metrics", metrics)]:
            assert secret not in text, f"{secret} in {where}"
        for path in kept:
            assert secret.encode() not in path.read_bytes(), f"{secret} in {path}"
    for path in cards:  # nor the server's token, nor the run credential that sent it
        assert token.encode() not in path.read_bytes() and run_credential.PREFIX.encode() not in path.read_bytes()


def test_a_card_survives_a_restart_and_the_oldest_leaves_beyond_the_bound(tmp_path):
    def card(experiment):
        return json.dumps({"project": "p", "experiment_name": experiment, "config": {"a": {"b": [1, 2]}}}).encode()

    store = RunCardStore(tmp_path / "cards", max_runs=3)
    for i in range(4):
        store.put(card(f"e{i}"))
    again = RunCardStore(tmp_path / "cards", max_runs=3)
    assert len(again) == 3 and again.get("p", "e3")["card"]["config"] == {"a": {"b": [1, 2]}}
    with pytest.raises(LookupError, match="no card of 'p' / 'e0'"):
        again.get("p", "e0")
    files = sorted(p.stat().st_size for p in (tmp_path / "cards").iterdir())
    smaller = RunCardStore(tmp_path / "cards", max_total_bytes=sum(files) - 1)  # bytes bound: oldest out
    assert len(smaller) == 2 and len(list((tmp_path / "cards").iterdir())) == 2


@pytest.mark.parametrize(
    "body, status, field",
    [
        (b"[1, 2]", 400, "card: must be an object"),
        (
            json.dumps({"project": "p", "experiment_name": "e", "config": [1]}).encode(),
            400,
            "config: must be an object",
        ),
        (json.dumps({"project": "p", "experiment_name": "e", "config": {"x": "y" * 300_000}}).encode(), 413, "card:"),
        (b'{"project": "p", "experiment_name": "e", "config": ' + b'{"a":' * 40 + b"1" + b"}" * 41, 400, "config:"),
        (json.dumps({"project": "", "experiment_name": "e"}).encode(), 400, "project:"),
        (json.dumps({"project": "p", "experiment_name": "e", "wat": 1}).encode(), 400, "unknown field 'wat'"),
    ],
    ids=["not-an-object", "config-not-an-object", "too-large", "too-deep", "empty-project", "unknown-field"],
)
def test_a_bad_card_gets_a_4xx_naming_the_field(hub_server, body, status, field):
    server = hub_server(token="t0ken-xyz")
    answer, text = http("PUT", server.url + "/api/v1/runs/card", body, headers={"Authorization": "Bearer t0ken-xyz"})
    assert answer == status and field in json.loads(text)["error"]


def test_a_run_credential_writes_its_own_runs_card_and_reads_none(hub_server):
    server = hub_server(token="t0ken-xyz")
    credential = {"Authorization": "Bearer " + run_credential.mint("t0ken-xyz", "p", "mine")}
    mine = json.dumps({"project": "p", "experiment_name": "mine", "config": {"note": "t0ken-xyz"}}).encode()
    other = json.dumps({"project": "p", "experiment_name": "other"}).encode()
    assert http("PUT", server.url + "/api/v1/runs/card", mine, headers=credential)[0] == 200
    assert http("PUT", server.url + "/api/v1/runs/card", other, headers=credential)[0] == 403
    query = "?project=p&experiment_name=mine"
    assert http("GET", server.url + "/api/v1/runs/card" + query, headers=credential)[0] == 403
    assert http("GET", server.url + "/api/v1/runs/card" + query)[0] == 401
    status, body = http("GET", server.url + "/api/v1/runs/card" + query, headers={"Authorization": "Bearer t0ken-xyz"})
    assert status == 200 and json.loads(body)["card"]["config"] == {"note": MASK}  # the token, masked by the server


def test_secrets_are_masked_by_key_name_and_by_value():
    assert [secret_key(k) for k in ("hf_token", "wandb_api_key", "RL_INSIGHT_TOKEN", "Authorization", "hfToken")] == [
        True
    ] * 5
    assert not any(secret_key(k) for k in ("tokenizer", "tokenizer_path", "keyword", "path"))
    config = {
        "ppo_max_token_len_per_gpu": 16384,  # a number under a token-ish name is no secret
        "data": {"prompt_key": "prompt", "api_key": "sk-123456"},
        "urls": ["https://user:pw-9876@host.example/x", "http://host:80/y"],
        "note": "the token is tok-abcdef here",
        "auth": {"user": "u", "password": "p"},
    }
    assert redact(config, ["tok-abcdef"]) == {
        "ppo_max_token_len_per_gpu": 16384,
        "data": {"prompt_key": "prompt", "api_key": MASK},
        "urls": [f"https://{MASK}@host.example/x", "http://host:80/y"],
        "note": f"the token is {MASK} here",
        "auth": MASK,
    }
    argv = ["main_ppo.py", "trainer.wandb_api_key=abc", "--token", "xyz", "+x.hf_token=q", "lr=1e-6"]
    assert redact_argv(argv) == [
        "main_ppo.py",
        f"trainer.wandb_api_key={MASK}",
        "--token",
        MASK,
        f"+x.hf_token={MASK}",
        "lr=1e-6",
    ]


def test_diff_shows_a_key_on_one_side_as_absent_and_lists_in_full():
    first = {"project": "p", "experiment_name": "a", "config": {"x": [1, 2, 3], "only_here": 1}}
    second = {"project": "p", "experiment_name": "b", "config": {"x": [1, 2, 4]}}
    found, _ = differences(first, second)
    assert [(k, repr(a), repr(b)) for k, a, b in found] == [
        ("only_here", "1", "(absent)"),
        ("x", "[1, 2, 3]", "[1, 2, 4]"),
    ]


def test_a_config_that_cannot_be_serialised_is_sent_with_a_note_and_git_may_be_missing(tmp_path, monkeypatch):
    class Opaque:
        def __repr__(self):
            return "<opaque>"

    monkeypatch.setenv("PATH", str(tmp_path))  # no git here
    assert card_client.git_state(str(tmp_path)) is None
    card = card_client.build_card("p", "e", {"trainer": {"nnodes": 2, "obj": Opaque(), "nan": float("nan")}}, [])
    assert card["config"] == {"trainer": {"nnodes": 2, "obj": "<opaque>", "nan": "nan"}} and card["nodes"] == 2
    assert card["notes"] == ["config.trainer.obj: a Opaque, sent as its repr"] and card["git"] is None
    json.dumps(card, allow_nan=False)


def test_a_server_that_is_down_costs_the_trainer_nothing_and_the_card_is_given_up(monkeypatch):
    port = free_port()  # nothing listens
    sender = card_client.RunCardSender(
        ServerUrl(f"http://127.0.0.1:{port}", "tok"), "p", "e", {"a": 1}, retry_delays_s=(0.05,)
    )
    sender.first_log()
    wait_for(lambda: sender.state == "gave up", 20, what="the sender to give up")
    sender.close()


def test_a_card_not_sent_before_the_first_step_is_not_sent_at_all(hub_server):
    server = hub_server()
    sender = card_client.RunCardSender(ServerUrl(server.url), "p", "quiet", {"a": 1})
    wait_for(lambda: sender.state == "waiting", 10, what="the card built")
    time.sleep(0.6)
    assert len(server.api.parts.run_cards) == 0
    sender.close()
    assert sender.state == "not sent: no step was logged"


def test_the_trainer_masks_every_secret_before_the_card_leaves_its_process(monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://rl-insight:server-token-1a2b@127.0.0.1:1")
    config = OmegaConf.to_container(verl_config("masked", "1e-6", 4), resolve=True)
    config["trainer"]["monitor"] = "see http://127.0.0.1:1 with server-token-1a2b"  # the token under a plain key
    secrets = card_client.secrets_known(None, os.environ)
    card = json.dumps(card_client.build_card(PROJECT, "masked", config, secrets))
    for secret in (*SECRETS, "server-token-1a2b"):
        assert secret not in card
    assert card.count(MASK) == 4 and '"prompt_key": "prompt"' in card  # a column name is no secret


def test_a_command_line_that_differs_only_by_the_overrides_shown_and_the_names_is_set_apart():
    def card(experiment, lr, script="main_ppo.py"):
        command = [script, f"a.lr={lr}", f"trainer.experiment_name={experiment}"]
        return {"project": "p", "experiment_name": experiment, "command": command, "config": {"a": {"lr": lr}}}

    found, by_nature = differences(card("run-1", 1e-6), card("run-2", 3e-6))
    assert [k for k, _, _ in found] == ["a.lr"] and by_nature == ["command"]
    found, _ = differences(card("run-1", 1e-6), card("run-2", 3e-6, script="other.py"))  # another script: shown
    assert [k for k, _, _ in found] == ["a.lr", "command"]
