"""What the explorer's answers are made from, in one object the API holds (``Api.explorer``):

- ``histories``: each run's trainer scalars by step (``histories.observe`` is a hub listener, given
  to the hub by whoever builds both: ``app.py``; ``history.py``), read back once from the server's
  Prometheus for a run the hub has not carried since the server started;
- ``prometheus``: that Prometheus (None: the server runs none);
- ``params``: the detectors' parameters the server's health monitor runs with (what diagnose reads);
- ``findings``: the findings per run (``findings.py``), and ``spans_of``: a run's kept spans, parsed,
  read on from where the last request stopped (the span store only appends to a run's file).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Protocol

from verl_rl_insight.server.explorer.findings import FindingsCache
from verl_rl_insight.server.explorer.history import MAX_BYTES, Histories, RunHistory
from verl_rl_insight.server.explorer.prometheus import PrometheusReader
from verl_rl_insight.server.health import detectors

SpanRecord = dict[str, object]
MAX_SPAN_RUNS = 4  # runs whose parsed spans are kept
MAX_CURVES_RUNS = 16  # runs whose last curves answer is kept (each at most curves.MAX_CELLS values)
BACKFILL_AGAIN_S = 30.0  # a run Prometheus did not have is asked for again after this long


class SpanSource(Protocol):
    cuts: int  # moves on when spans leave a run's files other than at their end (stores/spans.py)

    def read(self, project: str, experiment: str | None) -> bytes | None: ...


class Sources:
    def __init__(
        self,
        params: Mapping[str, float] | None = None,
        history_bytes: int = MAX_BYTES,
        prometheus: PrometheusReader | None = None,
    ) -> None:
        self.histories = Histories(max_bytes=history_bytes)
        self.prometheus = prometheus
        self.params: Mapping[str, float] = dict(params or detectors.DEFAULTS)
        self.findings = FindingsCache()
        self._spans: OrderedDict[tuple[str, str], tuple[int, int, list[SpanRecord]]] = OrderedDict()
        self._spans_lock = threading.Lock()
        self._asked: dict[tuple[str, str], float] = {}  # run -> when Prometheus was asked for it
        # the last curves answer of each of the runs asked last (curves.cached_curves_body)
        self.curves: OrderedDict[tuple[str, str], tuple[object, bytes]] = OrderedDict()
        self.curves_lock = threading.Lock()
        self.max_curves = MAX_CURVES_RUNS

    def history(self, run: tuple[str, str]) -> RunHistory | None:
        """The run's history, read back from Prometheus first when the hub has not carried it, or
        carried it and forgot it for room (a run forgotten comes back whole, not from the steps
        since). A run Prometheus had nothing of is asked again only after BACKFILL_AGAIN_S."""
        held = self.histories.get(run)
        if (held is None or held.partial) and self.prometheus is not None:
            now = time.time()
            if held is not None or self.histories.forgotten(run) or now - self._asked.get(run, 0.0) > BACKFILL_AGAIN_S:
                steps, finished = self.prometheus.run_steps(run[0], run[1], now)
                if not steps:
                    self._asked[run] = now
                    if len(self._asked) > 4096:
                        self._asked.clear()
                self.histories.fill(run, steps, finished)
        return self.histories.get(run)

    def spans_of(self, store: SpanSource | None, run: tuple[str, str]) -> list[SpanRecord]:
        """The run's spans kept by the server's span store ([] without one, or without spans)."""
        if store is None:
            return []
        cuts = store.cuts  # (before the read: a cut meanwhile makes the next request read whole)
        body = store.read(run[0], run[1])
        if not body:
            return []
        with self._spans_lock:
            held_cuts, read, spans = self._spans.get(run, (cuts, 0, []))
            if read > len(body) or held_cuts != cuts:  # the files were cut (oldest steps evicted): read whole
                read, spans = 0, []
            end = body.rfind(b"\n") + 1
            if end > read:
                spans = spans + [_record(line) for line in body[read:end].splitlines() if line.strip()]
            self._spans[run] = (cuts, max(read, end), spans)
            self._spans.move_to_end(run)
            while len(self._spans) > MAX_SPAN_RUNS:
                self._spans.popitem(last=False)
            return spans


def _record(line: bytes) -> SpanRecord:
    try:
        record = json.loads(line)
    except ValueError:
        return {"name": "?", "start_ns": 0, "end_ns": 0, "attributes": {}}
    return record if isinstance(record, dict) else {"name": "?", "start_ns": 0, "end_ns": 0, "attributes": {}}
