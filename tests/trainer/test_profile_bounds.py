"""What a server may list (20 open requests of 100 steps each) costs the training thread's step
boundary a bounded amount: the trainer arms at most ``MAX_ARMED_STEPS`` steps to come at once
(later requests wait their turn, said once), and verl's ``global_profiler.steps`` (which verl
reads with ``in`` at every boundary, and which OmegaConf writes at 0.1 ms a step) holds only the
next step of ours, never the 2,000 of the listing; every requested step is still profiled, in
order, each request finished. Real HTTP on loopback from a listing server; verl's own config; the
trainer object is a STAND-IN holding only that config. The time it saves is measured in
benchmarks/bench_profile_boundary.py."""

import logging

from tests.e2e.test_profiler_hostile_server import RUN, HostileServer, requested, trainer  # noqa: F401  (a fixture)
from tests.helpers import wait_for
from verl_rl_insight.trainer.config import ServerUrl
from verl_rl_insight.trainer.plugins.profiler import MAX_ARMED_STEPS, MAX_TAKEN, Profiles

EACH = 100


def test_twenty_requests_of_100_steps_keep_verls_list_short_and_are_all_profiled_in_turn(trainer, caplog):  # noqa: F811
    listing = {"profiles": [requested(i, 2 + EACH * i, 1 + EACH * (i + 1)) for i in range(MAX_TAKEN)]}
    server = HostileServer(listing)
    profiles = Profiles(ServerUrl(server.url), interval_s=3600)
    steps = trainer.config.global_profiler
    try:
        with caplog.at_level(logging.WARNING, logger="verl_rl_insight"):
            profiles.start(RUN)
            wait_for(lambda: len(profiles.requests) == MAX_TAKEN, 20, 0.05, "the poller's first answer")
            profiled, longest = [], 0
            for step in range(1, 2 + EACH * MAX_TAKEN):  # verl's fit: start, stop (is the next one profiled?)
                profiles.point(trainer, "start_profile", "exit", step)
                profiles.point(trainer, "stop_profile", "enter", step)
                if step + 1 in steps.steps:
                    profiled.append(step + 1)
                longest = max(longest, len(steps.steps))
                assert len(profiles.wanted) <= MAX_ARMED_STEPS
                profiles.point(trainer, "stop_profile", "exit", step)
        assert longest <= 2, longest  # the step in progress and the next one; never the listing's 2,000
        assert profiled == list(range(2, 2 + EACH * MAX_TAKEN))
        assert all(r["state"] == "finished" for r in profiles.requests.values())
        assert caplog.text.count("later profile requests wait their turn") == 1
    finally:
        profiles.close()
        server.close()
