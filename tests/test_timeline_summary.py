"""`rl-insight timeline summary`: spans of a known shape sent through the real OTLP path (the
server keeps them when no Tempo runs), read back by the command; the figures it reports match the
shape to within 5 %."""

import json

import pytest

from tests.helpers import free_port, http, rl_insight, start_hub_process, stop_group
from tests.test_timeline_store import PROTOBUF, TOKEN, otlp

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
    assert len(lines) == 2 and lines[1].startswith("3 ")
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
