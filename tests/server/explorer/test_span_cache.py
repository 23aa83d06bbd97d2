"""A step page reads the spans of its step where the span store's index says they lie; when the
store evicts a run's oldest steps (a segment gone, the spans of its steps cut from the next one),
the index follows the files as rewritten: no garbage record made of half a line, no span of a kept
step skipped, no evicted span kept. The store and the spans are real (OTLP through the store's own
add); the store's index is dropped once for room, and the run indexed again from its files."""

import json

from tests.server.stores.test_timeline_store import STEP_SPANS, otlp
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.stores.span_index import RUN_BYTES
from verl_rl_insight.server.stores.spans import SpanStore, span_step


def on_disk(store, step):
    return [r for r in map(json.loads, store.read("p", "e").splitlines()) if span_step(r) == step]


def test_step_spans_follow_the_store_when_it_evicts_a_runs_oldest_steps(tmp_path):
    store = SpanStore(tmp_path, max_run_bytes=4000)  # a request of STEP_SPANS' first two: 470 bytes
    sources = Sources()
    evicted = False
    for step in range(1, 40):
        store.add(otlp([(n, lane, step, *rest) for n, lane, _, *rest in STEP_SPANS[:2]]))
        if step % 7 != 3:
            continue  # a step page asked now and then: the store evicts in between
        kept = {span_step(json.loads(line)) for line in store.read("p", "e").splitlines()}
        for asked in range(1, step + 1):
            spans = sources.step_spans(store, ("p", "e"), asked)
            assert [s for s in spans if span_step(s) == asked] == on_disk(store, asked), f"step {asked} at {step}"
            assert all(span_step(s) in kept and s.get("name") != "?" for s in spans)
        evicted = evicted or store.runs()[0]["evicted_through_step"] is not None
    assert evicted  # the positive control: the store did evict the run's oldest steps meanwhile


def test_a_run_dropped_from_the_index_for_room_is_indexed_again_from_its_files(tmp_path):
    store = SpanStore(tmp_path, index_bytes=RUN_BYTES)  # room for one run's index
    for experiment in ("a", "b"):
        for step in range(1, 6):
            store.add(otlp([(n, lane, step, *rest) for n, lane, _, *rest in STEP_SPANS[:2]], "p", experiment))
    assert store.index.stats["dropped_runs"] >= 1 and store.index.get("a") is None
    spans = Sources().step_spans(store, ("p", "a"), 3)
    assert [s["name"] for s in spans if span_step(s) == 3] == ["step", "gen"]
