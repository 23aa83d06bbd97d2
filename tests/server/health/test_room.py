"""The live detectors' memory beside the run histories they walk (``health/live.py``,
``health/room.py``): a step's values are held once, in the history (the walk keeps no copy of them);
the series made and not taken yet by the hub are booked under the hub's memory bound, cover what
Python allocates for them, and are given back; with no room they wait unbooked for the hub, and the
series and findings are the same either way."""

import gc
import json
import math
import random
import time
import tracemalloc

from tests import health_shapes as shapes
from verl_rl_insight.contract.wire import MAX_FUTURE_S
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import Histories
from verl_rl_insight.server.metrics.hub import MetricHub

START = 1_700_000_000.0
NOW = START + 10**6


def bodies(run, per_push=25, until=None, experiment="e"):
    """The run's steps as its trainer pushes them (``per_push`` steps a push), as bytes."""
    at = dict(run.times)
    steps = [
        {
            "project": "p",
            "experiment_name": experiment,
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


def fed(run, ledger, histories=None, until=None, experiments=("e",), clock=time.monotonic):
    """A monitor fed ``run`` (as each of ``experiments``) through a real hub (the explorer's history
    filled by the hub's listener, as the server wires it), the hub then gone."""
    histories = histories if histories is not None else Histories()
    monitor = HealthMonitor(book=ledger, histories=histories, clock=clock)
    hub = MetricHub(clock=lambda: NOW, max_future_s=MAX_FUTURE_S, listeners=(histories.observe,))
    for experiment in experiments:
        for body in bodies(run, until=until, experiment=experiment):
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
    # the series made wait for the server's second, booked beside the walk's own state
    assert booked.backlog() == 0 and booked.stats.booked_bytes + booked.stats.held_bytes == roomy.booked
    assert booked.stats.booked_bytes > 0 and booked.stats.held_bytes > 0
    assert unbooked.backlog() > 0 and unbooked.stats.made_unbooked == unbooked.backlog()  # the hub takes them at once
    assert full.refused > 0 and unbooked.stats.booked_bytes == unbooked.stats.held_bytes == 0
    assert unbooked.stats.held_unbooked > 0  # the one walk: nothing to let go for room
    made = [(b.labels, b.time, b.metrics) for b in booked.collect()]
    assert made == [(b.labels, b.time, b.metrics) for b in unbooked.collect()]
    assert any(m.get("rl_insight_health_finding") == 1.0 for _, _, m in made)  # the collapse was found
    assert booked.findings("p", "e") == unbooked.findings("p", "e") != []
    assert roomy.booked == booked.stats.held_bytes and booked.stats.booked_bytes == 0  # taken: all given back


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


def test_what_each_runs_walk_and_record_hold_is_booked_and_covers_what_python_allocates():
    """Per run the walk keeps its detectors' last values, the run's names and its findings, and a
    record of what it emitted: booked under the hub's bound (``held_bytes``), at least what Python
    allocates for them and less than three times it, on every failure shape."""
    for run in [r for r in shapes.failures(on_shapes=False)][:6]:
        fed(run, Ledger()).collect()  # warm: the decoder's and the detectors' first allocations
        monitor = fed(run, Ledger())
        held, _ = traced(lambda: monitor.collect() and None)  # noqa: B023 (called at once)
        booked = monitor.stats.held_bytes
        assert held <= booked < 3 * held, f"{run.failure}: booked {booked} for {held} bytes held"


def test_walks_found_no_room_let_go_the_idle_walk_walked_longest_ago_and_the_findings_stay_the_same():
    """Four runs' walks under a bound with room for about two: a walk that finds no room lets go the
    walk walked longest ago when that run has been idle a while (what is booked stays under the
    bound), and a run whose walk was let go is walked again from its history when asked, with the
    same findings as with all the room in the world. A walk fed within the last minute is never let
    go for room (the run would be walked again from its first step at its every step): the new walk
    is kept unbooked and counted instead."""
    run = collapse()
    experiments = ("e0", "e1", "e2", "e3")
    roomy = fed(run, Ledger(), experiments=experiments)
    roomy.walk()
    one = roomy.stats.held_bytes // 4
    now = [0.0]
    ledger = Ledger(limit=int(2.5 * one))  # two walks, not four (the series made wait unbooked for the hub)
    tight = fed(run, ledger, experiments=experiments, clock=lambda: now[0])
    tight.run_findings(("p", "e0"), ())  # two runs walked, then idle two minutes
    tight.run_findings(("p", "e1"), ())
    now[0] = 120.0
    tight.collect()
    stats = tight.stats
    assert stats.walks_let_go == 2 and stats.held_unbooked == 0 and ledger.booked <= ledger.limit
    assert stats.held_bytes < 3 * one
    tight.run_findings(("p", "e0"), ())  # asked for at once: the walks held were fed just now
    assert tight.stats.walks_let_go == 2 and tight.stats.held_unbooked == 1
    for experiment in experiments:  # (the stall finding reads the clock: its steps compared, not its value)
        found, everything = (
            [
                (f.detector, f.first_step, f.last_step, f.evidence if f.detector != "stall" else "")
                for f in m.run_findings(("p", experiment), ())
            ]
            for m in (tight, roomy)
        )
        assert found and found == everything, experiment


def test_what_is_booked_for_the_walks_stays_what_they_hold_through_any_order_of_steps_marks_asks_and_idle_time():
    """A seeded random sequence of five runs' steps, walks, reset marks, asks for findings, takes and
    idle minutes, under tight bounds and few walks: after every operation the bound holds exactly the
    runs' walks and records plus the series made (what a helper's fuzzing found drifting when a let-go
    for room booked a run again inside another run's booking)."""
    from verl_rl_insight.contract.wire import Batch

    for seed in range(120):
        r = random.Random(seed)
        ledger, now = Ledger(limit=r.choice([30_000, 60_000, 120_000, 250_000])), [0.0]
        histories = Histories()
        monitor = HealthMonitor(book=ledger, histories=histories, clock=lambda: now[0], max_runs=r.choice([2, 3, 256]))  # noqa: B023
        steps = dict.fromkeys(("e0", "e1", "e2", "e3", "e4"), 0)
        for op in range(120):
            experiment, draw = r.choice(list(steps)), r.random()
            if draw < 0.6:
                steps[experiment] += 1
                metrics = {
                    detectors.series_name("critic/rewards/mean"): r.gauss(1, 0.1) if r.random() < 0.9 else math.nan,
                    detectors.series_name("actor/grad_norm"): r.random(),
                    detectors.series_name("response_length/mean"): 100 + r.random(),
                }
                labels = (("experiment_name", experiment), ("project", "p"))
                histories.observe([Batch(labels, steps[experiment], 1000 + now[0] + steps[experiment], True, metrics)])
            elif draw < 0.75:
                monitor.walk()
            elif draw < 0.82:
                monitor.reset_baseline("p", experiment, r.randint(0, max(1, steps[experiment])))
            elif draw < 0.86:
                monitor.set_resets("p", experiment, [])
            elif draw < 0.9:
                monitor.findings("p", experiment)
            elif draw < 0.93:
                monitor.collect()
            else:
                now[0] += r.choice([10, 61, 200])
            stats = monitor.stats
            assert ledger.booked == stats.held_bytes + stats.booked_bytes, (seed, op, stats)
            assert stats.held_bytes == sum(record.booked for record in monitor._records.values()), (seed, op)
