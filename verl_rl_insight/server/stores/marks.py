"""Marks on a run's steps (``rl-insight runs mark``, ``POST /api/v1/runs/marks``).

A mark names one step of one run, a person's text, and whether the detectors start their
baselines again there. It is kept in ``<data>/marks.json`` (0600, written whole with fsync and
rename; a damaged file is moved aside and named in the log), one mark per step (marking a step
again replaces its mark), at most ``MAX_MARKS_PER_RUN`` per run and ``MAX_MARKS`` in all (one more
is a 422), at most ``MAX_MARK_WRITES_PER_RUN_S`` changes of a run a second (``MARK_WRITES_BURST`` at once)
and ``MAX_MARK_WRITES_S`` of all runs (each rewrites the file with fsync; more is 429 with
Retry-After).

The hub exposes each mark whose step's time is known as ``rl_insight_hub_run_mark{project,
experiment_name, mark, step, reset_baseline}`` with the step's trainer time in ms as its value:
Grafana's Prometheus annotation with ``useValueForTime`` draws it at that time, whenever the mark
was made. The step's time comes from the trainer's own steps as the hub takes them (the last
``RECENT_STEPS`` of each run), else from the server's Prometheus, else it is set when the step
arrives (a mark made ahead of a planned change).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec

from verl_rl_insight.contract.errors import BadInput, Busy, NotFound, OverCapacity
from verl_rl_insight.contract.marks import (
    MARK_METRIC,
    MARK_TEXT_PATTERN,
    MARK_TEXT_RULE,
    MARK_WRITES_BURST,
    MAX_MARK_WRITES_PER_RUN_S,
    MAX_MARK_WRITES_S,
    MAX_MARKS,
    MAX_MARKS_PER_RUN,
    MarkBody,
)
from verl_rl_insight.contract.naming import label_text
from verl_rl_insight.contract.runs import Run, trainer_run
from verl_rl_insight.contract.wire import Batch, field_problem
from verl_rl_insight.server.stores.files import set_aside, write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MARK_BYTES = 600  # a mark's record and its slot in the store
LINE_COPIES = 5  # its exposition line, in as many copies as the hub holds of a series' line (hub.py)
RECENT_STEPS = 64  # per run: the steps' trainer times kept to place a mark made just after
RECENT_RUNS = 256
MAX_RATE_RUNS = 4096  # runs whose change rate is held before full buckets are forgotten


class MarkError(BadInput):
    """A mark that breaks a rule; the message names the field."""


@dataclass
class Mark:
    step: int
    text: str
    reset_baseline: bool
    created: float
    time: float | None  # the step's trainer time (None: the step has not been seen yet)

    def as_json(self, run: Run) -> dict[str, object]:
        return {"project": run[0], "experiment_name": run[1], **asdict(self)}

    def nbytes(self, run: Run) -> int:
        """What holding it costs: the record, and its line in every copy of a scrape's body."""
        line = len(MARK_METRIC) + 120 + len(run[0].encode()) + len(run[1].encode()) + len(self.text.encode())
        return MARK_BYTES + LINE_COPIES * line


class WriteRate:
    """Token buckets: ``per_run`` changes of one run a second (``burst`` at once), ``total`` of all
    runs a second (``total_burst`` at once). A person marking steps by hand never waits; a loop
    re-marking one step (each change rewrites marks.json with fsync) gets 429 with Retry-After.
    Holds the runs changed lately only (a full bucket is forgotten). The store's lock holds it."""

    def __init__(
        self,
        per_run: float = MAX_MARK_WRITES_PER_RUN_S,
        burst: float = MARK_WRITES_BURST,
        total: float = MAX_MARK_WRITES_S,
        total_burst: float = 2 * MAX_MARK_WRITES_S,
    ) -> None:
        self.per_run, self.burst, self.total, self.total_burst = per_run, burst, total, total_burst
        self._runs: dict[Run, tuple[float, float]] = {}  # run -> (changes left, when counted)
        self._all = (total_burst, 0.0)

    def take(self, run: Run, now: float) -> None:
        """Count one change of ``run``; Busy (429, Retry-After) over either rate."""
        left, at = self._runs.get(run, (self.burst, now))
        left = min(self.burst, left + (now - at) * self.per_run)
        left_all = min(self.total_burst, self._all[0] + (now - self._all[1]) * self.total)
        if left < 1:
            raise Busy(f"{run[0][:100]}/{run[1][:100]}: at most {self.per_run:g} mark changes a second per run")
        if left_all < 1:
            raise Busy(f"at most {self.total:g} mark changes a second on this server")
        self._runs[run] = (left - 1, now)
        self._all = (left_all - 1, now)
        if len(self._runs) > MAX_RATE_RUNS:  # a full bucket holds nothing worth keeping
            full_after = self.burst / self.per_run
            self._runs = {r: v for r, v in self._runs.items() if now - v[1] < full_after}


