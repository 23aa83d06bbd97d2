"""The explorer's span cache reads a run's spans on from where it stopped; when the span store
evicts the run's oldest steps (a segment gone, the spans of its steps cut from the next one), the
cache reads the run again whole: no garbage record made of half a line, no span skipped, no evicted
span kept. The store and the spans are real (OTLP through the store's own add)."""

import json

from tests.server.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.stores.spans import SpanStore


def test_the_span_cache_follows_the_store_when_it_evicts_a_runs_oldest_steps(tmp_path):
    store = SpanStore(tmp_path, max_run_bytes=4000)  # a request of STEP_SPANS' first two: 470 bytes
    sources = Sources()
    evicted = False
    for step in range(1, 40):
        store.add(otlp([(n, lane, step, *rest) for n, lane, _, *rest in STEP_SPANS[:2]]))
        if step % 7 != 3:
            continue  # a step page asked now and then: the store evicts in between
        cached = sources.spans_of(store, ("p", "e"))
        on_disk = [json.loads(line) for line in store.read("p", "e").splitlines()]
        assert cached == on_disk, f"step {step}: {len(cached)} cached, {len(on_disk)} kept"
        evicted = evicted or store.runs()[0]["evicted_through_step"] is not None
    assert evicted  # the positive control: the store did evict the run's oldest steps meanwhile
    assert all(span.get("name") != "?" for span in cached)
