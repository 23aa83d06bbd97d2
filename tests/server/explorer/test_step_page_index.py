"""Step pages (anyone may ask, no credential) read only the asked step's spans and those beside it
in time, where the span store's index says they lie: rotating the step pages of more runs than the
explorer used to keep parsed (4) reads far less than the runs' span files, each page still draws
its own step, and honest pushes are still taken meanwhile. The real server process, real OTLP."""

import json
from pathlib import Path

from tests.helpers import free_port, http, process_figures, start_hub_process, stop_group
from tests.server.stores.test_timeline_store import PROTOBUF, TOKEN, otlp

RUNS = 8  # more than the 4 runs whose parsed spans the explorer kept
STEPS = 120
SECOND = 1_000_000_000


def step_spans(step):
    """A step: the trainer's step span, two phases, three replica calls (without a step) inside it."""
    t = 10 * SECOND * step
    spans = [("step", "trainer", step, t, t + 8 * SECOND, 1, 0), ("gen", "trainer", step, t, t + 4 * SECOND, 2, 1)]
    spans.append(("update_actor", "trainer", step, t + 4 * SECOND, t + 8 * SECOND, 3, 1))
    spans += [("rollout generate", "replica_0", None, t + i * SECOND, t + (i + 2) * SECOND, 4 + i, 0) for i in range(3)]
    return spans


def read_chars(pid):
    """What the process has read so far (files and sockets), from /proc."""
    return int(dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())["rchar"])


def test_rotating_step_pages_reads_the_steps_asked_not_the_runs_files(tmp_path):
    port = free_port()
    hub = f"http://127.0.0.1:{port}"
    process = start_hub_process(port, tmp_path, token=TOKEN)
    try:
        for run in range(RUNS):
            for first in range(1, STEPS + 1, 20):
                body = otlp([s for step in range(first, first + 20) for s in step_spans(step)], "p", f"run-{run}")
                assert http("POST", hub + "/v1/traces", body.SerializeToString(), PROTOBUF)[0] == 200
        files = sum(f.stat().st_size for f in (tmp_path / "data" / "spans").glob("*.jsonl"))
        per_run = files / RUNS
        before, rss_before = read_chars(process.pid), process_figures(process.pid)[1]
        pages = 0
        for round_ in range(4):
            for run in range(RUNS):
                step = 1 + (run * 37 + round_ * 13) % STEPS
                status, body = http(
                    "GET", f"{hub}/api/v1/explorer/step?project=p&experiment_name=run-{run}&step={step}"
                )
                assert status == 200, body[:300]
                page = json.loads(body)
                lanes = {lane["lane"]: [s["name"] for s in lane["spans"]] for lane in page["lanes"]}
                assert lanes == {"trainer": ["gen", "update_actor"], "replica_0": ["rollout generate"] * 3}, lanes
                assert page["start"] == 10 * step and page["end"] == 10 * step + 8
                pages += 1
            push = {"batches": [{"project": "p", "experiment_name": "honest", "step": round_, "metrics": {"x": 1.0}}]}
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            status, _ = http("POST", hub + "/api/v1/push", json.dumps(push).encode(), headers)
            assert status == 200  # an honest push is taken between the rotations
        read = read_chars(process.pid) - before
        grown = process_figures(process.pid)[1] - rss_before
        print(f"span files {files} B ({per_run:.0f} B a run); {pages} pages read {read} B; RSS grew {grown} B")
        # a page used to read its run's whole files: pages x per_run; now a step's few spans and the request
        assert read < per_run, f"{pages} step pages read {read} bytes; a run's files hold {per_run:.0f}"
        # and no run's parsed spans are held for the next page (4 runs' were: more than all the files)
        assert grown < files, f"{pages} step pages grew the server by {grown} bytes"
    finally:
        stop_group(process)
