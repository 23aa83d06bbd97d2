"""A run's findings as the explorer shows them: the walk ``rl-insight diagnose`` does (the same
detectors, over the same series, the same step times, parameters, finished flag and baseline
resets), over the run's history here. Kept per run until the run has a new step or new marks."""

from __future__ import annotations

import copy
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.explorer.history import Histories, RunHistory
from verl_rl_insight.server.explorer.keys import key_of
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.defaults import HealthSettings

RECENT_S = 5.0
Stamp = tuple[int, int, tuple[int, ...], tuple[str, ...]]  # history version, clock, resets, validation keys
MAX_NAMED = 10_000  # runs whose own validation keys are kept (as many as run cards)
Finding = dict[str, Json]


def _read_names(names: Sequence[str], validation_keys: Sequence[str] = ()) -> list[str]:
    """The series diagnose reads back from Prometheus (its ``_names``): the detectors' keys, their
    families, and the validation keys named (the server's and the run's own)."""
    keys = {k for d in detectors.ALL for k in (*d.keys, *d.extra)} | set(detectors.NON_FINITE_KEYS) | {*validation_keys}
    wanted = {detectors.series_name(k) for k in keys if not k.endswith("/")}
    families = tuple(detectors.series_name(k) for k in keys if k.endswith("/"))
    return [n for n in names if n in wanted or n.startswith(families)]


def shown(finding: detectors.Finding) -> Finding:
    """One finding in the contract's shape (EXPLORER_API.md)."""
    d = detectors.BY_NAME[finding.detector]
    evidence: dict[str, Json] = {"text": finding.evidence}
    for name, x in (("value", finding.value), ("baseline", finding.baseline)):
        if x is not None:
            evidence[name] = x if math.isfinite(x) else str(x)
    evidence["people usually"] = d.usually
    return {
        "detector": finding.detector,
        "severity": finding.severity,
        "title": finding.detector.replace("_", " "),
        "summary": d.means,
        "first_step": finding.first_step,
        "last_step": finding.last_step,
        "key": key_of(finding.metric) if finding.metric else None,
        "evidence": evidence,
        "where_to_look": f"{d.look} (panel: {finding.panel})" if finding.panel else d.look,
    }


Snapshot = tuple[dict[str, list[tuple[int, float]]], list[tuple[int, float]], bool]


def snapshot(history: RunHistory) -> Snapshot:
    """What the walk reads of ``history`` (taken under the histories' lock; the walk runs outside it)."""
    series = {name: history.series(name) for name in _read_names(list(history.columns))}
    return series, list(zip(history.steps, history.times)), history.finished == 1


def walk(taken: Snapshot, params: HealthSettings, resets: Sequence[int]) -> list[Finding]:
    """diagnose's findings of a run's history."""
    series, times, finished = taken
    found = detectors.diagnose(series, times, finished=finished, now=time.time(), params=params, resets=resets)
    return [shown(f) for f in found]


class _Walk:
    """diagnose's walk of one run, fed step by step: every step but the newest (which a second batch
    may still add keys to) is fed once; a request copies the walk and adds the newest."""

    def __init__(
        self, params: HealthSettings, resets: tuple[int, ...], history: RunHistory, keys: tuple[str, ...] = ()
    ) -> None:
        self.keys = keys  # the validation keys named (other keys: walked again from the start)
        self.health = detectors.RunHealth(params, validation_keys=keys)
        for step in resets:
            self.health.reset_baseline(step)
        self.resets = resets
        self.rewrites = history.rewrites
        # the steps in ``health``, counted from the run's first step the history ever held: those
        # still held are history.steps[:fed - history.dropped] (a run at its cap drops its oldest)
        self.fed = history.dropped
        self.last_fed: int | None = None

    def place(self, history: RunHistory) -> int:
        """Where in ``history.steps`` the next step to feed is."""
        return self.fed - history.dropped

    def fits(self, history: RunHistory, resets: tuple[int, ...]) -> bool:
        """Still a prefix of ``history`` (or more: what was dropped since it was fed): nothing before
        its newest step changed since, and no step it never had was dropped."""
        place = self.place(history)
        if resets != self.resets or history.rewrites != self.rewrites or not 0 <= place <= len(history.steps):
            return False
        return place == 0 or history.steps[place - 1] == self.last_fed


