"""A run the explorer forgot for room is read back from Prometheus whole, each step with its own
value, also when Prometheus had not yet been sent its newest steps at the first read-back (a loaded
hub's scrapes lag its pushes): the explorer reads it again until Prometheus has the newest step the
run had when it was forgotten, instead of keeping a hole in the middle of the run for good. A real
hub process, a real Prometheus scraping it; the explorer's step table in the test (a small memory
bound, fed the same batches the hub takes)."""

import json
import time

from tests.helpers import Prometheus, free_port, http, start_hub_process, stop_group, wait_for
from verl_rl_insight.contract.wire import Batch
from verl_rl_insight.server.explorer.prometheus import PrometheusReader
from verl_rl_insight.server.explorer.sources import Sources

SERIES = "rl_insight_monitor_actor_loss"
AGO_S = 600  # step s logged at (the test's start - AGO_S) + s: taken when the test starts, not at import


def value(run, step):
    return step * 10.0 + run


def batches(run, steps, base):
    return [
        {"project": "p", "experiment_name": f"r{run}", "step": s, "time": base + s, "metrics": {SERIES: value(run, s)}}
        for s in steps
    ]


def told(sources, run, steps, base):
    """The explorer sees the batches the hub took (its listener)."""
    sources.histories.observe(
        [
            Batch(
                labels=(("experiment_name", b["experiment_name"]), ("project", "p")),
                step=b["step"],
                time=b["time"],
                timed=True,
                metrics=b["metrics"],
            )
            for b in batches(run, steps, base)
        ]
    )


def whole(sources, run, last):
    history = sources.history(("p", f"r{run}"))
    if history is None:
        return False
    with sources.histories.lock:
        values = {step: history.value(SERIES, i) for i, step in enumerate(history.steps)}
    return values == {s: value(run, s) for s in range(1, last + 1)}


def test_a_forgotten_run_read_back_while_prometheus_lags_comes_back_whole(tmp_path):
    base = time.time() - AGO_S  # (the suite may reach this test long after it imported the module)
    port = free_port()
    hub = f"http://127.0.0.1:{port}"
    process = start_hub_process(port, tmp_path)
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"], out_of_order_s=3600)
    sources = Sources(history_bytes=6000)  # one run's 31 steps: about 4 kB
    sources.prometheus = PrometheusReader(prometheus.url, None)

    def push(run, steps):
        body = json.dumps({"batches": batches(run, steps, base)}).encode()
        assert http("POST", hub + "/api/v1/push", body, {"Content-Type": "application/json"})[0] == 200

    def in_prometheus(run, step):
        found = prometheus.raw_samples(f'{SERIES}{{experiment_name="r{run}"}}', 3600)
        return any(v == value(run, step) for samples in found.values() for v, _ in samples)

    try:
        told(sources, 0, range(1, 31), base)  # run 0 logs steps 1-30 ...
        push(0, range(1, 21))  # ... of which Prometheus has 1-20 so far (its scrapes lag)
        wait_for(lambda: in_prometheus(0, 20), 60, what="step 20 in Prometheus")
        told(sources, 1, range(1, 31), base)
        push(1, range(1, 31))
        assert sources.histories.forgotten(("p", "r0"))  # forgotten for room: run 1 took it
        told(sources, 0, [31], base)  # run 0 logs again: its page is asked for
        first = sources.history(("p", "r0"))
        assert first is not None and first.steps[0] == 1 and first.steps[-1] == 31  # never a 1-step page
        push(0, range(21, 32))  # Prometheus catches up
        wait_for(lambda: in_prometheus(0, 31), 60, what="step 31 in Prometheus")
        # read back again: every step 1-31 with its own value (before: steps 21-30 were a hole for good)
        wait_for(lambda: whole(sources, 0, 31), 30, what="run 0 read back whole, each step its own value")
    finally:
        prometheus.stop()
        stop_group(process)
