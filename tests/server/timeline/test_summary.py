"""`rl-insight timeline summary`: spans of a known shape sent through the real OTLP path (the
server keeps them when no Tempo runs), read back by the command; the figures it reports match the
shape to within 5 %."""

import json

import pytest

from tests.helpers import free_port, http, rl_insight, start_hub_process, stop_group, wait_for
from tests.server.stores.test_timeline_store import PROTOBUF, TOKEN, otlp

S = 1_000_000_000
T0 = 1_700_000_000 * S


def sync_run():
    """Steps of 10 s: gen for the first 6 s, four replicas with one generate call each; at step 3
    replica_2's call takes five times as long as the others'; then update_actor for 3 s."""
    spans, span_id = [], 1
    for step in (1, 2, 3):
        start = T0 + (step - 1) * 10 * S
        spans.append(("step", "trainer", step, start, start + 10 * S, span_id, 0))
        spans.append(("gen", "trainer", step, start, start + 6 * S, span_id + 1, 0))
        for replica in range(4):
            seconds = 5 if (step == 3 and replica == 2) else 1
            spans.append(
                ("vllm_generate", f"replica_{replica}", None, start, start + seconds * S, span_id + 2 + replica, 0)
            )
        spans.append(("update_actor", "trainer", step, start + 6 * S, start + 9 * S, span_id + 6, 0))
        span_id += 7
    return spans


def async_run():
    """Steps of 10 s in which the trainer works 6 s (it waits 40 % for rollouts) while the
    rollouter generates the whole step."""
    spans = []
    for step in (1, 2):
        start = T0 + (step - 1) * 10 * S
        base = step * 10
        spans.append(("step", "trainer", step, start, start + 10 * S, base, 0))
        spans.append(("update_actor", "trainer", step, start + 4 * S, start + 10 * S, base + 1, 0))
        spans.append(("generate_sequences", "rollouter", step, start, start + 10 * S, base + 2, 0))
    return spans


@pytest.fixture
def hub(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN)
    url = f"http://127.0.0.1:{port}"
    for experiment, spans in (("sync", sync_run()), ("async", async_run())):
        status, body = http(
            "POST", url + "/v1/traces", otlp(spans, experiment=experiment).SerializeToString(), PROTOBUF
        )
        assert status == 200, body
    yield url
    stop_group(process)