class MarkStore:
    def __init__(
        self,
        path: Path | None = None,
        on_resets: Callable[[str, str, list[int]], None] | None = None,
        step_time: Callable[[str, str, int], float | None] | None = None,
        max_per_run: int = MAX_MARKS_PER_RUN,
        max_total: int = MAX_MARKS,
        book: Callable[[int], bool] = lambda nbytes: True,
    ) -> None:
        self.path = path
        # the live detectors get a run's baseline resets whole after each change of its marks
        self.on_resets = on_resets
        self.step_time = step_time  # a step's trainer time from the server's Prometheus
        self.version = 0  # moves on whenever ``lines`` changes (the hub's exposition: a collector)
        # books bytes (negative: gives back) under the hub's memory bound: Bound.book_other("marks", n)
        self.book = book
        self.max_per_run, self.max_total = max_per_run, max_total
        self._lock = threading.Lock()
        self.rate = WriteRate()
        self._marks: dict[Run, dict[int, Mark]] = {}
        self._recent: OrderedDict[Run, OrderedDict[int, float]] = OrderedDict()
        if path is not None and path.exists():
            self._load(path)
        book(sum(m.nbytes(run) for run, marks in self._marks.items() for m in marks.values()))  # read back
        for project, experiment in list(self._marks):  # a restarted server's detectors hear the resets again
            self._resets_changed((project, experiment))

    def _load(self, path: Path) -> None:
        try:
            saved = json.loads(path.read_text())
            for item in saved["marks"]:
                run = (str(item["project"]), str(item["experiment_name"]))
                at = item["time"]
                mark = Mark(
                    int(item["step"]),
                    str(item["text"]),
                    bool(item["reset_baseline"]),
                    float(item["created"]),
                    None if at is None else float(at),
                )
                self._marks.setdefault(run, {})[mark.step] = mark
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._marks = {}
            set_aside(path, str(exc)[:200])

    def _save(self) -> None:
        if self.path is not None:
            marks = [m.as_json(run) for run, by_step in self._marks.items() for m in by_step.values()]
            write_atomically(self.path, json.dumps({"marks": marks}), mode=0o600)

    def _changed(self) -> None:
        self.version += 1

    def _resets_changed(self, run: Run) -> None:
        """Tell the live detectors the run's resets as they are now (not under ``_lock``)."""
        if self.on_resets is not None:
            self.on_resets(run[0], run[1], self.resets(*run))

    # -- what the API does -------------------------------------------------------------------
    def add(self, body: bytes) -> dict[str, object]:
        """A mark from a ``MarkBody`` (a run credential's run the router has checked); returns it."""
        try:
            ask = msgspec.json.decode(body, type=MarkBody)
        except msgspec.ValidationError as exc:
            problem = field_problem(exc, "a mark: project, experiment_name, step, text, reset_baseline?")
            if problem.startswith("text ") and repr(MARK_TEXT_PATTERN) in str(exc):
                problem = f"text {MARK_TEXT_RULE}"
            raise MarkError(problem) from None
        except msgspec.DecodeError as exc:
            raise MarkError(f"body is not valid JSON: {str(exc)[:200]}") from None
        run = (ask.project, ask.experiment_name)
        at = self._known_time(run, ask.step)
        mark = Mark(ask.step, ask.text, ask.reset_baseline, time.time(), at)
        with self._lock:
            self.rate.take(run, time.monotonic())
            here = self._marks.get(run, {})
            if ask.step not in here:
                if len(here) >= self.max_per_run:
                    raise OverCapacity(
                        f"{run[0]}/{run[1]} has {self.max_per_run} marks already: remove one with "
                        "`rl-insight runs unmark --step N`"
                    )
                if sum(map(len, self._marks.values())) >= self.max_total:
                    raise OverCapacity(f"{self.max_total} marks on this server already: remove some of old runs")
            old = here.get(ask.step)
            if old is not None and mark.time is None:
                mark.time = old.time
            if not self.book(mark.nbytes(run) - (old.nbytes(run) if old is not None else 0)):
                raise OverCapacity("the server's memory bound (memory_limit_mb) has no room for one more mark")
            self._marks.setdefault(run, {})[ask.step] = mark
            self._save()
        self._resets_changed(run)  # also a reset mark put again without its reset: it stops counting
        self._changed()
        return mark.as_json(run)

    def _known_time(self, run: Run, step: int) -> float | None:
        with self._lock:
            recent = self._recent.get(run)
            if recent is not None:
                if step in recent:
                    return recent[step]
                if step > next(reversed(recent)):
                    return None  # not reached yet: set when it arrives
        # None where Prometheus does not say (down, or the step is not there): set when the step arrives
        return self.step_time(run[0], run[1], step) if self.step_time is not None else None

    def of_run(self, project: str, experiment: str) -> dict[str, object]:
        """The run's marks, by step."""
        with self._lock:
            marks = sorted(self._marks.get((project, experiment), {}).values(), key=lambda m: m.step)
            return {"marks": [m.as_json((project, experiment)) for m in marks]}

    def remove(self, project: str, experiment: str, step: int) -> dict[str, object]:
        with self._lock:
            if step in self._marks.get((project, experiment), {}):
                self.rate.take((project, experiment), time.monotonic())
            mark = self._marks.get((project, experiment), {}).pop(step, None)
            if mark is None:
                raise NotFound(f"step: no mark at step {step} of {project[:100]}/{experiment[:100]}")
            self.book(-mark.nbytes((project, experiment)))
            if not self._marks[(project, experiment)]:
                del self._marks[(project, experiment)]
            self._save()
        self._resets_changed((project, experiment))
        self._changed()
        return {"removed": mark.as_json((project, experiment))}

    def forget(self, project: str, experiment: str) -> int:
        """Remove every mark of a run (``rl-insight runs delete``); returns how many there were."""
        with self._lock:
            gone = self._marks.pop((project, experiment), {})
            self._recent.pop((project, experiment), None)
            self.book(-sum(m.nbytes((project, experiment)) for m in gone.values()))
            if gone:
                self._save()
        if gone:
            self._resets_changed((project, experiment))
            self._changed()
        return len(gone)

    def resets(self, project: str, experiment: str) -> list[int]:
        with self._lock:
            return sorted(m.step for m in self._marks.get((project, experiment), {}).values() if m.reset_baseline)

    # -- what the hub calls ------------------------------------------------------------------
    def observe(self, batches: Sequence[Batch]) -> None:
        """A hub listener: the trainer's steps and their times; a mark waiting for its step gets its time."""
        placed = False
        with self._lock:
            touched: set[Run] = set()
            for batch in batches:
                run = trainer_run(batch.labels)
                if batch.step is None or run is None:
                    continue
                recent = self._recent.get(run)
                if recent is None:
                    recent = self._recent[run] = OrderedDict()
                    while len(self._recent) > RECENT_RUNS:
                        self._recent.popitem(last=False)
                self._recent.move_to_end(run)
                recent.setdefault(batch.step, batch.time)
                while len(recent) > RECENT_STEPS:
                    recent.popitem(last=False)
                touched.add(run)
            for run in touched & self._marks.keys():
                newest = max(self._recent[run])
                for mark in self._marks[run].values():
                    if mark.time is None and mark.step <= newest:
                        after = [(s, t) for s, t in self._recent[run].items() if s >= mark.step]
                        if after:
                            mark.time = min(after)[1]  # its step, or the first after it the trainer logged
                            placed = True
            if placed:
                self._save()
        if placed:
            self._changed()

    def lines(self) -> list[str]:
        """The mark series in the exposition format (label values escaped; the text has no controls)."""
        with self._lock:
            found = [(run, m) for run, marks in self._marks.items() for m in marks.values() if m.time is not None]
        if not found:
            return []
        lines = [f"# TYPE {MARK_METRIC} gauge"]
        for (project, experiment), mark in found:
            labels = label_text(
                sorted(
                    {
                        "project": project,
                        "experiment_name": experiment,
                        "mark": mark.text,
                        "step": str(mark.step),
                        "reset_baseline": "true" if mark.reset_baseline else "false",
                    }.items()
                )
            )
            lines.append(f"{MARK_METRIC}{{{labels}}} {int((mark.time or 0.0) * 1000)}")
        return lines
