"""The trainer does not trust the server at its URL: a wrong or hostile server (a real HTTP server on
loopback) that lists a request of a million steps, thousands of requests, or answers with a body
of 64 MiB costs the training thread's step boundary a bounded amount of work and memory, and says
so once in the log. The config is verl's own ppo_trainer config (as the demo composes it), armed
with verl's torch profiler; the trainer object around it is a STAND-IN holding only that config
(the one attribute the step boundary reads)."""

import json
import logging
import threading
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from tests.helpers import wait_for
from verl_rl_insight.commands.demo.command import compose
from verl_rl_insight.contract.wire import MAX_PROFILE_STEPS
from verl_rl_insight.trainer.config import ServerUrl
from verl_rl_insight.trainer.plugins.profiler import MAX_ANSWER_BYTES, MAX_TAKEN, Profiles, arm
from verl_rl_insight.trainer.runtime import RunInfo

RUN = RunInfo("p", "e")


def requested(index, first, last):
    """A request as the server lists it (its store's record)."""
    record = {"id": f"{index:012x}", "project": "p", "experiment_name": "e", "state": "requested", "detail": ""}
    return record | {"first_step": first, "last_step": last, "role": None, "ranks": None, "trace_dir": None}


class HostileServer:
    """Answers GET /api/v1/profiles with ``listing`` (a dict), or with ``flood_bytes`` of JSON that never ends."""

    def __init__(self, listing=None, flood_bytes=0):
        self.sent = 0
        self.gets = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer(b'{"updated": 0}')

            def do_GET(self):
                outer.gets += 1
                if not flood_bytes:
                    self._answer(json.dumps(listing).encode())
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(flood_bytes))
                self.end_headers()
                chunk = b'{"profiles": [' + b" " * 65522
                try:
                    while outer.sent < flood_bytes:
                        self.wfile.write(chunk)
                        outer.sent += len(chunk)
                except OSError:
                    pass  # the client stopped reading

            def _answer(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def trainer():
    config = compose("x", 3, 1, "vllm", 2, 0, 0, False)  # verl's own ppo_trainer config
    assert arm(config, OmegaConf.create({"arm": "torch", "arm_roles": ["actor"], "arm_ranks": [0]}))
    return SimpleNamespace(config=config)


def test_a_listed_request_of_a_million_steps_and_thousands_of_requests_cost_the_step_boundary_a_bounded_amount(
    trainer, caplog
):
    listing = {
        "profiles": [requested(0, 2, 1_000_001)] + [requested(i, 2 + i % 50, 2 + i % 50) for i in range(1, 5001)]
    }
    hostile = HostileServer(listing)
    profiles = Profiles(ServerUrl(hostile.url), interval_s=3600)
    try:
        with caplog.at_level(logging.WARNING, logger="verl_rl_insight"):
            profiles.start(RUN)
            wait_for(lambda: profiles.requests, 20, 0.05, "the poller's first answer")
            assert len(profiles.requests) == MAX_TAKEN  # of 5,001 listed
            assert all(r["last_step"] - r["first_step"] < MAX_PROFILE_STEPS for r in profiles.requests.values())

            tracemalloc.start()
            profiles.point(trainer, "stop_profile", "enter", 1)  # the step boundary, on the training thread
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            profiled = []
            for step in range(2, 3 + MAX_TAKEN + 2):  # verl's boundaries: is the next step profiled?
                profiles.point(trainer, "stop_profile", "enter", step)
                if step + 1 in trainer.config.global_profiler.steps:
                    profiled.append(step + 1)
                assert len(trainer.config.global_profiler.steps) <= 2  # the next step, the one in progress
        assert profiled == list(range(3, 3 + MAX_TAKEN)) and peak < 8 * 2**20, (profiled, peak)
        said = [r.getMessage() for r in caplog.records]
        assert any("ignored: it asks for 1,000,000 steps (at most 100)" in m for m in said), said
        assert any(f"{MAX_TAKEN} profile requests are open here" in m for m in said), said
    finally:
        profiles.close()
        hostile.close()


def test_an_answer_of_64_mib_is_read_no_further_than_the_bound_and_said(trainer, caplog):
    hostile = HostileServer(flood_bytes=64 * 2**20)
    profiles = Profiles(ServerUrl(hostile.url), interval_s=3600)
    try:
        with caplog.at_level(logging.WARNING, logger="verl_rl_insight"):
            profiles.start(RUN)
            wait_for(
                lambda: any("answered more than" in r.getMessage() for r in caplog.records), 30, 0.05, "the warning"
            )
        said = [r.getMessage() for r in caplog.records if "answered more than" in r.getMessage()]
        assert said == [f"rl-insight: profile requests ignored: {hostile.url}/api/v1/profiles answered more "
                        f"than {MAX_ANSWER_BYTES:,} bytes (not read further)"]  # fmt: skip
        wait_for(lambda: hostile.sent > 0, 5, 0.05, "the flood")
        assert hostile.sent < 64 * 2**20 / 2  # the client stopped reading (what is in flight is socket buffers)
        assert profiles.requests == {}
        profiles.point(trainer, "stop_profile", "enter", 1)
        assert list(trainer.config.global_profiler.steps) == []
    finally:
        profiles.close()
        hostile.close()
