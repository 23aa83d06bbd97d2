"""No secret leaves in a run card: each of the 50+ shapes of ``tests/data/redaction_corpus.json``
(a key that names a secret, ``KEY=VALUE`` and ``Authorization:`` inside text and lists, a URL's
user info and query, PEM blocks, token shapes, high-entropy words, command-line flags) is masked by
the trainer before the card leaves its process, and again by the server on receipt of a card that
was never redacted (an older or a hand-made client); ordinary config values and overrides are kept
as they are."""

import json
from pathlib import Path

import pytest

from tests.helpers import http
from verl_rl_insight.contract import environment
from verl_rl_insight.contract.redaction import MASK, redact_card
from verl_rl_insight.server.stores.run_cards import check_card
from verl_rl_insight.trainer.client.run_card import build_card

CORPUS = json.loads((Path(__file__).parent.parent / "data" / "redaction_corpus.json").read_text())
SHAPES = CORPUS["secrets"]


def raw_card(entry: dict) -> dict:
    card = {"project": "p", "experiment_name": "e"}
    card["config" if entry["where"] == "config" else "command"] = entry["value"]
    return card


def test_the_corpus_holds_40_or_more_shapes_each_with_its_secret_in_it():
    assert len(SHAPES) >= 40 and len({e["shape"] for e in SHAPES}) == len(SHAPES)
    for entry in SHAPES:
        assert entry["secret"] in json.dumps(entry["value"]), entry["shape"]  # the positive control


@pytest.mark.parametrize("entry", SHAPES, ids=[e["shape"] for e in SHAPES])
def test_the_trainers_card_carries_no_trace_of_the_secret(entry):
    config = entry["value"] if entry["where"] == "config" else {}
    argv = entry["value"] if entry["where"] == "command" else ["main_ppo.py"]
    card = build_card("p", "e", config, [], environ={environment.COMMAND: json.dumps(argv)})
    assert entry["secret"] not in json.dumps(card) and MASK in json.dumps(card)


@pytest.mark.parametrize("entry", SHAPES, ids=[e["shape"] for e in SHAPES])
def test_the_server_masks_the_secret_again_in_a_card_that_was_never_redacted(entry):
    kept = check_card(json.dumps(raw_card(entry)).encode())
    assert entry["secret"] not in json.dumps(kept) and MASK in json.dumps(kept)


def test_paths_model_names_numbers_and_ordinary_overrides_are_not_redacted():
    card = {"project": "p", "experiment_name": "e", "config": CORPUS["keep_config"], "command": CORPUS["keep_command"]}
    for kept in (redact_card(card), check_card(json.dumps(card).encode())):
        assert kept["config"] == CORPUS["keep_config"]
        assert kept["command"] == CORPUS["keep_command"]
    built = build_card("p", "e", CORPUS["keep_config"], [], {environment.COMMAND: json.dumps(CORPUS["keep_command"])})
    assert built["config"] == CORPUS["keep_config"] and built["command"] == CORPUS["keep_command"]


def test_a_raw_card_put_over_http_is_kept_without_its_command_lines_secrets(hub_server):
    """The server's own pass, through its API: a card whose command line was never redacted."""
    server = hub_server(token="t0ken-xyz")
    auth = {"Authorization": "Bearer t0ken-xyz"}
    command = ["python3", "-m", "verl.trainer.main_ppo", "--token", "cli-tok-1", "trainer.wandb_api_key=cli-key-2"]
    command += ["bash", "-c", "export HF_TOKEN=cli-hf-3; true", "--header=Authorization: Bearer cli-hdr-4"]
    body = {"project": "p", "experiment_name": "raw", "command": command, "config": {"lr": 1e-6}}
    assert http("PUT", server.url + "/api/v1/runs/card", json.dumps(body).encode(), headers=auth)[0] == 200
    status, text = http("GET", server.url + "/api/v1/runs/card?project=p&experiment_name=raw", headers=auth)
    assert status == 200
    stored = json.loads(text)["card"]["command"]
    for secret in ("cli-tok-1", "cli-key-2", "cli-hf-3", "cli-hdr-4"):
        assert secret not in json.dumps(stored)
    assert stored[:4] == ["python3", "-m", "verl.trainer.main_ppo", "--token"]
    assert stored[5] == f"trainer.wandb_api_key={MASK}"
