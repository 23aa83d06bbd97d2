"""The explorer's step table (server/history/histories.py), fed the batches the hub accepts: a real
verl run's logged steps (tests/data/real_runs). A step's second batch (verl logs a validation in a
call of its own) adds its keys, a copy sent again changes nothing, a late step takes its place, a
logged NaN stays apart from "not logged", and memory is bounded per run and in all."""

import json
import math

from tests.server.stores.test_marks import REAL_RUN, wired
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.explorer.findings import shown
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import Histories

ROWS = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
SCORE = detectors.series_name("critic/score/mean")


def batch(step, metrics, experiment="e", at=None):
    labels = (("experiment_name", experiment), ("project", "p"))
    return Batch(labels=labels, step=step, time=1e9 + 10 * step if at is None else at, timed=True, metrics=metrics)


def logged(step):
    return {detectors.series_name(k): float(v) for k, v in ROWS[step]["data"].items() if wired(k, v)}


def test_a_steps_second_batch_adds_its_keys_and_a_copy_changes_nothing():
    histories = Histories()
    train = {k: v for k, v in logged(5).items() if "val_core" not in k}
    validation = {k: v for k, v in logged(5).items() if "val_core" in k}
    assert train and validation
    histories.observe([batch(4, logged(4)), batch(5, train)])
    histories.observe([batch(5, validation, at=2e9)])
    history = histories.get(("p", "e"))
    assert history.steps == [4, 5] and history.times.tolist() == [1e9 + 40, 1e9 + 50]  # the first batch's time
    assert all(history.value(k, 1) == v for k, v in logged(5).items())
    version = history.version
    histories.observe([batch(5, {SCORE: -1.0})])  # sent again (another value): the first stays
    assert history.value(SCORE, 1) == logged(5)[SCORE] and history.version == version


def test_a_late_step_takes_its_place_and_a_logged_nan_is_not_a_missing_value():
    histories = Histories()
    histories.observe([batch(1, logged(1)), batch(3, logged(3))])
    histories.observe([batch(2, {**logged(2), SCORE: math.nan})])
    history = histories.get(("p", "e"))
    assert history.steps == [1, 2, 3]
    assert math.isnan(history.value(SCORE, 1)) and history.series(SCORE)[0] == (1, logged(1)[SCORE])
    assert history.value("rl_insight_monitor_never_logged", 1) is None
    assert [s for s, _ in history.series(SCORE)] == [1, 2, 3]


def test_memory_is_bounded_per_run_and_in_all():
    per_step = len(logged(10))
    one = Histories()
    one.observe([batch(step, logged(step), "one") for step in range(1, 21)])
    histories = Histories(max_bytes=int(2.5 * one.get(("p", "one")).nbytes()), max_cells=20 * per_step)
    histories.observe([batch(step, logged(step), "a") for step in range(1, 41)])
    a = histories.get(("p", "a"))
    assert len(a.steps) * len(a.columns) <= 20 * per_step and a.steps[-1] == 40  # the oldest steps went
    assert histories.stats["dropped_steps"] > 0
    for experiment in ("b", "c", "d"):
        histories.observe([batch(step, logged(step), experiment) for step in range(1, 21)])
    assert histories.runs()[-1] == ("p", "d") and len(histories.runs()) <= 3
    assert sum(h.nbytes() for h in map(histories.get, histories.runs())) <= int(2.5 * one.get(("p", "one")).nbytes())
    assert histories.forgotten(("p", "a"))  # forgotten for room: read back from Prometheus when asked


def shown_findings(monitor, run, resets):
    """The explorer's findings of the run (explorer/runs.py findings_of): the server's one walk's."""
    return [shown(f) for f in monitor.run_findings(run, resets)]


def _walked_again(history, resets=()):
    """What diagnose says of the whole history, walked from its first step (findings.walk)."""
    from verl_rl_insight.server.explorer import findings

    return findings.walk(findings.snapshot(history), detectors.DEFAULTS, resets)


