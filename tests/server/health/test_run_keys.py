"""The validation keys a run names in its config (``rl_insight.health.validation_keys``), read by
the server from the run's card: through verl's own config path (Hydra, verl's real ``Tracking``, the
real server), a card that comes after the run's first steps, and a card whose keys are hostile."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import http, wait_for
from tests.server.health.test_validation import with_validation
from tests.server.health.test_walk import START, batches_of
from tests.server.stores.test_run_card import card_of, card_server, ppo_config, verl_step  # noqa: F401 (card_server: a fixture)
from verl_rl_insight.contract.run_card import MAX_VALIDATION_KEYS
from verl_rl_insight.contract.wire import validate_push
from verl_rl_insight.server.health import card_keys, detectors
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.stores.run_cards import RunCardStore

KEY = "eval/my_task/success_rate"  # not a name verl validates under: followed only when named


def falling(s):
    """Validation every 10 steps at 0.6, from step 200 at 0.05 (a fall of more than 90 %)."""
    return 0.6 + 0.004 * ((s // 10) % 3 - 1) if s < 200 else 0.05


def card(experiment, keys):
    config = {"rl_insight": {"health": {"validation_keys": keys}}}
    return {"project": "p", "experiment_name": experiment, "config": config}


def fed(monitor, run, experiment, until=None):
    for body in batches_of(run, experiment=experiment):
        if until is None or body["step"] <= until:
            monitor.observe(validate_push({"batches": [body]}, now=START + 10**9))
    monitor.walk()
    return monitor.collect()


def drops(findings):
    return [(f.severity, f.found_at, f.metric) for f in findings if f.detector == "validation_drop"]


def test_a_card_that_comes_after_the_fall_still_makes_it_a_finding_and_only_for_its_run():
    run = with_validation(KEY, falling)
    early = HealthMonitor()
    early.take_run_keys("p", "named-first", [KEY])
    fed(early, run, "named-first")
    expected = drops(early.findings("p", "named-first"))
    assert [(s, at) for s, at, _ in expected] == [("critical", 200)], expected

    late = HealthMonitor()
    fed(late, run, "named-late", until=205)  # the fall at step 200 walked before the card came
    fed(late, run, "other", until=205)
    assert drops(late.findings("p", "named-late")) == []
    said = RunCardStore(on_card=card_keys.Taker(late)).put(json.dumps(card("named-late", [KEY])).encode())
    assert said["validation_keys"] == [KEY]
    assert drops(late.findings("p", "named-late")) == expected  # the steps already seen counted
    made = late.collect()  # and the live series say so (what /metrics shows)
    totals = [
        b.values[b.names.index("rl_insight_health_findings_total")]
        for b in made
        if dict(b.labels).get("detector") == "validation_drop" and dict(b.labels).get("experiment_name") == "named-late"
    ]
    assert totals and totals[-1] >= 1, made
    assert drops(late.findings("p", "other")) == []  # another run without the key: nothing


@pytest.mark.parametrize(
    "keys, why",
    [
        ("eval/", "must be a list"),
        ([KEY] * (MAX_VALIDATION_KEYS + 1), "at most"),
        ([KEY, "x" * 1000], "is not a verl key"),
        ([KEY, {"a": 1}], "is not a verl key"),
        ([""], "is not a verl key"),
    ],
)
def test_keys_a_card_names_wrongly_are_ignored_with_the_reason_and_the_card_is_kept(keys, why):
    monitor = HealthMonitor()
    store = RunCardStore(on_card=card_keys.Taker(monitor))
    said = store.put(json.dumps(card("hostile", keys)).encode())
    assert why in said["validation_keys_ignored"] and "validation_keys" not in said
    assert store.get("p", "hostile")["card"]["config"]["rl_insight"]["health"]["validation_keys"] == keys
    fed(monitor, with_validation(KEY, falling), "hostile")
    assert drops(monitor.findings("p", "hostile")) == []


def verl_config(experiment, overrides=()):
    """verl's own ppo_trainer config, composed by Hydra from the installed verl."""
    names = [
        "trainer.project_name=cards",
        f"trainer.experiment_name={experiment}",
        "trainer.logger=[console,rl_insight]",
    ]
    return ppo_config([*names, *overrides])


def finding_totals(text, experiment):
    """rl_insight_health_findings_total of validation_drop for ``experiment``, by metric label."""
    found = {}
    for line in text.splitlines():
        if line.startswith("rl_insight_health_findings_total{") and 'detector="validation_drop"' in line:
            if f'experiment_name="{experiment}"' in line:
                found[re.search(r'metric="([^"]*)"', line).group(1)] = float(line.rsplit(" ", 1)[1])
    return found


