"""The trainer's server URL is parsed once (config.py) into a ServerUrl that every plugin gets from the
runtime's services: its base without credentials or trailing slash, the token split off, never shown
in a repr or a log line; a URL that is no http(s) URL is a ConfigError naming ``server_url``, and a
training run with one goes on (monitoring without a server) instead of failing."""

import logging

import pytest

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.config import ServerUrl, load_config, server_of

SECRET = "s3cret-token-value"


def test_the_url_server_start_prints_becomes_a_base_and_a_token_and_neither_repr_nor_log_shows_the_token(caplog):
    config = load_config({"rl_insight": {"server_url": f"http://rl-insight:{SECRET}@127.0.0.1:18080/"}}, environ={})
    server = server_of(config)
    assert server == ServerUrl("http://127.0.0.1:18080", SECRET)
    assert server.at(paths.PUSH) == "http://127.0.0.1:18080/api/v1/push"
    with caplog.at_level(logging.INFO, logger="verl_rl_insight"):
        logging.getLogger("verl_rl_insight").info("server %s, %r, %s", server, server, [server])
    shown = [repr(server), str(server), f"{server}", caplog.text]
    assert all(SECRET not in text for text in shown), shown
    assert "ServerUrl('http://127.0.0.1:18080', token=***)" in caplog.text
    assert repr(ServerUrl("http://h:1")) == "ServerUrl('http://h:1', token=None)"


def test_a_token_set_on_its_own_wins_over_the_urls_and_a_path_prefix_is_kept():
    config = load_config(
        {"rl_insight": {"server_url": "https://rl-insight:from-url@example.org/monitor/", "token": "own"}}, environ={}
    )
    assert server_of(config) == ServerUrl("https://example.org/monitor", "own")
    assert server_of(load_config(None, environ={})) is None


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org",
        "127.0.0.1:18080",
        "http://rl-insight:t@h:notaport",
        f"rl-insight:{SECRET}@127.0.0.1:18080",  # the scheme forgotten: no parser sees the credentials
        f"ftp://rl-insight:{SECRET}@example.org",
    ],
)
def test_a_server_url_that_is_no_http_url_is_refused_naming_the_setting_and_no_token(url):
    with pytest.raises(ConfigError) as refused:
        load_config({"rl_insight": {"server_url": url}}, environ={})
    said = str(refused.value)
    assert said.startswith("server_url is not a URL") and ":t@" not in said and SECRET not in said, said


def test_a_training_run_with_a_broken_server_url_in_its_environment_goes_on_without_a_server(monkeypatch, caplog):
    """runtime.start once tried the environment's URL again after it had failed: the ConfigError
    reached verl's Tracking and stopped the job."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://rl-insight:t@h:notaport")
    with caplog.at_level(logging.ERROR, logger="verl_rl_insight"):
        rt = runtime.start()
    assert rt.services.server is None
    assert any("server_url is not a URL" in r.getMessage() for r in caplog.records)


def test_a_bad_server_url_costs_the_server_only_and_the_rest_of_the_config_holds(monkeypatch, caplog):
    """A URL without its scheme (a common slip) once made the runtime fall back to the defaults: the
    trainer's own rl_insight block (here: samples off, a hardware interval) was silently dropped."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"rl-insight:{SECRET}@127.0.0.1:18080")
    block = {"rl_insight": {"plugins": {"samples": {"enabled": False}, "hardware": {"interval_s": 7.0}}}}
    with caplog.at_level(logging.ERROR, logger="verl_rl_insight"):
        rt = runtime.start(block)
    assert rt.services.server is None and rt.config.server_url is None
    assert rt.plugin("samples") is None and rt.config.plugins.hardware.interval_s == 7.0
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "server_url is not a URL" in m]) == 1 and not any(SECRET in m for m in said)


def test_every_plugin_that_talks_to_the_server_gets_the_one_parsed_value(monkeypatch):
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://rl-insight:{SECRET}@127.0.0.1:9/")
    rt = runtime.start()
    server = rt.services.server
    assert server == ServerUrl("http://127.0.0.1:9", SECRET)
    sender = rt.plugin("metric_push").sender
    assert (sender.url, sender.token) == ("http://127.0.0.1:9/api/v1/push", SECRET)
    assert rt.plugin("profiler").profiles.server is server
    assert rt.services.targets.url == "http://127.0.0.1:9/api/v1/targets"
    assert rt.plugin("rollout_engines").announcer is rt.services.targets is rt.plugin("transfer_queue").announcer
