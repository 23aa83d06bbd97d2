"""What the explorer's answers are made from, in one object the API holds (``Api.explorer``):

- ``histories``: each run's trainer scalars by step (``histories.observe`` is a hub listener, given
  to the hub by whoever builds both: ``compose.py``; ``history/histories.py``), read back once from the server's
  Prometheus for a run the hub has not carried since the server started;
- ``prometheus``: that Prometheus (None: the server runs none);
- ``names``: each run's keys as its trainer logged them (``names.observe`` a hub listener too, kept in
  the data folder);
- ``params``: the detectors' parameters the server's health monitor runs with (what diagnose reads);
- ``health``: the server's one walk of the detectors over each run's history (``health/live.py``,
  which the alerts read too): the explorer's findings of a run (``findings.py`` shows them), and
  ``step_spans``: the spans of one step
  and those beside it in time, read where the span store's index says they lie (never a run's
  whole files: anyone may ask for a step page).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.explorer.prometheus import PrometheusReader
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import MAX_BYTES, Histories
from verl_rl_insight.server.history.run_history import RunHistory
from verl_rl_insight.server.settings.health import HealthSettings
from verl_rl_insight.server.settings.memory import DEFAULT_SHARES
from verl_rl_insight.server.stores.imports import ImportStore
from verl_rl_insight.server.stores.run_keys import RunKeys

SpanRecord = dict[str, object]
MAX_CURVES_RUNS = 16  # runs whose last curves answer is kept (each at most curves.MAX_CELLS values) ...
MAX_CURVES_BYTES = DEFAULT_SHARES.curves  # ... and all those answers' bytes (the server gives its own share)
BACKFILL_AGAIN_S = 30.0  # a run Prometheus did not have is asked for again after this long
PARTIAL_AGAIN_S = 2.0  # a run forgotten for room, not read back whole yet (Prometheus behind): again after this


class SpanSource(Protocol):
    """The span store (stores/spans.py): a step's spans, the spans during a time, from its index."""

    def step_spans(self, project: str, experiment: str, step: int) -> list[SpanRecord]: ...

    def spans_during(self, project: str, experiment: str, start_ns: int, end_ns: int) -> list[SpanRecord]: ...


class Sources:
    def __init__(
        self,
        params: HealthSettings | None = None,
        history_bytes: int = MAX_BYTES,
        curves_bytes: int = MAX_CURVES_BYTES,
        names: RunKeys | None = None,
        prometheus: PrometheusReader | None = None,
        validation_keys: Sequence[str] = (),
        health: HealthMonitor | None = None,
        imports: ImportStore | None = None,
    ) -> None:
        """``health``: the server's walk, reading the histories it was built with (None: one of
        its own over histories of ``history_bytes``, with ``params`` and ``validation_keys``);
        ``imports``: the runs imported from files (read back from where their times end)."""
        if health is None:
            health = HealthMonitor(params, validation_keys=validation_keys, histories=Histories(history_bytes))
        self.health = health
        self.histories = health.histories
        self.names = names if names is not None else RunKeys()  # the keys as logged (kept across restarts)
        self.prometheus = prometheus
        self.imports = imports if imports is not None else ImportStore()
        self.params = health.params
        self._asked: dict[Run, float] = {}  # run -> when Prometheus was asked for it
        # the last curves answer of each of the runs asked last (curves.cached_curves_body)
        self.curves: OrderedDict[Run, tuple[object, bytes]] = OrderedDict()
        self.curves_lock = threading.Lock()
        self.max_curves = MAX_CURVES_RUNS
        self.max_curves_bytes = curves_bytes  # the kept answers' bytes together: the oldest go first

    def history(self, run: Run) -> RunHistory | None:
        """The run's history, read back from Prometheus first when the hub has not carried it, or
        carried it and forgot it for room (a run forgotten comes back whole, not from the steps
        since). A run Prometheus had nothing of is asked again only after BACKFILL_AGAIN_S; a run
        read back before Prometheus had its newest steps (``partial``) after PARTIAL_AGAIN_S."""
        held = self.histories.get(run)
        if (held is None or held.partial) and self.prometheus is not None:
            now = time.time()
            since = now - self._asked.get(run, 0.0)
            if since > (PARTIAL_AGAIN_S if held is not None else BACKFILL_AGAIN_S) or (
                held is None and self.histories.forgotten(run)
            ):
                imported = self.imports.get(run)
                end = imported.last_time + 1.0 if imported is not None else now
                steps, finished = self.prometheus.run_steps(run[0], run[1], end)
                self._asked[run] = now
                if len(self._asked) > 4096:
                    self._asked.clear()
                return self.histories.fill(run, steps, finished) or held
        return self.histories.get(run)

    def again(self, run: Run) -> None:
        """Read the run back from Prometheus at its next ask (it was just imported)."""
        self.histories.forget(run)
        self._asked.pop(run, None)

    def logged(self, run: Run) -> dict[str, str]:
        """The run's series name -> the key its trainer logged, where the trainer said it."""
        return self.names.get(run)

    def step_spans(self, store: SpanSource | None, run: Run, step: int) -> list[SpanRecord]:
        """The spans a step page draws ([] without a span store): the step's own, and, when it has a
        trainer ``step`` span, every span that may overlap that span's time (the replicas' calls
        carry no step)."""
        if store is None:
            return []
        own = store.step_spans(run[0], run[1], step)
        window = None
        for span in own:
            attrs = span.get("attributes")
            attrs = attrs if isinstance(attrs, dict) else {}
            start, end = span.get("start_ns"), span.get("end_ns")
            lane = attrs.get("state_lane_id") or "trainer"
            if (attrs.get("state_name") or span.get("name")) != "step" or lane != "trainer":
                continue
            if isinstance(start, int) and isinstance(end, int):
                window = (start, end) if window is None else (min(window[0], start), max(window[1], end))
        if window is None or window[1] <= window[0]:
            return own
        return store.spans_during(run[0], run[1], window[0], window[1])
