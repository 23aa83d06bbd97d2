"""The runs' shares of the hub never add up past the whole: the attacker holds two run credentials
(what any Ray worker of two jobs carries) and fills what each may hold of the series limit or of the
memory bound; a third run, new, still logs every step at once (no 429, nothing kept waiting), and
the attackers are told 429 + Retry-After, never that their data is bad.

Nor do the server's parts' shares of its one memory bound (``memory_limit_mb``): they are computed
in one place (``settings/memory.py``, ``MemoryShares``), add up to the bound at any size, and the
server gives each part its share from there."""

import json
import time

import pytest

from tests.helpers import free_port, http
from tests.server.metrics.test_run_budgets import STEP_LINE, TOKEN, call, long_label_push, verl_step
from tests.server.metrics.test_run_budgets import served as served  # the fixture: servers made and closed per test
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server import app
from verl_rl_insight.server.settings.memory import DEFAULT_SHARES, MemoryShares
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender


def _fill(server, experiment, body_of, tries=200):
    """Push ``body_of(n)`` for run ``experiment`` until refused; the refusal (status, answer, headers)."""
    credential = run_credential.mint(TOKEN, "p", experiment)
    for n in range(tries):
        status, answer, headers = call("POST", server.url + "/api/v1/push", credential, body_of(n))
        if status != 200:
            return status, answer, headers
    raise AssertionError(f"{experiment} never reached a bound")  # the positive control


def _honest_run_logs_every_step(server, steps=20):
    sender = BatchSender(server.url + "/api/v1/push", token=run_credential.mint(TOKEN, "p", "honest"), linger_s=0.01)
    for step in range(1, steps + 1):
        metrics = verl_step(step, steps)
        if step % 5 == 0:  # verl's validation: keys the run did not have before
            metrics.update({f"val-core/source_{step}/reward/mean@1": 0.5, f"val-aux/source_{step}/score/mean@1": 0.5})
        sender.submit(MetricBatch("p", "honest", step, time.time(), metrics, "rl_insight_monitor_"))
        assert sender.flush(10)
    stats = {k: sender.stats[k] for k in ("failed_requests", "rejected_batches", "dropped_batches")}
    sender.close(1)
    # refused even once (a 429 it would retry) is a step the person waits for: none here
    assert stats["failed_requests"] == 0 and stats["rejected_batches"] == 0 and stats["dropped_batches"] == 0, stats
    status, body = http("GET", server.url + "/metrics?scraper=prometheus", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    logged = [int(float(value)) for value, _ in STEP_LINE.findall(body.decode())]
    assert logged == list(range(1, steps + 1)), f"{len(set(range(1, steps + 1)) - set(logged))} of {steps} steps lost"


def _junk_names(experiment):
    def body(n):
        names = {f"rl_insight_monitor_junk_{n}_{i}": 1.0 for i in range(100)}
        return json.dumps({"batches": [{"project": "p", "experiment_name": experiment, "step": n, "metrics": names}]})

    return lambda n: body(n).encode()


def test_two_credentials_filling_the_series_limit_leave_a_new_run_room_for_every_step(served):
    server = served(memory_limit_bytes=256 * 2**20, max_series=4000)
    for attacker in ("attacker-1", "attacker-2"):
        status, answer, headers = _fill(server, attacker, _junk_names(attacker))
        assert status == 429 and "max_series" in answer and int(headers["retry-after"]) > 0, (status, answer[:300])
    assert server.hub.summary()["series"] < 4000  # what the two hold leaves room: the rest is the next run's
    _honest_run_logs_every_step(server)


def test_two_credentials_filling_the_memory_bound_leave_a_new_run_room_for_every_step(served):
    server = served()
    for attacker in ("attacker-1", "attacker-2"):
        status, answer, headers = _fill(server, attacker, lambda n, a=attacker: long_label_push("p", a, n))
        assert status == 429 and "memory_limit_mb" in answer and int(headers["retry-after"]) > 0, (status, answer[:300])
    _honest_run_logs_every_step(server)


def test_a_fourth_and_fifth_run_still_find_room(served):
    """Every run not yet seen finds room, however many filled theirs before it (half of what is free)."""
    server = served(memory_limit_bytes=256 * 2**20, max_series=8000)
    for attacker in ("a1", "a2", "a3", "a4"):
        _fill(server, attacker, _junk_names(attacker), tries=400)
    _honest_run_logs_every_step(server, steps=10)


@pytest.mark.parametrize("memory_limit_mb", [1, 16, 24, 100.3, 256, 1024, 8192, 999_999])
def test_the_parts_shares_of_the_memory_bound_add_up_to_at_most_the_bound(memory_limit_mb, tmp_path):
    shares = ServerSettings(data_dir=str(tmp_path), memory_limit_mb=memory_limit_mb).memory_shares
    assert shares.bound == int(memory_limit_mb * 2**20)
    parts = {name: getattr(shares, name) for name in MemoryShares.PARTS}
    assert sum(parts.values()) <= shares.bound and all(part > 0 for part in parts.values()), parts
    # what is booked beside the hub lies inside the hub's share, within a quarter of it, each cap too
    assert shares.beside_hub <= shares.hub // 4
    assert max(shares.timeline, shares.answers_in_flight, shares.histories_waiting) <= shares.beside_hub


def test_the_default_bound_keeps_each_parts_share_of_before():
    """1,024 MiB: the histories 64 MiB, the curves answers 32, the span index 16, answers in flight 64
    (docs/limits.md); the hub books within what those leave, 912 MiB."""
    mib = {name: getattr(DEFAULT_SHARES, name) / 2**20 for name in (*MemoryShares.PARTS, "answers_in_flight")}
    assert mib == {"hub": 912, "histories": 64, "curves": 32, "span_index": 16, "answers_in_flight": 64}


def test_the_server_gives_each_part_its_share(tmp_path):
    """The real server (app.Server, every service off): each part holds to its share of the bound."""
    settings = ServerSettings(
        bind="127.0.0.1",
        port=free_port(),
        data_dir=str(tmp_path / "data"),
        services={name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")},
        memory_limit_mb=160,
    )
    shares = settings.memory_shares
    server = app.Server(settings).start()
    try:
        parts = server.parts
        assert parts is not None and server.spans is not None
        assert parts.hub.memory_limit_bytes == shares.hub
        assert parts.hub.summary()["memory_limit_bytes"] == shares.hub  # what /metrics and status say
        assert parts.explorer.histories.max_bytes == shares.histories
        assert parts.explorer.histories.max_waiting_bytes == shares.histories_waiting
        assert parts.explorer.max_curves_bytes == shares.curves
        assert parts.figures.budget_bytes == shares.timeline
        assert parts.api.context.writer.in_flight.limit == shares.answers_in_flight
        assert server.spans.index.max_bytes == shares.span_index
    finally:
        server.stop()