def test_findings_fed_step_by_step_equal_diagnose_of_the_whole_run_through_late_steps_second_batches_and_marks():
    """The server keeps one diagnose walk per run (health/live.py, the walk the alerts read too) and
    feeds it only the steps it has not had (a page of a 2,000-step run does not walk 2,000 steps every
    few seconds); what the explorer shows must stay what diagnose says of the whole run: a real run's
    steps one by one, a NaN step (a finding), a late step, a step's second batch, a mark that resets
    the baselines."""
    histories = Histories()
    cache = HealthMonitor(histories=histories)
    run = ("p", "e")
    nan_step = {**logged(30), detectors.series_name("actor/pg_loss"): math.nan}
    checked = 0
    for step in range(1, 61):
        if step == 20:
            continue  # comes late, after step 40
        values = nan_step if step == 30 else logged(step)
        train = {k: v for k, v in values.items() if "val_core" not in k}
        if step == 35:
            train.pop(detectors.series_name("actor/pg_loss"))
        histories.observe([batch(step, train)])
        if step == 40:
            histories.observe([batch(20, logged(20))])
        if step == 38:  # an older step's second batch brings a key of its own: a NaN loss at step 35
            histories.observe([batch(35, {detectors.series_name("actor/pg_loss"): math.nan})])
        if step % 7 == 0:
            validation = {k: v for k, v in values.items() if "val_core" in k}
            histories.observe([batch(step, validation)])  # verl's validation call, for the same step
        resets = (45,) if step >= 50 else ()
        if step % 3 == 0 or step in (20, 40, 41, 50):
            history = histories.get(run)
            with histories.lock:
                expected = [f for f in _walked_again(history, resets) if f["detector"] != "stall"]
            said = [f for f in shown_findings(cache, run, resets) if f["detector"] != "stall"]
            assert said == expected, f"at step {step}"
            checked += 1
    assert checked > 15 and {30, 35} <= {s for f in said for s in range(f["first_step"], f["last_step"] + 1)}, said


def test_a_run_at_its_cap_is_not_walked_again_from_its_first_kept_step_at_each_new_step(monkeypatch):
    """A run at its cap drops its oldest step with every new one; its walk keeps going (it had the
    dropped steps), so a page of a long run costs the new steps, not the whole kept history each
    time; and what it says is still what diagnose says of the run with the dropped steps in it."""
    from verl_rl_insight.server.explorer import findings

    fed = []
    add = detectors.RunHealth.add
    monkeypatch.setattr(detectors.RunHealth, "add", lambda self, *a, **k: (fed.append(a[0]), add(self, *a, **k))[1])
    per_step = len(logged(10))
    histories, whole = Histories(max_cells=30 * per_step), Histories()
    cache = HealthMonitor(histories=histories)
    run = ("p", "e")
    nan_step = {**logged(70), detectors.series_name("actor/pg_loss"): math.nan}
    for step in range(1, 121):
        values = nan_step if step == 70 else logged(step)
        histories.observe([batch(step, values)])
        whole.observe([batch(step, values)])
        said = shown_findings(cache, run, ())
    history = histories.get(run)
    assert history.steps[0] > 80 and histories.stats["dropped_steps"] > 80  # at its cap since step ~30
    assert len(fed) < 2 * 120, f"{len(fed)} steps walked for 120 new ones: the kept history walked again"
    with whole.lock:
        expected = [f for f in findings.walk(findings.snapshot(whole.get(run)), detectors.DEFAULTS, ()) if
                    f["detector"] != "stall"]  # fmt: skip
    assert [f for f in said if f["detector"] != "stall"] == expected
    assert any(f["first_step"] <= 70 <= f["last_step"] for f in said), said  # the NaN step, dropped since


def test_the_run_page_has_a_validation_panel_per_data_source_of_a_real_two_source_run():
    """diqiu's GPG run validates on GSM8K and MATH (val-core/<source>/reward/mean@1). The hub keeps the
    series names (no slashes); the run page still draws one validation panel per data source."""
    from tests.server.stores.test_marks import REAL_RUN
    from verl_rl_insight.server.explorer.keys import key_of, panels

    two = REAL_RUN.parent / "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp.jsonl"
    logged = {k for line in two.read_text().splitlines() for k in json.loads(line)["data"] if k.startswith("val-core/")}
    assert len({k.split("/")[1] for k in logged}) == 2, logged  # two data sources, as verl logs them
    shown = [key_of(detectors.series_name(k)) for k in sorted(logged)]
    titles = [p["title"] for p in panels(shown) if p["title"].startswith("Validation")]
    assert len(titles) == 2 and all(len(p["keys"]) >= 1 for p in panels(shown)), (titles, shown)


