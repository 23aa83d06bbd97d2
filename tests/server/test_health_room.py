"""The live detectors' memory beside the hub (``health/live.py``, ``health/room.py``): what their
queue, the steps held for a late card and the series made hold is booked under the hub's memory
bound, covers what Python allocates for it, and is given back; a push with no room walks the queue
itself, and the findings and their times are the same either way."""

import gc
import json
import tracemalloc

from tests import health_shapes as shapes
from verl_rl_insight.contract.wire import MAX_FUTURE_S
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HOLD, HealthMonitor
from verl_rl_insight.server.metrics.hub import MetricHub

START = 1_700_000_000.0
NOW = START + 10**6


def bodies(run, per_push=25):
    """The run's steps as its trainer pushes them (``per_push`` steps a push), as bytes."""
    at = dict(run.times)
    steps = [
        {
            "project": "p",
            "experiment_name": "e",
            "step": step,
            "time": START + at.get(step, float(step)),
            "metrics": {name: v for name, v in metrics.items() if v == v},  # JSON has no NaN
        }
        for step, metrics in detectors.steps_of(run.history)
    ]
    return [json.dumps({"batches": steps[i : i + per_push]}).encode() for i in range(0, len(steps), per_push)]


class Ledger:
    """A memory bound's ``book_other`` for one owner: what is booked, up to ``limit``."""

    def __init__(self, limit=1 << 40):
        self.limit, self.booked, self.refused = limit, 0, 0

    def __call__(self, nbytes):
        if nbytes > 0 and self.booked + nbytes > self.limit:
            self.refused += 1
            return False
        self.booked += nbytes
        return True


def fed(run, ledger, card_first=False, queue_bytes=None):
    """A monitor fed ``run`` through a real hub (the hub's own tuples, as the server hands them),
    the hub then gone: what stays alive is the monitor's."""
    monitor = HealthMonitor(book=ledger, queue_bytes=queue_bytes)
    if card_first:
        monitor.take_run_keys("p", "e", ())  # its card came before its steps: it holds none
    hub = MetricHub(clock=lambda: NOW, max_future_s=MAX_FUTURE_S, listeners=(monitor.observe,))
    for body in bodies(run):
        hub.push_body(body)
    del hub
    gc.collect()
    return monitor


def test_a_push_with_no_room_walks_the_queue_itself_and_the_findings_and_their_times_are_the_same():
    run = next(r for r in shapes.failures(on_shapes=False) if r.failure == "reward_collapse")
    roomy, full, capped = Ledger(), Ledger(limit=0), Ledger()
    queued, walked = fed(run, roomy), fed(run, full)
    at_share = fed(run, capped, queue_bytes=200_000)  # the queue at its share: walked though the bound has room
    assert 0 < at_share.stats.pushes_walked < len(bodies(run)) and capped.refused == 0
    assert queued.stats.pushes_walked == 0 and queued.backlog() == 0  # all waits for the server's second
    pushes = len(bodies(run))
    assert walked.stats.pushes_walked == pushes and walked.stats.walked_on_push == walked.stats.steps
    assert walked.backlog() > 0 and walked.stats.made_unbooked == walked.backlog()  # the hub takes them at once
    assert walked.stats.held_refused == 1 and full.refused > pushes  # counted, visible in the server's info
    made = [(b.labels, b.time, b.metrics) for b in queued.collect()]
    assert made == [(b.labels, b.time, b.metrics) for b in walked.collect()]
    assert made == [(b.labels, b.time, b.metrics) for b in at_share.collect()]
    assert any(m.get("rl_insight_health_finding") == 1.0 for _, _, m in made)  # the collapse was found
    assert queued.findings("p", "e") == walked.findings("p", "e") != []


def test_what_the_detectors_hold_is_booked_and_all_of_it_given_back():
    run = next(r for r in shapes.failures(on_shapes=False) if r.failure == "reward_collapse")
    ledger = Ledger()
    monitor = fed(run, ledger)
    queued = monitor.stats.booked_bytes
    assert queued == ledger.booked > 0 and monitor.stats.steps == 0
    monitor.walk()  # the queue given back; the series made and the steps held for the card booked
    assert monitor.stats.booked_bytes == ledger.booked > 0
    monitor.collect()  # the hub took the series: the held steps remain
    held = monitor.stats.booked_bytes
    assert held == ledger.booked and 0 < held < queued
    monitor.take_run_keys("p", "e", ())  # the run's card came: nothing is held more
    assert monitor.stats.booked_bytes == ledger.booked == 0


def traced(make):
    """What ``make()`` leaves allocated (tracemalloc), and what it made."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, made
    finally:
        tracemalloc.stop()


def walked(run, ledger, card_first=False):
    monitor = fed(run, ledger, card_first)
    monitor.walk()
    monitor.collect()
    return monitor


def test_the_bytes_booked_cover_what_python_allocates_for_the_queue_the_held_steps_and_the_series_made():
    run = next(r for r in shapes.failures(on_shapes=False) if r.failure == "reward_collapse")
    walked(run, Ledger())  # warm: the decoder's cache of names, the detectors' first allocations
    # the queue: every step waiting, the hub gone (the queue alone keeps the hub's tuples alive)
    ledger = Ledger()
    used, monitor = traced(lambda: fed(run, ledger, card_first=True))
    assert used <= ledger.booked < 2 * used, f"booked {ledger.booked} for {used} bytes allocated"
    # the series made and not collected yet: what collecting them frees (traced as they are made)
    tracemalloc.start()
    try:
        monitor.walk()
        made = ledger.booked
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        monitor.collect()
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert freed <= made < 2 * freed, f"booked {made} for {freed} bytes freed"
    # the steps held for the card (the last HOLD): a run with them against one whose card came first
    ledger = Ledger()
    holding, kept = traced(lambda: walked(run, ledger))
    none, kept_none = traced(lambda: walked(run, Ledger(), card_first=True))
    assert len(kept._runs[("p", "e")].held) == HOLD and kept_none._runs[("p", "e")].held is None
    assert holding - none <= ledger.booked < 2 * (holding - none), f"booked {ledger.booked} for {holding - none}"
