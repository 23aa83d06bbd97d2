"""Scrape targets against the real server process; the attacker holds run credentials (what any
Ray worker of a job carries). A target at the server's own ports is refused under every spelling of
this machine's address (it would have Prometheus scrape the hub's every series again under the
writer's labels), and all runs' targets together are bounded: a run may register at most half of
what the other runs leave, so eight credentials cannot each take the largest job's worth, and a new
run still finds room."""

import json
import socket

import pytest

from tests.helpers import free_port, http, start_hub_process, stop_group
from verl_rl_insight.contract import run_credential
from verl_rl_insight.server.stores.targets import RUN_TARGETS_FLOOR

TOKEN = "the-servers-own-token-for-targets"


def _register(url, credential, address, run="attacker", job="vllm"):
    body = {"address": address, "job": job, "labels": {"project": "p", "experiment_name": run}, "ttl_s": 600}
    headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
    status, answer = http("POST", url + "/api/v1/targets", json.dumps(body).encode(), headers)
    return status, answer.decode()


def test_the_servers_own_ports_are_refused_under_any_spelling(tmp_path):
    port = free_port()
    hub = start_hub_process(port, tmp_path, token=TOKEN)
    url = f"http://127.0.0.1:{port}"
    credential = run_credential.mint(TOKEN, "p", "attacker")
    spellings = [
        f"127.0.0.1:{port}",
        f"127.1:{port}",
        f"2130706433:{port}",
        f"0x7f000001:{port}",
        f"0177.0.0.1:{port}",
        f"127.0.0.2:{port}",  # another loopback address: this machine (a server bound to 0.0.0.0 answers there)
        f"0.0.0.0:{port}",
        f"localhost:{port}",
        f"LOCALHOST:{port}",
        f"[::1]:{port}",
        f"[::ffff:7f00:1]:{port}",
        f"{socket.gethostname()}:{port}",
        f"127.0.0.1:{9090}",  # the server's Prometheus port (a setting: its default)
    ]
    try:
        for address in spellings:
            status, answer = _register(url, credential, address)
            assert status == 400 and "own port" in answer, (address, status, answer[:200])
        assert _register(url, credential, f"127.0.0.1:{port + 1 if port < 65535 else port - 1}")[0] == 200
        listed = json.loads(http("GET", url + "/api/v1/targets", headers={"Authorization": f"Bearer {TOKEN}"})[1])
        assert len(listed["targets"]) == 1
    finally:
        stop_group(hub)


def test_eight_run_credentials_cannot_each_take_a_runs_cap_and_a_new_run_finds_room(tmp_path):
    port = free_port()
    cap = 64  # addresses on loopback below the ephemeral range: never the hub's own port (nothing scrapes here)
    hub = start_hub_process(port, tmp_path, token=TOKEN, max_targets_per_run=cap)
    url = f"http://127.0.0.1:{port}"
    try:
        held = {}
        for r in range(8):
            credential = run_credential.mint(TOKEN, "p", f"attacker-{r}")
            n = 0
            for i in range(cap + 1):
                status, answer = _register(url, credential, f"127.0.0.1:{20000 + 100 * r + i}", run=f"attacker-{r}")
                if status != 200:
                    assert status == 400 and "max_targets_per_run" in answer, answer[:200]
                    break
                n += 1
            held[r] = n
        assert held[0] == cap  # the first run alone: its whole cap
        # all runs together: a bounded number of scrapes (twice a run's cap, and the few every run may have)
        assert sum(held.values()) <= 2 * cap + 8 * RUN_TARGETS_FLOOR, held
        credential = run_credential.mint(TOKEN, "p", "honest")
        assert _register(url, credential, "127.0.0.1:21000", run="honest")[0] == 200  # a new run finds room
    finally:
        stop_group(hub)


def test_a_name_that_resolves_to_this_machine_after_registration_is_not_scraped_there(monkeypatch):
    """DNS rebinding: a run credential registers a name its DNS answers with another machine's
    address, then makes it answer 127.0.0.1. Prometheus is handed the address checked at
    registration (http_sd, what GET /api/v1/sd serves), never the name to resolve again; a renewal
    while the name answers 127.0.0.1 at an own port is refused; a name that resolves to nothing is
    refused. The DNS answers are the test's (getaddrinfo), the registry the server's own."""
    from verl_rl_insight.server.stores.targets import TargetError, TargetRegistry

    answers = {"rebind.example": "10.9.8.7"}
    real = socket.getaddrinfo

    def dns(host, *args, **kwargs):
        if host in answers:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], 0))]
        if host.endswith(".example"):
            raise socket.gaierror("no such name")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", dns)
    own = 8800
    registry = TargetRegistry(own_ports=frozenset({own}))
    labels = {"project": "p", "experiment_name": "attacker"}
    registry.register(f"rebind.example:{own}", "vllm", labels, 600, writer=("p", "attacker"))
    answers["rebind.example"] = "127.0.0.1"  # the attacker's DNS now answers with this machine
    assert registry.http_sd() == [
        {"targets": [f"10.9.8.7:{own}"], "labels": {"instance": f"rebind.example:{own}", **labels, "job": "vllm"}}
    ]
    with pytest.raises(TargetError, match="own port"):  # the heartbeat resolves again, and is refused
        registry.register(f"rebind.example:{own}", "vllm", labels, 600, writer=("p", "attacker"))
    with pytest.raises(TargetError, match="does not resolve"):
        registry.register(f"nowhere.example:{own}", "vllm", labels, 600, writer=("p", "attacker"))
