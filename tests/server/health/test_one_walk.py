"""The server's one walk per run (``health/live.py`` over the explorer's history): the alert series
and the run explorer's findings read the same walk; a walk again from the start (a mark that resets
the baselines, a late step) emits no step's series twice, and what the explorer shows is still
diagnose's; a run read back from Prometheus after a restart emits nothing it exposed before."""

from collections import Counter

from tests.server.health.test_walk import START, offline, planned_drop
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.health import detectors, live
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import Histories, Step

RUN = ("p", "e")


def steps_of(run):
    at = dict(run.times)
    return [Step(step, START + at.get(step, float(step)), metrics) for step, metrics in detectors.steps_of(run.history)]


def pushed(histories, steps):
    labels = (("experiment_name", RUN[1]), ("project", RUN[0]))
    histories.observe([Batch(labels, step, at, True, metrics) for step, at, metrics in steps])


def watched():
    """The explorer's histories and the live detectors reading them, as the server wires them."""
    histories = Histories()
    return histories, HealthMonitor(histories=histories)


def emitted(made):
    """(labels, time) of each series batch made: a step's series of one detector and metric."""
    return [(b.labels, b.time) for b in made]


def test_a_walk_again_after_a_mark_emits_no_step_twice_and_the_explorer_reads_that_walk():
    run = planned_drop()
    steps = steps_of(run)
    histories, monitor = watched()
    made = []
    for i in range(0, len(steps), 25):
        if steps[i][0] >= 205 and not monitor.stats.rewalks:
            monitor.reset_baseline(*RUN, 200)  # marked a few steps late: the run walked again with it
        pushed(histories, steps[i : i + 25])
        made += monitor.collect()
    assert monitor.stats.rewalks == 1
    twice = [key for key, n in Counter(emitted(made)).items() if n > 1]
    assert made and twice == []
    times = {at for _, at, _ in steps}
    assert {at for _, at in emitted(made)} <= times  # each at its step's own time
    # the explorer's findings: that walk's, which are diagnose's with the mark
    found = [f for f in monitor.run_findings(RUN, (200,)) if f.detector != "stall"]  # not finished: no step since
    assert [f.as_json() for f in found] == [f.as_json() for f in offline(run, resets=(200,)) if f.detector != "stall"]
    assert [f for f in found if f.severity != "info"] == []


def test_a_run_read_back_from_prometheus_emits_nothing_it_exposed_before():
    run = planned_drop()
    steps = steps_of(run)
    histories, monitor = watched()
    histories.fill(RUN, steps[:-5])  # a restarted server's explorer read the run back
    assert monitor.collect() == [] and monitor.run_findings(RUN, ()) != []
    pushed(histories, steps[-5:])  # the run logs on
    made = monitor.collect()
    assert made and {at for _, at in emitted(made)} == {at for _, at, _ in steps[-5:]}
    assert [f.as_json() for f in monitor.findings(*RUN)] == [f.as_json() for f in offline(run)]


def test_a_new_attempt_of_the_run_from_an_earlier_step_is_alerted_again_at_its_own_times():
    """verl resumed from a checkpoint: the run's name logs again from step 100, later (a new attempt,
    contract.attempts); the detectors' series of those steps go out again, stamped at the new times."""
    run = planned_drop()
    steps = steps_of(run)
    histories, monitor = watched()
    pushed(histories, steps[:150])
    first = monitor.collect()
    later = steps[150][1] - steps[99][1] + 3600.0  # an hour after the first attempt's last step
    again = [(step, at + later, metrics) for step, at, metrics in steps[99:120]]
    pushed(histories, again)
    made = monitor.collect()
    assert {at for _, at in emitted(made)} == {at for _, at, _ in again}
    assert not set(emitted(made)) & set(emitted(first))


def test_a_run_the_histories_forgot_for_room_keeps_its_baselines_and_its_collapse_is_alerted():
    """Forty long runs under one memory bound: the histories forget the run touched longest ago, and
    it logs again with only its new steps held (``partial``). Its walk goes on over them with the
    baselines of the steps before: the score halving at step 200 is still a collapse, alerted, as
    diagnose finds it over the whole run; walked again from the few steps held, it would be none."""
    run = planned_drop(at=200)
    steps = steps_of(run)
    before, after = [s for s in steps if s[0] < 200], [s for s in steps if s[0] >= 200]
    scratch = Histories()
    pushed(scratch, before)
    held = scratch.get(RUN).nbytes()
    histories = Histories(max_bytes=held + 4096)  # the run's steps before the change, not one more run's
    monitor = HealthMonitor(histories=histories)
    pushed(histories, before)
    assert monitor.collect()
    other = [(("experiment_name", "other"), ("project", RUN[0]))]
    many = {f"rl_insight_monitor_other_{i}": float(i) for i in range(2000)}
    histories.observe([Batch(other[0], 1, START, True, many)])
    assert histories.get(RUN) is None  # forgotten for room
    pushed(histories, after)
    assert histories.get(RUN).partial and histories.get(RUN).steps[0] == 200
    made = monitor.collect()
    collapse = [b for b in made if dict(b.labels)["detector"] == "reward_collapse"]
    assert any(b.metrics["rl_insight_health_finding"] == 1.0 for b in collapse), collapse[:3]
    expected = [f for f in offline(run) if f.detector == "reward_collapse"]
    assert expected and [f.detector for f in monitor.findings(*RUN) if f.detector == "reward_collapse"] == [
        "reward_collapse"
    ]


def test_runs_asked_for_and_never_logged_push_out_no_logged_runs_record_and_no_step_goes_out_twice():
    """Anyone may ask the explorer for any run name: 10,001 names never logged (more than the
    records kept, MAX_RECORDS) make no record, so the logged run keeps what its walk emitted and
    its later steps' series are the only ones made, none of its earlier steps again."""
    run = planned_drop()
    steps = steps_of(run)
    histories, monitor = watched()
    pushed(histories, steps[:100])
    first = monitor.collect()
    for i in range(live.MAX_RECORDS + 1):
        assert monitor.run_findings(("p", f"never-logged-{i}"), ()) == []
    pushed(histories, steps[100:110])
    made = monitor.collect()
    assert first and made and {at for _, at in emitted(made)} == {at for _, at, _ in steps[100:110]}


def test_a_reset_mark_removed_stops_counting_for_the_alerts_at_once():
    """The mark store wired to the live detectors as the server wires them (compose.py): a planned
    change marked with a reset keeps the alerts quiet; the mark removed (``rl-insight runs unmark``),
    the alerts' walk finds the drop again without anyone opening the explorer (the removed reset had
    lingered in the alerts' walk until the explorer asked for the run)."""
    import json

    from verl_rl_insight.server.stores.marks import MarkStore

    run = planned_drop()
    histories, monitor = watched()
    marks = MarkStore(on_resets=monitor.set_resets)
    pushed(histories, steps_of(run))
    body = {"project": RUN[0], "experiment_name": RUN[1], "step": 200, "text": "lr change", "reset_baseline": True}
    marks.add(json.dumps(body).encode())
    quiet = [f for f in monitor.findings(*RUN) if f.severity != "info"]
    assert quiet == []  # the positive control: with the reset the planned change is no finding
    marks.remove(*RUN, 200)
    found = [f.as_json() for f in monitor.findings(*RUN)]
    assert found == [f.as_json() for f in offline(run)] and any(f["severity"] != "info" for f in found)
    marks.add(json.dumps(body).encode())
    marks.forget(*RUN)  # `rl-insight runs delete`: its marks go, and their resets with them
    assert [f.as_json() for f in monitor.findings(*RUN)] == found
