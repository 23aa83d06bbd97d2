"""The hub's memory bound: its accounting never under-counts what Python allocates, and a real
server process pushed far past the bound stays under it."""

import gc
import json
import time
import tracemalloc

import pytest

from tests.helpers import free_port, http, process_figures, push, start_hub_process, stop_group
from verl_rl_insight.server.metrics.hub import MetricHub


def pushes(streams, series, count, start=1.7e9):
    for p in range(count):
        yield {
            "batches": [
                {
                    "project": "mem",
                    "experiment_name": f"run-{s}",
                    "step": p,
                    "time": start + p,
                    "metrics": {f"rl_insight_monitor_metric_{i}": p + i / 7 for i in range(series)},
                }
                for s in range(streams)
            ]
        }


@pytest.mark.parametrize("streams, series, count", [(100, 300, 10), (500, 10, 20), (1000, 1, 20), (2, 5000, 10)])
def test_the_hub_counts_at_least_the_memory_python_allocates_for_it(streams, series, count):
    tracemalloc.start()
    try:
        hub = MetricHub(memory_limit_bytes=1 << 40, history_s=1e9)
        before = tracemalloc.get_traced_memory()[0]
        for payload in pushes(streams, series, count):
            hub.push(payload)
        hub.live_body()
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    accounted = hub.summary()["memory_bytes"]
    assert accounted >= used, f"accounted {accounted / 2**20:.1f} MiB < allocated {used / 2**20:.1f} MiB"
    assert accounted < 2 * used, f"accounted {accounted / 2**20:.1f} MiB, allocated {used / 2**20:.1f} MiB"


def test_a_server_pushed_far_past_its_memory_bound_stays_under_it(tmp_path):
    port = free_port()
    limit_mb = 24
    hub = start_hub_process(port, tmp_path, memory_limit_mb=limit_mb)
    url = f"http://127.0.0.1:{port}"
    try:
        assert push(url, next(pushes(50, 200, 1)))[0] == 200
        assert http("GET", url + "/metrics?scraper=slow-prometheus")[0] == 200  # a scraper that falls behind
        _, rss_before = process_figures(hub.pid)
        start = time.time() - 3600
        # 50 runs x 200 series x 400 steps: 4 million values, several times the bound
        for payload in pushes(50, 200, 400, start=start):
            status, body = push(url, payload)
            assert status == 200, body[:300]
        figures = json.loads(http("GET", url + "/api/v1/hub")[1])
        _, rss_after = process_figures(hub.pid)
        assert figures["memory_bytes"] <= limit_mb * 2**20
        assert figures["history_evicted_total"] > 0 and figures["history_evicted_unsent_total"] > 0
        assert rss_after - rss_before < limit_mb * 2**20, (
            f"RSS grew by {(rss_after - rss_before) / 2**20:.0f} MiB under a bound of {limit_mb} MiB"
        )
        # the detectors walk the steps from the explorer's history (no copy of their own to find room
        # for): what they hold beside it, the series made, is booked under the bound
        walk = json.loads(http("GET", url + "/api/v1/info")[1])["health_walk"]
        assert walk["steps"] > 0 and 0 <= walk["booked_bytes"] <= limit_mb * 2**20
        # the hub says what it dropped, at /metrics and in the live values every series still has
        status, body = http("GET", url + "/metrics")
        assert b"rl_insight_hub_history_evicted_unsent_total" in body
        assert body.count(b"rl_insight_monitor_metric_7{") == 50
        # more series than the bound can hold at all: refused, naming the setting
        status, body = push(
            url,
            next(pushes(1, 9000, 1))
            | {
                "batches": [
                    {"project": "mem", "experiment_name": f"huge-{i}", "metrics": {f"m{j}": 1.0 for j in range(9000)}}
                    for i in range(8)
                ]
            },
        )
        assert status == 422 and "memory_limit_mb" in json.loads(body)["error"]
    finally:
        stop_group(hub)


def long_label_pushes(push_count, streams=20, start=1.7e9):
    """Pushes of ``streams`` streams, each with 16 extra labels of 256 characters (the longest the
    schema takes) besides project and experiment: every exposition line some 4.5 kB long."""
    for p in range(push_count):
        yield {
            "batches": [
                {
                    "project": "p" * 256,
                    "experiment_name": f"{p:04d}-{s:03d}".ljust(256, "e"),
                    "step": 1,
                    "time": start + p,
                    "labels": {f"l{i}": chr(97 + i) * 256 for i in range(16)},
                    "metrics": {f"rl_insight_monitor_metric_{i}": i / 7 for i in range(10)},
                }
                for s in range(streams)
            ]
        }


def test_long_labels_are_booked_as_held_so_plain_and_named_scrapes_stay_under_the_bound(tmp_path):
    port = free_port()
    limit_mb = 16
    hub = start_hub_process(port, tmp_path, memory_limit_mb=limit_mb)
    url = f"http://127.0.0.1:{port}"
    try:
        _, rss_before = process_figures(hub.pid)
        refused = None
        for payload in long_label_pushes(200):
            status, body = push(url, payload)
            if status != 200:
                refused = (status, body)
                break
        # the positive control; a full bound is a full budget, not bad data: the sender keeps and retries (429)
        assert refused is not None and refused[0] == 429, "the bound was never reached"
        assert b"memory_limit_mb" in refused[1]
        figures = json.loads(http("GET", url + "/api/v1/hub")[1])
        assert figures["memory_bytes"] <= limit_mb * 2**20 and figures["series"] > 100
        for _ in range(3):  # plain scrapes (no token needed), then named ones, each a whole body
            status, body = http("GET", url + "/metrics", timeout=60)
            assert status == 200 and body.count(b"rl_insight_monitor_metric_0{") == figures["streams"]
        for name in ("prometheus-a", "prometheus-b"):
            assert http("GET", url + f"/metrics?scraper={name}", timeout=60)[0] in (200, 429)
        _, rss_after = process_figures(hub.pid)
        # what the process grew by: the booked bytes plus a fixed overhead (allocator slack, the
        # request bodies in flight), whatever the label lengths
        assert rss_after - rss_before < (limit_mb + 24) * 2**20, (
            f"RSS grew by {(rss_after - rss_before) / 2**20:.0f} MiB under a bound of {limit_mb} MiB"
        )
    finally:
        stop_group(hub)
