"""End to end with a real Prometheus: `rl-insight server start --detach`, real verl Tracking,
values read back through Prometheus' HTTP API; and a hub that is down, or restarted, mid-run."""

import json
import time

import pytest

from tests.helpers import (
    Prometheus,
    free_port,
    http,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    start_hub_process,
    wait_for,
)
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.trainer.plugins import metric_push

cli = rl_insight


def test_logged_values_are_queryable_in_prometheus_with_labels(monkeypatch, tmp_path):
    require_prometheus()
    import os

    hub_port, prom_port = free_port(), free_port()
    env = dict(os.environ)
    started = cli(
        "server",
        "start",
        "--local-trust",  # the test of a tokenless trainer URL on a machine of one user
        "--detach",
        "--bind",
        "127.0.0.1",
        "--port",
        str(hub_port),
        "--prometheus-port",
        str(prom_port),
        "--scrape-interval",
        "1",
        "--data-dir",
        str(tmp_path / "data"),
        "--no-tempo",
        "--no-grafana",
        "--no-alertmanager",
        env=env,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"export RL_INSIGHT_SERVER_URL=http://127.0.0.1:{hub_port}" in started.stdout
        assert f"http://127.0.0.1:{hub_port}/metrics" in started.stdout
        again = cli(
            "server", "start", "--detach", "--local-trust", "--bind", "127.0.0.1", "--port", str(hub_port), env=env
        )
        assert again.returncode == 2 and "already running" in again.stdout

        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{hub_port}")
        from verl.utils.tracking import Tracking

        tracking = Tracking("e2e", "prom-run", default_backend=["console", "rl_insight"])
        for step in (1, 2, 3):  # what verl's trainer logs at a step, two of its values pinned
            pinned = {"actor/pg_loss": -0.25 * step, "actor/grad_norm": 1.0 + step}
            tracking.log({**step_metrics(step, 3), **pinned}, step=step)
        tracking.finish()

        prom = stack_prometheus(tmp_path / "data", prom_port)

        def query(promql):
            status, body = http("GET", prom + "/api/v1/query?query=" + promql)
            return json.loads(body)["data"]["result"] if status == 200 else []

        # two scrape intervals (2 s) plus Prometheus' own start-up
        result = wait_for(lambda: query("rl_insight_monitor_actor_pg_loss"), 15, what="pg_loss in prometheus")
        assert result[0]["metric"]["project"] == "e2e"
        assert result[0]["metric"]["experiment_name"] == "prom-run"
        assert float(result[0]["value"][1]) == -0.75
        step = query('rl_insight_monitor_training_global_step{project="e2e",experiment_name="prom-run"}')
        assert float(step[0]["value"][1]) == 3.0
        grad = query('rl_insight_monitor_actor_grad_norm{project="e2e"}')
        assert float(grad[0]["value"][1]) == 4.0

        # the server's own Prometheus confirms what it stored: the hub lets the steps go (a healthy
        # run: no scrape found missing)
        def delivery():
            figures = json.loads(http("GET", f"http://127.0.0.1:{hub_port}/api/v1/hub")[1])
            return figures, figures["scraper_names"][f"prometheus-{prom_port}"]

        wait_for(lambda: delivery()[1]["scrapes_awaiting_store"] <= 2, 20, what="scrapes confirmed by Prometheus")
        assert delivery()[0]["scrapes_not_stored_total"] == 0
        assert query(f'rl_insight_hub_scrape_number{{scraper="prometheus-{prom_port}"}}')
    finally:
        stopped = cli("server", "stop", env=env)
        assert stopped.returncode == 0, stopped.stdout
    assert cli("server", "status", env=env).returncode == 3


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_hub_restarted_mid_run_every_step_reaches_prometheus_once_in_order_with_its_own_time(
    monkeypatch, tmp_path, how
):
    """The hub stops (or is killed) at step 11 and comes back at step 21, on the same data dir,
    while a real Prometheus scrapes it as a named scraper: every step is stored once, in order,
    with the time the trainer logged it, but for the steps the outage held back."""
    import os
    import signal

    from tests.helpers import stop_group

    port = free_port()
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
    hub = None
    try:
        hub = start_hub_process(port, tmp_path)
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{port}")
        from verl.utils.tracking import Tracking

        tracking = Tracking("e2e", f"restart-{how}", default_backend=["rl_insight"])
        sender = None
        t0 = time.time()
        logged = {}
        for step in range(1, 31):
            if step == 11:  # the server goes away mid-run
                if how == "SIGKILL":
                    os.killpg(hub.pid, signal.SIGKILL)
                    hub.wait(10)
                else:
                    stop_group(hub)
            if step == 21:
                hub = start_hub_process(port, tmp_path)  # and comes back
            logged[step] = time.time()
            tracking.log({**step_metrics(step, 30), "actor/pg_loss": float(step)}, step=step)
            sender = sender or metric_push.sender()
            time.sleep(0.2)
        assert sender.stats["failed_requests"] >= 1  # the outage was noticed...
        assert sender.flush(15)  # ...and the spool replayed
        assert sender.stats["dropped_batches"] == 0
        tracking.finish()

        def stored():
            samples = prometheus.raw_samples(
                f'rl_insight_monitor_actor_pg_loss{{experiment_name="restart-{how}"}}', time.time() - t0 + 30
            )
            return sorted((t, int(v)) for values in samples.values() for v, t in values)

        samples = wait_for(
            lambda: (s := stored()) and {v for _, v in s} >= set(range(1, 31)) and s,
            20,
            what="every step in prometheus",
        )
        steps = [v for i, (_, v) in enumerate(samples) if i == 0 or samples[i - 1][1] != v]  # live repeats folded
        assert steps == list(range(1, 31)), (steps, samples)
        first_seen = {}
        for t, v in samples:
            first_seen.setdefault(v, t)
        # a step logged while the hub was up and scraped is stamped with its own time; one the hub
        # could not expose before it went away (or logged while it was away) is stamped once it is
        # back: Prometheus has marked the series stale meanwhile and refuses anything older
        on_time = {step for step in logged if -0.01 <= first_seen[step] - logged[step] <= 1.5}
        held_back = {step for step in logged if step not in on_time}
        assert all(first_seen[step] >= logged[21] - 0.5 for step in held_back), {
            step: round(first_seen[step] - logged[21], 2) for step in held_back
        }
        assert set(range(26, 31)) <= on_time, sorted(held_back)
    finally:
        if hub is not None:
            stop_group(hub)
        prometheus.stop()


def test_server_down_for_the_whole_run_training_finishes_and_nothing_blocks(monkeypatch, caplog):
    port = free_port()  # nothing listens here
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{port}")
    from verl.utils.tracking import Tracking

    tracking = Tracking("e2e", "down", default_backend=["rl_insight"])
    for step in range(1, 201):  # what verl's trainer logs at a step
        tracking.log(step_metrics(step, 200), step=step)
    sender = metric_push.sender()
    # everything is kept for replay; the training thread never sent anything itself
    # 200 steps and the run's rl_insight_run_finished=0 marker
    wait_for(lambda: sender.pending() == 201 and sender.stats["failed_requests"] >= 1, 10, what="spooled")
    assert sender.stats["dropped_batches"] == 0
    assert not sender.flush(1)
    tracking.finish()
    assert caplog.text.count("cannot reach the monitoring server") == 1
    assert "could not be delivered" in caplog.text


def test_a_clean_restart_keeps_a_slow_runs_series_whole(tmp_path):
    """A run whose steps take longer than Prometheus' 5-minute lookback: the server is restarted
    (SIGTERM, as `rl-insight server stop` does) between two steps. The restarted hub exposes the
    run's latest values at once, so its series carries on in Prometheus without a break until the
    next step (before, it had nothing to expose until then: the curve broke off)."""
    from tests.helpers import stop_group

    port = free_port()
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
    url = f"http://127.0.0.1:{port}"
    hub = start_hub_process(port, tmp_path)
    batch = {
        "project": "e2e",
        "experiment_name": "slow",
        "step": 1,
        "time": time.time(),
        "metrics": {"rl_insight_monitor_actor_pg_loss": 0.5},
    }
    try:
        assert http("POST", url + "/api/v1/push", json.dumps({"batches": [batch]}).encode())[0] == 200
        selector = 'rl_insight_monitor_actor_pg_loss{experiment_name="slow"}'
        wait_for(lambda: prometheus.query(selector), 20, what="the step in Prometheus")  # the positive control
        stop_group(hub)
        assert (tmp_path / "data" / "hub-latest.json").exists()
        hub = start_hub_process(port, tmp_path)
        restarted = time.time()
        assert not (tmp_path / "data" / "hub-latest.json").exists()  # read once: never an older copy later
        wait_for(
            lambda: [
                t for values in prometheus.raw_samples(selector, 30).values() for _, t in values if t > restarted + 1
            ],
            20,
            what="the series carrying on after the restart, without a new step",
        )
        samples = prometheus.raw_samples(selector, 60)
        assert {v for values in samples.values() for v, _ in values} == {0.5}
        step = prometheus.query('rl_insight_monitor_training_global_step{experiment_name="slow"}')
        assert float(step[0]["value"][1]) == 1.0
    finally:
        stop_group(hub)
        prometheus.stop()
