"""Promises the independent review found broken, each with the test that failed before the fix:
a batch stamped in the future, files other users could read, a damaged state file that stopped the
server, a span store without a bound on runs, and a stranger's DELETE."""

import json
import os
import stat
import time

import pytest

from tests.helpers import free_port, http, push, start_hub_process, stop_group, wait_for
from tests.server.stores.test_timeline_store import otlp

TOKEN = "promises-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def hub(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN)
    yield f"http://127.0.0.1:{port}", tmp_path / "data"
    stop_group(process)


def batch(step, at, value=1.0):
    return {"project": "p", "experiment_name": "clock", "step": step, "time": at, "metrics": {"loss": value}}


def test_a_batch_stamped_in_the_future_is_refused_naming_the_skew_and_the_stream_goes_on(hub):
    url, _ = hub
    now = time.time()
    status, body = push(url, {"batches": [batch(1, now)]}, token=TOKEN)
    assert status == 200, body
    status, body = push(url, {"batches": [batch(2, now + 10 * 86400, 99.0)]}, token=TOKEN)  # ten days ahead
    error = json.loads(body)["error"]
    assert status == 400 and error.startswith("batches[0].time:") and "max_future_s" in error and "clock" in error
    status, body = push(url, {"batches": [batch(3, now + 60, 3.0)]}, token=TOKEN)  # a skew within 300 s
    assert status == 200, body
    status, body = push(url, {"batches": [batch(4, now + 70, 4.0)]}, token=TOKEN)
    assert status == 200
    text = http("GET", url + "/metrics")[1].decode()
    live = [line for line in text.splitlines() if line.startswith("loss{")][-1]
    assert live.endswith(" 4.0")  # the stream moved on: step 4 is the live value, nothing froze it
    streams = json.loads(http("GET", url + "/api/v1/streams")[1])["streams"]
    trainers = [s for s in streams if s["labels"] == {"project": "p", "experiment_name": "clock"}]
    assert [s["step"] for s in trainers] == [4]  # the trainer's stream (the health monitor's have labels of their own)


def test_every_file_the_server_writes_is_its_users_only(hub):
    url, data = hub
    assert push(url, {"batches": [batch(1, time.time())]}, token=TOKEN)[0] == 200
    body = otlp([("step", "trainer", 1, 10**18, 10**18 + 10**9, 1, 0)], experiment="modes").SerializeToString()
    headers = {**AUTH, "Content-Type": "application/x-protobuf"}
    assert http("POST", url + "/v1/traces", body, headers)[0] == 200
    target = {"address": "127.0.0.1:9", "job": "node", "ttl_s": 0}
    assert http("POST", url + "/api/v1/targets", json.dumps(target).encode(), AUTH)[0] == 200
    profile = {"project": "p", "experiment_name": "clock", "first_step": 9}
    assert http("POST", url + "/api/v1/profiles", json.dumps(profile).encode(), AUTH)[0] == 200
    wait_for(lambda: (data / "targets.json").exists() and (data / "spans" / "runs.json").exists(), 10)
    seen = []
    for folder, _dirs, files in os.walk(data):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
        for name in files:
            path = os.path.join(folder, name)
            seen.append(os.path.relpath(path, data))
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert {"targets.json", "profiles.json", "spans/runs.json"} <= set(seen), seen
    assert any(name.startswith("spans/") and name.endswith(".jsonl") for name in seen), seen


def test_a_damaged_targets_file_is_set_aside_and_the_server_starts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "targets.json").write_text('[{"address": "no port", "job": ')
    port = free_port()
    process = start_hub_process(port, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        assert http("GET", url + "/-/ready")[0] == 200  # start_hub_process waited for it
        aside = list(data.glob("targets.json.damaged-*"))
        assert len(aside) == 1 and aside[0].read_text().startswith('[{"address": "no port"')
        assert json.loads(http("GET", url + "/api/v1/targets")[1])["targets"] == []  # trainers register again
    finally:
        stop_group(process)


def test_the_span_store_bounds_its_runs_and_saves_its_index_at_most_once_a_second(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from verl_rl_insight.server.stores import spans

    clock = [1000.0]  # the store's monotonic clock, driven here: a request every millisecond
    monkeypatch.setattr(spans, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    saves = []
    real = spans.write_atomically
    monkeypatch.setattr(
        spans, "write_atomically", lambda path, text, **kw: (saves.append(clock[0]), real(path, text, **kw))
    )
    store = spans.SpanStore(tmp_path / "spans", max_runs=500)  # the default: save_every_s=1
    for i in range(3000):  # 3,000 runs named in 3,000 requests, over 3 s
        store.add(otlp([("step", "trainer", 1, 10**18, 10**18 + 1, 1, 0)], experiment=f"run-{i}"))
        clock[0] += 0.001
    # the index is not rewritten per request: once in each second the requests went on, never sooner
    assert 3 <= len(saves) <= 4, saves
    assert all(later - earlier >= 1.0 for earlier, later in zip(saves, saves[1:])), saves
    assert len(store.runs()) == 500 and store.stats["evicted_runs"] == 2500
    assert len(list((tmp_path / "spans").glob("*.jsonl"))) == 500
    newest, total = store.page(100, 0)
    assert total == 500 and len(newest) == 100 and newest[0]["experiment_name"] == "run-2999"
    assert store.page(100, 450)[0][-1]["experiment_name"] == "run-2500"  # the oldest kept
    store.close()
    again = spans.SpanStore(tmp_path / "spans")
    assert len(again.runs()) == 500 and again.read("p", "run-2999") is not None


def test_the_run_list_pages(hub):
    url, _ = hub
    headers = {**AUTH, "Content-Type": "application/x-protobuf"}
    for i in range(5):
        body = otlp([("step", "trainer", 1, 10**18, 10**18 + 1, 1, 0)], experiment=f"page-{i}").SerializeToString()
        assert http("POST", url + "/v1/traces", body, headers)[0] == 200
    first = json.loads(http("GET", url + "/api/v1/spans/runs?limit=2")[1])
    assert [r["experiment_name"] for r in first["runs"]] == ["page-4", "page-3"]
    assert first["total"] == 5 and first["next_offset"] == 2
    last = json.loads(http("GET", url + "/api/v1/spans/runs?limit=2&offset=4")[1])
    assert [r["experiment_name"] for r in last["runs"]] == ["page-0"] and last["next_offset"] is None
    status, body = http("GET", url + "/api/v1/spans/runs?limit=0")
    assert status == 400 and "limit" in json.loads(body)["error"]


def test_a_strangers_delete_of_a_run_is_refused_and_deletes_nothing(hub):
    url, _ = hub
    assert push(url, {"batches": [batch(1, time.time())]}, token=TOKEN)[0] == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, _ = http("DELETE", url + "/api/v1/runs?project=p&experiment_name=clock", headers=headers)
        assert status == 401
    streams = json.loads(http("GET", url + "/api/v1/streams")[1])["streams"]
    assert any(s["labels"].get("experiment_name") == "clock" for s in streams)
    status, _ = http("DELETE", url + "/api/v1/runs?project=p&experiment_name=clock", headers=AUTH)
    assert status == 200  # the positive control: with the token it goes
    streams = json.loads(http("GET", url + "/api/v1/streams")[1])["streams"]
    assert not any(s["labels"].get("experiment_name") == "clock" for s in streams)