def _step_values(history: RunHistory, names: Sequence[str], i: int) -> dict[str, float]:
    values = {}
    for name in names:
        x = history.value(name, i)
        if x is not None:
            values[name] = x
    return values


StepValues = tuple[int, dict[str, float], float]  # (step, its values the detectors read, its time)


def _unfed(walk: _Walk, history: RunHistory) -> tuple[list[StepValues], StepValues | None, bool]:
    """What ``walk`` has not had of ``history``, copied out (taken under the histories' lock, which
    the hub's pushes also take: the walking itself runs after it is let go): the steps before the
    newest, the newest (which a second batch may still add keys to), whether the run finished."""
    names = _read_names(list(history.columns), walk.keys)
    newest = len(history.steps) - 1

    def values(i: int) -> StepValues:
        return history.steps[i], _step_values(history, names, i), history.times[i]

    place = walk.place(history)
    older = [values(i) for i in range(place, max(newest, 0))]
    return older, values(newest) if newest >= place + len(older) else None, history.finished == 1


def _walk_findings(
    walk: _Walk, older: list[StepValues], newest: StepValues | None, finished: bool
) -> list[detectors.Finding]:
    """Feed ``walk`` the steps before the newest, then the findings with the newest added to a copy."""
    for step, values, at in older:
        walk.health.add(step, values, at)
    if older:
        walk.fed, walk.last_fed = walk.fed + len(older), older[-1][0]
    health = walk.health
    if newest is not None:
        health = copy.deepcopy(walk.health)
        health.add(*newest)
    return list(health.findings(finished, time.time()))


class FindingsCache:
    """The findings per run: diagnose's walk kept per run and fed only the steps it has not seen
    (walked again from the start only when an older step changed or the marks did), the answer kept
    until the run has a new step or new marks (a run not finished: every few seconds, the stall
    finding reads the clock)."""

    def __init__(self, max_runs: int = 64, validation_keys: Sequence[str] = ()) -> None:
        self.max_runs = max_runs
        self.validation_keys = tuple(validation_keys)  # the server config's
        self.named: OrderedDict[Run, tuple[str, ...]] = OrderedDict()  # each run's own, from its card
        self._kept: dict[Run, tuple[Stamp, list[Finding]]] = {}
        self._walks: dict[Run, _Walk] = {}
        self._lock = threading.Lock()

    def of(self, run: Run, histories: Histories, params: HealthSettings, resets: Sequence[int]) -> list[Finding]:
        """The run's findings ([] for a run without history here)."""
        marks = tuple(resets)
        keys = (*self.named.get(run, ()), *self.validation_keys)
        # this cache's lock first, the histories' inside it and only while what the walk lacks is
        # copied out: a push (the hub's listener takes the histories' lock) never waits for a walk
        with self._lock:
            with histories.lock:
                history = histories.get(run)
                if history is None:
                    return []
                clock = 0 if history.finished == 1 else int(time.time() / RECENT_S)
                stamp = (history.version, clock, marks, keys)
                kept = self._kept.get(run)
                if kept is not None and kept[0] == stamp:
                    return kept[1]
                walk = self._walks.get(run)
                if walk is None or not walk.fits(history, marks) or walk.keys != keys:
                    walk = _Walk(params, marks, history, keys)
                older, newest, finished = _unfed(walk, history)
            findings = [shown(f) for f in _walk_findings(walk, older, newest, finished)]
            if len(self._kept) >= self.max_runs and run not in self._kept:
                oldest = next(iter(self._kept))
                self._kept.pop(oldest)
                self._walks.pop(oldest, None)
            self._kept[run] = (stamp, findings)
            self._walks[run] = walk
        return findings

    def take_run_keys(self, run: Run, keys: Sequence[str]) -> None:
        """The validation keys the run names (its card): its walk starts again with them."""
        with self._lock:
            self.named.pop(run, None)
            if keys:
                self.named[run] = tuple(keys)
                while len(self.named) > MAX_NAMED:
                    self.named.popitem(last=False)
