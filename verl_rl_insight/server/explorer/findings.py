"""A run's findings as the explorer shows them: diagnose's (the same detectors, over the same
series, the same step times, parameters, finished flag and baseline resets), read from the server's
one walk of the run's history (``health/live.py``, ``HealthMonitor.run_findings``: the walk the
alerts read too), in the contract's shape (``shown``). ``snapshot`` and ``walk``: diagnose's walk of
a whole history at once, what the one walk's answer is checked against."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import NamedTuple

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.server.explorer.keys import key_of
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.walk import read_names
from verl_rl_insight.server.history.run_history import RunHistory
from verl_rl_insight.server.settings.health import HealthSettings

Finding = dict[str, Json]


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


class Snapshot(NamedTuple):
    """What the walk reads of a run's history."""

    series: dict[str, list[tuple[int, float]]]  # series name -> (step, value)
    times: list[tuple[int, float]]  # (step, its time)
    finished: bool


def snapshot(history: RunHistory) -> Snapshot:
    """What the walk reads of ``history`` (taken under the histories' lock; the walk runs outside it)."""
    series = {name: history.series(name) for name in read_names(list(history.columns))}
    return Snapshot(series, list(zip(history.steps, history.times)), history.finished == 1)


def walk(taken: Snapshot, params: HealthSettings, resets: Sequence[int]) -> list[Finding]:
    """diagnose's findings of a run's history."""
    found = detectors.diagnose(
        taken.series, taken.times, finished=taken.finished, now=time.time(), params=params, resets=resets
    )
    return [shown(f) for f in found]