def test_a_key_named_on_verls_command_line_is_followed_by_the_servers_detectors(card_server, monkeypatch):  # noqa: F811
    """``+rl_insight.health.validation_keys='[eval/my_task/success_rate]'`` on verl's command line:
    the success rate falling 90 % is a validation_drop on the server's /metrics for that run, and
    not for a run that logs the same without naming the key; the run explorer's findings the same."""
    from omegaconf import OmegaConf
    from verl.utils.tracking import Tracking

    from verl_rl_insight.contract import server_url
    from verl_rl_insight.trainer.verl_api.propagation import prepare_driver_environment

    url, _ = card_server
    base, token = server_url.split(url)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", url)
    for experiment, overrides in (("named", [f"+rl_insight.health.validation_keys=[{KEY}]"]), ("unnamed", [])):
        config = verl_config(experiment, overrides)
        prepare_driver_environment(config)
        tracking = Tracking(
            project_name="cards",
            experiment_name=experiment,
            default_backend=config.trainer.logger,
            config=OmegaConf.to_container(config, resolve=True),
        )
        step_values = verl_step(1)
        for step in range(1, 13):
            validation = {KEY: 0.62 if step < 12 else 0.05} if step % 4 == 0 else {}
            tracking.log(data={**step_values, "training/global_step": step, **validation}, step=step)
        wait_for(lambda e=experiment: card_of(base, token, e) is not None, 20, what=f"the card of {experiment}")
        tracking.finish()

    def metrics():
        return http("GET", base + "/metrics", headers={"Authorization": f"Bearer {token}"})[1].decode()

    label = detectors.verl_key(detectors.series_name(KEY))  # the metric label the health series carry
    wait_for(lambda: finding_totals(metrics(), "named").get(label, 0) >= 1, 20, what="the named run's validation drop")
    text = metrics()
    assert finding_totals(text, "unnamed") == {}, finding_totals(text, "unnamed")
    assert card_of(base, token, "named")["card"]["config"]["rl_insight"]["health"]["validation_keys"] == [KEY]

    def explorer_drops(experiment):  # the run explorer's findings of the run
        query = f"project=cards&experiment_name={experiment}"
        status, body = http("GET", f"{base}/api/v1/explorer/run?{query}", headers={"Authorization": f"Bearer {token}"})
        assert status == 200, body
        found = json.loads(body)["findings"]
        return [(f["severity"], f["last_step"]) for f in found if f["detector"] == "validation_drop"]

    assert explorer_drops("named") == [("critical", 12)]
    assert explorer_drops("unnamed") == []


def test_diagnose_of_a_run_on_the_server_follows_the_keys_its_card_names(tmp_path):
    """``rl-insight diagnose --project --experiment`` reads the run's series from Prometheus: the
    keys the run's card names are read too and followed, so the fall the live detectors found is
    what diagnose says, under the key as logged; a run without the card: no validation finding."""
    from tests.helpers import Prometheus, free_port, push, rl_insight, start_hub_process, stop_group

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # a confirming scraper (what the managed Prometheus is): a scrape of many steps cut off by its
    # 1 s timeout on a slow machine is sent again, and the live value's repeats cannot stand in for it
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"], out_of_order_s=3600)
    process = None
    try:
        process = start_hub_process(port, tmp_path, confirm_scrapers={"test-prometheus": prometheus.url})
        run = with_validation(KEY, falling)
        assert http("PUT", url + "/api/v1/runs/card", json.dumps(card("named", [KEY])).encode())[0] == 200
        for experiment in ("named", "unnamed"):
            bodies = list(batches_of(run, experiment=experiment))
            for i in range(0, len(bodies), 50):
                assert push(url, {"batches": bodies[i : i + 50]})[0] == 200
        steps = {b["step"] for b in bodies if "step" in b}

        def stored(experiment):  # every step the run logged, not the live value's repeats
            found = prometheus.raw_samples(
                f'rl_insight_monitor_training_global_step{{experiment_name="{experiment}"}}', 3600
            )
            return {int(v) for values in found.values() for v, _ in values} >= steps

        for experiment in ("named", "unnamed"):
            wait_for(lambda e=experiment: stored(e), 60, what=f"{experiment}'s steps in Prometheus")

        def said(experiment):
            found = rl_insight(
                "diagnose", "--project", "p", "--experiment", experiment, "--server", url,
                "--prometheus", prometheus.url, "--json",
            )  # fmt: skip
            assert found.returncode in (0, 1), found.stderr
            drops = [f for f in json.loads(found.stdout)["findings"] if f["detector"] == "validation_drop"]
            return [(f["severity"], f["metric"]) for f in drops]

        assert said("named") == [("critical", KEY)]
        assert said("unnamed") == []
    finally:
        prometheus.stop()
        if process is not None:
            stop_group(process)
