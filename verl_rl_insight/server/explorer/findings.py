"""A run's findings as the explorer shows them: the walk ``rl-insight diagnose`` does (the same
detectors, over the same series, the same step times, parameters, finished flag and baseline
resets), over the run's history here. Kept per run until the run has a new step or new marks."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.explorer.history import Histories, RunHistory
from verl_rl_insight.server.explorer.keys import key_of
from verl_rl_insight.server.health import detectors

RECENT_S = 5.0
Finding = dict[str, Json]


def _read_names(names: Sequence[str]) -> list[str]:
    """The series diagnose reads back from Prometheus (its ``_names``): the detectors' keys, their families."""
    keys = {k for d in detectors.ALL for k in (*d.keys, *d.extra)} | set(detectors.NON_FINITE_KEYS)
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


def walk(taken: Snapshot, params: Mapping[str, float], resets: Sequence[int]) -> list[Finding]:
    """diagnose's findings of a run's history."""
    series, times, finished = taken
    found = detectors.diagnose(series, times, finished=finished, now=time.time(), params=params, resets=resets)
    return [shown(f) for f in found]


class FindingsCache:
    """The findings per run, made again when the run's history or marks change."""

    def __init__(self, max_runs: int = 64) -> None:
        self.max_runs = max_runs
        self._kept: dict[tuple[str, str], tuple[tuple[int, int, tuple[int, ...]], list[Finding]]] = {}
        self._lock = threading.Lock()

    def of(
        self, run: tuple[str, str], histories: Histories, params: Mapping[str, float], resets: Sequence[int]
    ) -> list[Finding]:
        """The run's findings ([] for a run without history here)."""
        with histories.lock:
            history = histories.get(run)
            if history is None:
                return []
            # a run not finished is walked again every few seconds (the stall finding reads the clock)
            clock = 0 if history.finished == 1 else int(time.time() / RECENT_S)
            stamp = (history.version, clock, tuple(resets))
            with self._lock:
                kept = self._kept.get(run)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            taken = snapshot(history)
        findings = walk(taken, params, resets)
        with self._lock:
            if len(self._kept) >= self.max_runs and run not in self._kept:
                self._kept.pop(next(iter(self._kept)))
            self._kept[run] = (stamp, findings)
        return findings
