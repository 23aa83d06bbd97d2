"""The live detectors' memory beside the run histories they walk (``health/live.py``,
``health/room.py``): a step's values are held once, in the history (the walk keeps no copy of them);
the series made and not taken yet by the hub are booked under the hub's memory bound, cover what
Python allocates for them, and are given back; with no room they wait unbooked for the hub, and the
series and findings are the same either way."""

import gc
import json
import tracemalloc

from tests import health_shapes as shapes
from verl_rl_insight.contract.wire import MAX_FUTURE_S
from verl_rl_insight.server.explorer.history import Histories
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.metrics.hub import MetricHub

START = 1_700_000_000.0
NOW = START + 10**6


def bodies(run, per_push=25, until=None):
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
        if until is None or step <= until
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


def fed(run, ledger, histories=None, until=None):
    """A monitor fed ``run`` through a real hub (the explorer's history filled by the hub's listener,
    as the server wires it), the hub then gone."""
    histories = histories if histories is not None else Histories()
    monitor = HealthMonitor(book=ledger, histories=histories)
    hub = MetricHub(clock=lambda: NOW, max_future_s=MAX_FUTURE_S, listeners=(histories.observe,))
    for body in bodies(run, until=until):
        hub.push_body(body)
    histories.settle()  # the steps the pushes queued put in their columns (the walk's first read would)
    del hub
    gc.collect()
    return monitor


def collapse():
    return next(r for r in shapes.failures(on_shapes=False) if r.failure == "reward_collapse")


def test_with_no_room_the_series_made_wait_unbooked_for_the_hub_and_are_the_same():
    run = collapse()
    roomy, full = Ledger(), Ledger(limit=0)
    booked, unbooked = fed(run, roomy), fed(run, full)
    booked.walk()
    unbooked.walk()
    assert booked.backlog() == 0 and booked.stats.booked_bytes == roomy.booked > 0  # waits for the server's second
    assert unbooked.backlog() > 0 and unbooked.stats.made_unbooked == unbooked.backlog()  # the hub takes them at once
    assert full.refused > 0 and unbooked.stats.booked_bytes == 0
    made = [(b.labels, b.time, b.metrics) for b in booked.collect()]
    assert made == [(b.labels, b.time, b.metrics) for b in unbooked.collect()]
    assert any(m.get("rl_insight_health_finding") == 1.0 for _, _, m in made)  # the collapse was found
    assert booked.findings("p", "e") == unbooked.findings("p", "e") != []
    assert roomy.booked == 0 and booked.stats.booked_bytes == 0  # taken: all given back


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


def test_the_bytes_booked_cover_what_python_allocates_for_the_series_made():
    run = collapse()
    fed(run, Ledger()).collect()  # warm: the decoder's cache of names, the detectors' first allocations
    ledger = Ledger()
    monitor = fed(run, ledger)
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


def test_a_steps_values_are_held_once_the_walk_keeps_no_copy_of_them():
    """The walk of a run's steps holds about what the walk of half of them does (its detectors keep
    their last KEEP values, its emitted steps a few numbers): the steps' values stay in the history
    alone, which grows with them."""
    run = collapse()
    steps = len(detectors.steps_of(run.history))
    assert steps >= 300, steps

    def walked(until):
        histories = Histories()
        monitor = fed(run, Ledger(), histories, until=until)

        def walk():
            monitor.collect()
            return monitor

        return traced(walk)[0], histories.get(("p", "e")).nbytes()

    walked(steps)  # warm
    half, half_history = walked(steps // 2)
    whole, whole_history = walked(steps)
    assert whole_history - half_history > 50_000  # the history holds the steps ...
    assert whole - half < (whole_history - half_history) / 4, (half, whole)  # ... the walk does not