def summary(hub, experiment, *more):
    result = rl_insight(
        "timeline",
        "summary",
        "--project",
        "p",
        "--experiment",
        experiment,
        "--server",
        hub,
        *more,
        env={"RL_INSIGHT_TOKEN": TOKEN},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_long_tail_and_the_slowest_replica_of_each_step(hub):
    rows = {r["step"]: r for r in json.loads(summary(hub, "sync", "--json"))["steps"]}
    assert sorted(rows) == [1, 2, 3]
    assert rows[3]["long_tail_ratio"] == pytest.approx(5.0, rel=0.05)
    assert rows[3]["slowest_replica"] == "replica_2"
    assert rows[3]["tail_wait_s"] == pytest.approx(4.0, rel=0.05)
    assert rows[1]["long_tail_ratio"] == pytest.approx(1.0, rel=0.05)
    assert rows[2]["phases"] == pytest.approx({"gen": 6.0, "update_actor": 3.0}, rel=0.05)
    assert rows[2]["idle"]["trainer"] == pytest.approx(0.1, abs=0.05)  # 1 s of the 10 outside any phase
    assert rows[3]["idle"]["replica_2"] == pytest.approx(0.5, abs=0.05)  # busy 5 s of 10
    assert rows[3]["idle"]["replica_0"] == pytest.approx(0.9, abs=0.05)


def test_the_idle_share_of_an_async_trainer(hub):
    rows = json.loads(summary(hub, "async", "--json"))["steps"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["idle"]["trainer"] == pytest.approx(0.4, abs=0.05)
        assert row["idle"]["rollouter"] == pytest.approx(0.0, abs=0.05)


def test_the_table_a_person_reads_and_the_step_range(hub):
    text = summary(hub, "sync", "--steps", "3:3")
    lines = text.strip().splitlines()
    assert lines[0].split()[:3] == ["step", "seconds", "phases"]
    assert len(lines) == 3 and lines[1].startswith("3 ")
    assert lines[2] == "the server keeps steps 1-3 of this run (64 MiB a run; nothing evicted)"  # its bound
    assert "x5.0, +4.0s" in lines[1] and "replica_2" in lines[1] and "gen 6.0" in lines[1]
    missing = rl_insight(
        "timeline",
        "summary",
        "--project",
        "p",
        "--experiment",
        "nope",
        "--server",
        hub,
        env={"RL_INSIGHT_TOKEN": TOKEN},
    )
    assert missing.returncode == 1 and "no spans of p/nope" in missing.stderr and "Traceback" not in missing.stderr


def shaped_run(base_ns, steps, slow_steps, idle_trainer=False):
    """Steps of 10 s from ``base_ns``: four replicas with one generate call each (replica_2's five
    times longer in ``slow_steps``), or, with ``idle_trainer``, an async step in which the trainer
    works 6 s of 10 while the rollouter generates throughout."""
    spans, span_id = [], 1
    for step in range(1, steps + 1):
        start = base_ns + (step - 1) * 10 * S
        spans.append(("step", "trainer", step, start, start + 10 * S, span_id, 0))
        if idle_trainer:
            spans.append(("update_actor", "trainer", step, start + 4 * S, start + 10 * S, span_id + 1, 0))
            spans.append(("generate_sequences", "rollouter", step, start, start + 10 * S, span_id + 2, 0))
        else:
            spans.append(("gen", "trainer", step, start, start + 6 * S, span_id + 1, 0))
            for replica in range(4):
                seconds = 5 if (step in slow_steps and replica == 2) else 1
                spans.append(
                    ("vllm_generate", f"replica_{replica}", None, start, start + seconds * S, span_id + 2 + replica, 0)
                )
            spans.append(("update_actor", "trainer", step, start + 6 * S, start + 9 * S, span_id + 6, 0))
        span_id += 7
    return spans


def test_the_figures_as_prometheus_series_and_the_alerts_they_raise(tmp_path):
    """The same shapes through the real OTLP path into the server, whose per-step figures a real
    Prometheus scrapes, with the shipped rules loaded (short windows): each figure within 5 %,
    stamped at its step's end; the alerts fire for the runs that have the problem and only for them."""
    import time

    from tests.helpers import Prometheus
    from verl_rl_insight.server.managed.alert_rules import render
    from verl_rl_insight.server.settings.alerts import AlertSettings

    port = free_port()
    process = start_hub_process(port, tmp_path, timeline_settle_s=1)  # loopback, no token: Prometheus scrapes it
    rules = tmp_path / "rules.yml"
    rules.write_text(render(AlertSettings(timeline_window="10m", timeline_min_steps=3)))
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"], rule_files=[rules])
        base = (int(time.time()) - 120) * S
        runs = {
            "one-slow-step": shaped_run(base, 6, slow_steps={3}),
            "slow-replica": shaped_run(base, 6, slow_steps={1, 2, 3, 4, 5, 6}),
            "idle-trainer": shaped_run(base, 6, slow_steps=set(), idle_trainer=True),
        }
        for experiment, spans in runs.items():
            body = otlp(spans, experiment=experiment).SerializeToString()
            status, text = http(
                "POST", f"http://127.0.0.1:{port}/v1/traces", body, {"Content-Type": PROTOBUF["Content-Type"]}
            )
            assert status == 200, text

        def samples(name, experiment, **labels):
            selector = ",".join([f'experiment_name="{experiment}"'] + [f'{k}="{v}"' for k, v in labels.items()])
            found = prometheus.raw_samples(f"{name}{{{selector}}}", 600)
            return [pair for values in found.values() for pair in values]

        def final(name, experiment, **labels):
            values = sorted(samples(name, experiment, **labels), key=lambda pair: pair[1])
            return values[-1][0] if values else None

        wait_for(
            lambda: final("rl_insight_timeline_steps_total", "one-slow-step") == 6,
            30,
            what="six steps counted (the last one after the settle time)",
        )
        ratios = [v for v, _ in samples("rl_insight_timeline_long_tail_ratio", "one-slow-step")]
        assert max(ratios) == pytest.approx(5.0, rel=0.05) and min(ratios) == pytest.approx(1.0, rel=0.05)
        assert final("rl_insight_timeline_tail_wait_seconds_total", "one-slow-step") == pytest.approx(4.0, rel=0.05)
        assert final("rl_insight_timeline_step_seconds_total", "one-slow-step") == pytest.approx(60.0, rel=0.05)
        slowest = "rl_insight_timeline_replica_slowest_steps_total"
        assert (
            final(slowest, "one-slow-step", replica="replica_2") == 1
        )  # step 3 only: equal finishes hold nothing back
        assert final(slowest, "one-slow-step", replica="replica_0") == 0
        assert final(slowest, "slow-replica", replica="replica_2") == 6
        wait_for(lambda: final("rl_insight_timeline_steps_total", "idle-trainer") == 6, 30, what="the async run")
        idle = final("rl_insight_timeline_idle_seconds_total", "idle-trainer", lane="trainer")
        assert idle / final("rl_insight_timeline_step_seconds_total", "idle-trainer") == pytest.approx(0.4, abs=0.02)
        ratios = [v for v, _ in samples("rl_insight_timeline_idle_ratio", "idle-trainer", lane="trainer")]
        assert ratios and all(v == pytest.approx(0.4, abs=0.02) for v in ratios)

        def firing():
            return {
                (a["labels"]["alertname"], a["labels"]["experiment_name"])
                for a in prometheus.alerts()
                if a["labels"]["alertname"].startswith(("RLInsightRollout", "RLInsightTrainerIdle", "RLInsightSlow"))
            }

        expected = {
            ("RLInsightRolloutLongTail", "slow-replica"),
            ("RLInsightSlowReplica", "slow-replica"),
            ("RLInsightTrainerIdle", "idle-trainer"),
        }
        wait_for(lambda: firing() >= expected, 30, what="the timeline alerts")
        assert firing() == expected  # one slow step among six raises nothing
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)


def test_each_step_made_once_when_settled_and_within_bounds():
    """LiveFigures alone (a clock of its own): a step waits for the next step or the settle time,
    is made once however often its spans come again, every name it pushes is one the dashboards'
    catalogue knows, and runs beyond the bound are forgotten oldest first."""
    from verl_rl_insight.contract.naming import TIMELINE_SERIES
    from verl_rl_insight.server.stores.spans import records
    from verl_rl_insight.server.timeline.live import LiveFigures

    now = [1000.0]
    made = []  # what the hub reads of it at scrapes

    def steps():  # each step's main batch (no lane, no replica)
        made.extend(live.collect())
        return [b for b in made if len(b.labels) == 3]

    live = LiveFigures(settle_s=10, max_runs=2, clock=lambda: now[0])
    spans = list(records(otlp(sync_run(), experiment="a")))
    live.observe(spans[:14])  # steps 1 and 2 and their calls
    assert [b.time for b in steps()] == [(T0 + 10 * S) / S]  # step 1: step 2 has come
    live.tick()
    assert len(steps()) == 1  # step 2 waits for its replicas (or the settle time)
    now[0] += 10
    live.tick()
    assert len(steps()) == 2
    live.observe(spans)  # everything again, and step 3
    now[0] += 10
    live.tick()
    assert [b.metrics["rl_insight_timeline_steps_total"] for b in steps()] == [1, 2, 3]  # 1 and 2 not made twice
    names = {name for batch in made for name in batch.metrics}
    assert names <= set(TIMELINE_SERIES) and "rl_insight_timeline_long_tail_ratio" in names
    for experiment in ("b", "c"):
        live.observe(records(otlp(sync_run(), experiment=experiment)))
    assert list(live._runs) == [("p", "b"), ("p", "c")]


def test_spans_waiting_for_their_step_are_bounded_in_all_whatever_a_client_sends():
    """Spans without any step span (nothing ever settles them) from many runs: the figures keep at
    most max_total_spans, count the rest, and a real run that comes afterwards still gets its
    figures whole (its replica calls counted)."""
    from verl_rl_insight.server.stores.spans import records
    from verl_rl_insight.server.timeline.live import LiveFigures

    live = LiveFigures(settle_s=0, max_runs=8, max_spans=300, max_total_spans=1000)
    calls = [("vllm_generate", "replica_0", None, T0 + i * S, T0 + i * S + 1, 1 + i % 200, 0) for i in range(500)]
    for run in range(20):  # 20 runs x 500 spans, no step span at all
        live.observe(records(otlp(calls, experiment=f"flood-{run}")))
    assert live._total <= 1000 and sum(len(r.spans) for r in live._runs.values()) == live._total
    assert live.stats["dropped"] >= 20 * 500 - 1000
    live.observe(records(otlp(sync_run(), experiment="real")))
    live.tick()
    made = [b for b in live.collect() if ("experiment_name", "real") in b.labels and len(b.labels) == 3]
    assert [b.metrics["rl_insight_timeline_generate_calls"] for b in made] == [4, 4, 4]


def test_spans_waiting_are_booked_under_the_memory_bound_and_never_crowd_out_the_trainers_pushes():
    """Spans of the largest kind the span reader lets through (32 attributes of 256 characters, a
    prompt and a response of 4,096) flood the figures of a server whose hub has a 16 MiB bound:
    what they hold is booked (never less than Python allocated for them: tracemalloc), stays
    within the quarter of the bound the hub lends, the rest is dropped and counted, and a trainer's
    push still fits afterwards; figures made give their bytes back."""
    import gc
    import tracemalloc

    from verl_rl_insight.server.metrics.hub import Bound, MetricHub
    from verl_rl_insight.server.settings.memory import MemoryShares
    from verl_rl_insight.server.stores.otlp import RunSpan
    from verl_rl_insight.server.timeline.live import LiveFigures

    shares = MemoryShares(16 * 2**20)
    bound = Bound(shares.hub, 500_000)  # wired as the server wires them (compose.py)
    live = LiveFigures(settle_s=0, book=lambda n: bound.book_other("timeline", n))
    hub = MetricHub(bound=bound, derived=(live,))

    def big(run, i):
        attributes = {f"attribute_{k:02d}": f"{i:08d}" + "x" * 248 for k in range(30)}
        attributes.update({"state_lane_id": "replica_0", "state_name": "vllm_generate"})
        attributes.update({"sample.prompt": f"{i}" + "p" * 4090, "sample.response": f"{i}" + "r" * 4090})
        start = T0 + i * S
        return RunSpan(
            "p",
            f"flood-{run}",
            {
                "trace_id": f"{i:032x}",
                "span_id": f"{i:016x}",
                "parent_span_id": "",
                "name": "vllm_generate",
                "start_ns": start,
                "end_ns": start + S,
                "attributes": attributes,
            },
        )

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for run in range(4):
        live.observe([big(run, i) for i in range(400)])
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    booked = hub.summary()["memory_booked_by_others"]["timeline"]
    assert live._total > 100  # the positive control: spans are held
    assert held <= booked <= 2 * held, (held, booked)
    assert booked <= shares.beside_hub
    assert live.stats["dropped_memory"] > 0 and live._total < 1600
    # the trainer's steps still fit
    push = {"project": "p", "experiment_name": "trainer", "step": 1, "time": T0 / S, "metrics": {"m": 1.0}}
    assert hub.push({"batches": [push]})["accepted"] == 1
    # a run that settles gives its spans' bytes back
    live.observe(records_of_sync_run())
    live.tick()
    for key in list(live._runs):
        live._forget(key)
    assert hub.summary()["memory_booked_by_others"]["timeline"] == 0


def records_of_sync_run():
    from verl_rl_insight.server.stores.spans import records

    return list(records(otlp(sync_run(), experiment="real")))
