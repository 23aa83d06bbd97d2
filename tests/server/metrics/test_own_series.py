"""The server's own series (the live detectors' findings) are taken by the hub from the detectors,
never pushed through its front door (``MetricHub.derived``): a scraper gets each of them once, in order,
stamped at its step's time, and the hub's listeners get only what the trainers pushed, never what a
listener made of it.

The steps are a real verl run's (``tests/data/real_runs``, verl's ``file`` logger format), the last
one with a NaN loss as verl's trainer would log it."""

import json
import re
import time
from pathlib import Path

from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.metrics.hub import MetricHub

REAL_RUN = Path(__file__).parents[2] / "data" / "real_runs" / "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp.jsonl"
STEPS = 12


def real_steps(start):
    """The run's steps 1..STEPS as its trainer pushes them, one every 30 s (within what a new
    scraper is sent of the past: 600 s); the last with a NaN pg_loss."""
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
    batches = []
    for step in range(1, STEPS + 1):
        data = {k: v for k, v in rows[step]["data"].items() if v is not None and k != "training/global_step"}
        if step == STEPS:
            data["actor/pg_loss"] = "NaN"  # what a NaN travels as on the wire
        metrics = {detectors.series_name(k): v for k, v in data.items()}
        batches.append(
            {"project": "p", "experiment_name": "e", "step": step, "time": start + 30 * step, "metrics": metrics}
        )
    return batches


def wired_hub():
    """The hub with the live detectors, wired as the server wires them (compose.py)."""
    health = HealthMonitor()
    heard = []  # every batch the listeners are handed
    hub = MetricHub(listeners=(health.observe, heard.extend), derived=(health,))
    return hub, heard, health


def tick(hub, health):
    """What the server does every second (app.Server._tick): walk the steps pushed, apply what was made."""
    health.walk()
    hub.take_derived()


def test_the_detectors_series_reach_a_scraper_once_each_in_step_order_and_never_the_listeners():
    hub, heard, health = wired_hub()
    start = time.time() - 30 * (STEPS + 1)
    for batch in real_steps(start):
        hub.push({"batches": [batch]})
    tick(hub, health)
    # the listeners heard the trainer's steps, each once, and nothing the detectors wrote
    assert [b.step for b in heard] == list(range(1, STEPS + 1))
    assert all(dict(b.labels).keys() == {"project", "experiment_name"} for b in heard)

    exposure = hub.expose("prom")
    body = exposure.body().decode()
    exposure.commit()
    finding = re.compile(r"^rl_insight_health_finding\{(?P<labels>[^}]*)\} (?P<value>\S+) (?P<ts>\d+)$", re.M)
    stamped = {}
    for m in finding.finditer(body):
        stamped.setdefault(m["labels"], []).append((int(m["ts"]), float(m["value"])))
    non_finite = [ts for labels, items in stamped.items() if 'detector="non_finite"' in labels for ts in items]
    assert non_finite and non_finite[-1] == (int((start + 30 * STEPS) * 1000), 1.0)  # the NaN step, at its time
    step_times = {int((start + 30 * step) * 1000) for step in range(1, STEPS + 1)}
    for labels, items in stamped.items():
        times = [ts for ts, _ in items]
        assert times == sorted(set(times)), labels  # once each, in order
        assert set(times) <= step_times, labels  # each at its step's own time
    # a second scrape sends none of them again
    again = hub.expose("prom")
    assert not finding.search(again.body().decode())
    again.commit()