def test_a_push_never_waits_for_the_explorers_findings_walk(monkeypatch):
    """The hub's listener (Histories.observe, on the push path) takes the histories' lock; the
    detectors' walk the explorer's findings come from (up to a whole run's, after an older step
    changed) must run outside it. The walk is held still here: the next step's push must get
    through meanwhile."""
    import threading

    from verl_rl_insight.server.health.walk import RunWalk

    histories = Histories()
    histories.observe([batch(step, logged(step)) for step in range(1, 30)])
    walking, release = threading.Event(), threading.Event()
    real = RunWalk.feed

    def held(*args):
        walking.set()
        assert release.wait(10), "the test never let the walk go"
        return real(*args)

    monkeypatch.setattr(RunWalk, "feed", held)
    walker = threading.Thread(target=HealthMonitor(histories=histories).run_findings, args=(("p", "e"), ()))
    walker.start()
    try:
        assert walking.wait(10), "the walk did not start"
        pusher = threading.Thread(target=histories.observe, args=([batch(30, logged(30))],))
        pusher.start()
        pusher.join(5)
        pushed = not pusher.is_alive()
    finally:
        release.set()
        walker.join(10)
    assert pushed, "a push waited for the detectors' walk"
    assert histories.get(("p", "e")).steps[-1] == 30


def test_steps_appended_in_order_hold_what_the_same_steps_placed_one_by_one_hold():
    """A new newest step's values go to their columns by a plan made once per names tuple; steps
    that come before the newest are placed value by value. Both ways must hold the same table: a key
    logged from a later step on (NaN before it), a key a step leaves out, a logged NaN and infinity,
    the run's finished flag."""
    steps = []
    for step in range(1, 31):
        values = logged(step)
        if step % 7 == 0:
            values.pop(SCORE)  # a step that does not log it: NaN there, not a value carried over
        if step == 11:
            values[SCORE] = math.inf
        if step >= 20:
            values["rl_insight_monitor_val_core_late_key"] = float(step)  # a key from a later step on
        if step == 30:
            values[detectors.series_name("critic/rewards/mean")] = math.nan
            values["rl_insight_run_finished"] = 1.0
        steps.append(batch(step, values))
    in_order, one_by_one = Histories(), Histories()
    in_order.observe(steps)
    one_by_one.observe(steps[::-1])  # each step before the newest: placed in its place
    a, b = in_order.get(("p", "e")), one_by_one.get(("p", "e"))
    assert a.steps == b.steps == list(range(1, 31)) and a.times.tolist() == b.times.tolist()
    assert set(a.columns) == set(b.columns) and a.nonfinite == b.nonfinite and a.finished == b.finished == 1.0
    for name in a.columns:
        assert a.series(name) == b.series(name), name
    assert a.value(SCORE, 6) is None and a.value(SCORE, 10) == math.inf  # step 7 left it out; 11 logged inf
    late = "rl_insight_monitor_val_core_late_key"
    assert a.value(late, 18) is None and a.latest(late) == 30.0


def test_a_push_queues_its_steps_booked_under_the_hubs_bound_until_the_walk_puts_them_in_their_columns():
    """A push only queues its steps (the hub's own tuples): the queue is booked under the hub's memory
    bound, the first read sees every step, and the detectors' walk (``settle``, every second) gives the
    booking back. A push that finds no room (the bound refuses, or the queue is at its own bound) puts
    the queue in its columns itself, so nothing waits unbooked."""
    from verl_rl_insight.server.metrics.hub import Bound

    bound = Bound(64 * 2**20, 10_000)
    histories = Histories(book=lambda n: bound.book_other("histories", n))
    histories.observe([batch(step, logged(step)) for step in range(1, 11)])
    queued = bound.memory.others.get("histories", 0)
    assert queued >= 32 * sum(len(logged(s)) for s in range(1, 11))  # booked at 32 bytes a value
    assert histories.stats.steps == 0  # not put in the columns by the push
    finish = Batch(
        labels=batch(1, {}).labels, step=None, time=2e9, timed=True, metrics={"rl_insight_run_finished": 1.0}
    )
    histories.observe([finish])
    assert histories.get(("p", "e")).steps == list(range(1, 11))  # the first read sees them all, in order
    assert histories.get(("p", "e")).finished == 1.0  # finish()'s batch after its steps, as it came
    histories.settle()
    assert bound.memory.others.get("histories", 0) == 0 and histories.stats.settled_on_push == 0

    refused = Histories(book=lambda n: n < 0)  # the bound has no room: the push settles, books nothing
    refused.observe([batch(1, logged(1))])
    assert refused.stats.steps == 1 and refused.stats.settled_on_push == 1
    small = Histories(max_waiting_bytes=32 * 3 * len(logged(1)))  # room for about three steps waiting
    small.observe([batch(step, logged(step)) for step in range(1, 3)])
    assert small.stats.steps == 0
    small.observe([batch(step, logged(step)) for step in range(3, 6)])
    assert small.stats.steps == 5 and small.stats.settled_on_push == 1
