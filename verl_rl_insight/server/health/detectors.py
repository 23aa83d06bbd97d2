"""Training health: the RL failure modes that cost teams days, found in what verl logs.

Each detector is defined once, in ``modes.py`` (its failure mode, key, severity, what to check); its
test (``checks.py``) reads the run's values up to a step and says whether that step shows the
failure, against the run's own earlier steps. Here is the walk: one walk,
``RunHealth``, feeds a run's steps to every detector in order: the server runs it on each step it
receives (``server/health/live.py``: the online findings, which the ``RLInsight<Mode>`` alert rules
read) and ``rl-insight diagnose`` runs the very same walk over a run's history (read back from
Prometheus, or from verl's ``file`` logger output): on the same steps they find the same findings.

A finding is a streak of at least ``sustain`` flagged steps: its first and last step, the metric,
the value against the run's own baseline. Baselines start again at a reset step (``resets``,
``RunHealth.reset_baseline``): a planned change (a new learning rate, a new data mix) is not a failure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from verl_rl_insight.server.health.checks import Check
from verl_rl_insight.server.health.incidents import alerting
from verl_rl_insight.server.health.modes import (
    ALL,
    BY_NAME,
    DETECTORS,
    KEEP,
    NON_FINITE,
    PREFIX,
    SEVERITIES,
    STALL,
    VALIDATION,
    VALIDATION_KEYS,
    Detector,
    Finding,
    Findings,
    key_of,
    pick,
    series_name,
    verl_key,
)
from verl_rl_insight.server.health.signals import Series, trim
from verl_rl_insight.server.health.step_times import StepTimes
from verl_rl_insight.server.health.validation import lower_is_better
from verl_rl_insight.server.health.verl_keys import ENTROPY, NON_FINITE_KEYS, SCORE, STEP_TIME_KEYS
from verl_rl_insight.server.settings.health import DEFAULTS, HealthSettings

__all__ = [  # the modes are defined in modes.py, their settings in settings/health.py; imported from here too
    "ALL",
    "BY_NAME",
    "DEFAULTS",
    "DETECTORS",
    "ENTROPY",
    "KEEP",
    "NON_FINITE",
    "NON_FINITE_KEYS",
    "PREFIX",
    "SCORE",
    "SEVERITIES",
    "STALL",
    "STEP_TIME_KEYS",
    "VALIDATION",
    "VALIDATION_KEYS",
    "Detector",
    "Finding",
    "Findings",
    "RunHealth",
    "Said",
    "StepTimes",
    "Streak",
    "diagnose",
    "key_of",
    "pick",
    "ranked",
    "series_name",
    "steps_of",
    "verl_key",
    "walked",
]


def validation_streak(detector: Detector) -> bool:
    return detector.keys == VALIDATION_KEYS


class Flagged(NamedTuple):
    """A step of a streak: the step, and what its check said."""

    step: int
    check: Check


class Streak:
    """A detector's walk over one run, one step at a time: the online monitor and the offline
    command both feed it through ``RunHealth``, so both find the same steps."""

    def __init__(
        self,
        detector: Detector,
        params: HealthSettings,
        keep: int = KEEP,
        validation_keys: Sequence[str] = (),
        seen: set[str] | None = None,
    ) -> None:
        self.detector, self.params, self.keep = detector, params, keep
        self.test_params = params  # and which way is better, for a validation series (from its name)
        self.keys = (*validation_keys, *detector.keys) if validation_streak(detector) else detector.keys
        self.metric: str | None = None
        self.rank = len(self.keys)
        # the series names of the steps before: the run's, one set for all its detectors (RunHealth adds to it)
        self.seen, self.shared = (seen, True) if seen is not None else (set(), False)
        self.series: list[tuple[int, float]] = []
        self.extra: dict[str, list[tuple[int, float]]] = {k: [] for k in detector.extra}
        self.extra_names = [(series_name(k), v) for k, v in self.extra.items()]  # named once, read every step
        self.extra_keep = min(keep, detector.extra_keep)
        self.flagged: list[Flagged] = []  # the current streak of flagged steps
        self.findings: Findings = []
        self.active = False  # the newest step belongs to a finding
        self.resets: list[int] = []
        self.needed = detector.sustain_setting(params) if detector.sustain_setting else detector.sustain

    def reset_baseline(self, step: int) -> None:
        self.resets = sorted({*self.resets, step})

    def alerts(self) -> bool:
        """The newest step belongs to a finding its alert is for: not one only worth knowing (info)
        of a detector whose alert is a warning (groups all solved: zero_variance_groups)."""
        mild = bool(self.findings) and self.findings[-1].severity == "info" != self.detector.severity
        return self.active and not mild

    def _since(self, step: int) -> int | None:
        done = [r for r in self.resets if r <= step]
        return done[-1] if done else None

    def add(self, step: int, metrics: Mapping[str, float]) -> Check | None:
        """The step's values (series name -> value); the check of the step where it has the metric."""
        since = self._since(step)
        for name, values in self.extra_names:
            x = metrics.get(name)
            if x is not None and math.isfinite(x) and (not values or step > values[-1][0]):
                values.append((step, x))
            if since is not None or len(values) > self.extra_keep:  # what trim does, where it has something to do
                trim(values, self.extra_keep, since)
        # a key it prefers? Only among names this walk has not seen: a name seen before was picked then if better
        fresh = self.rank > 0 and not self.seen.issuperset(metrics)
        found = pick(self.detector, metrics, self.rank, self.keys) if fresh else None
        if fresh and not self.shared:
            self.seen.update(metrics)
        if found is not None and found[0] < self.rank:  # the run logs a key the detector prefers: follow it
            self.rank, self.metric, self.series, self.flagged, self.active = found[0], found[1], [], [], False
            if validation_streak(self.detector):
                self.test_params = replace(self.params, lower_is_better=lower_is_better(found[1]))
        if self.metric is None:
            return None
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(value) or (self.series and step <= self.series[-1][0]):
            return None
        self.series.append((step, value))
        trim(self.series, self.keep, since)
        if since is not None and self.flagged and self.flagged[0].step < since:
            self.flagged, self.active = [], False
        check = self.detector.test(self.series, self.extra, self.test_params)
        if check is None or not check.flagged:
            self.flagged, self.active = [], False
            return check
        self.flagged.append(Flagged(step, check))
        if len(self.flagged) >= self.needed or check.sustained:
            self._found(step)
        return check

    def _severity(self, check: Check) -> str:
        return "critical" if check.critical else check.severity or self.detector.severity

    def _found(self, step: int) -> None:
        first = self.flagged[0].check
        first_step = first.since or self.flagged[0].step
        # the least severe of the newest ``needed`` steps: a streak that grows worse rises with them
        severity = max((self._severity(f.check) for f in self.flagged[-self.needed :]), key=SEVERITIES.index)
        if 2 * sum(f.check.mild for f in self.flagged) > len(self.flagged):  # most of its steps only worth knowing
            severity = "info"
        latest = self.findings[-1] if self.findings else None
        if latest is not None and (self.active or first_step <= latest.last_step + 1):
            latest.last_step = step  # the evidence stays the first step's; the severity the worst it got
            if SEVERITIES.index(severity) < SEVERITIES.index(latest.severity):  # and why it got worse
                latest.severity = severity
                latest.evidence += f"; {severity} from step {step}: {self.flagged[-1].check.evidence}"
        else:
            self.findings.append(
                Finding(
                    self.detector.name,
                    severity,
                    first_step,
                    step,
                    verl_key(self.metric or ""),
                    first.evidence,
                    first.value,
                    first.baseline,
                    self.detector.panel,
                    found_at=step,
                    signals=first.signals,
                )
            )
        self.active = True


@dataclass
class Said:
    """What one detector said of one step (online, it becomes the ``rl_insight_health_*`` series)."""

    detector: str
    metric: str
    finding: bool
    value: float | None
    baseline: float | None


class RunHealth:
    """Every detector's walk over one run."""

    def __init__(self, params: HealthSettings, keep: int = KEEP, validation_keys: Sequence[str] = ()) -> None:
        """``validation_keys``: verl keys (or families ending in /) the user validates under, followed
        before verl's own names."""
        self.params = params
        self.seen: set[str] = set()  # every name the run logged (800 streaks' sets of their own: 6 MB at 50 runs)
        self.streaks = [Streak(d, params, keep, validation_keys, self.seen) for d in DETECTORS]
        self.non_finite: Findings = []
        self.times = StepTimes(params, keep)
        self.alerted: set[str] = set()  # the detectors whose alert some step fired (one an incident)

    def reset_baseline(self, step: int) -> None:
        """Every detector's baseline starts again at ``step``: the steps before it are not baseline
        once the run is there (a finding under way ends)."""
        for streak in self.streaks:
            streak.reset_baseline(step)
        self.times.resets = sorted({*self.times.resets, step})

    def add(self, step: int, metrics: Mapping[str, float], at: float | None = None) -> list[Said]:
        said: list[Said] = []
        broken = [verl_key(n) for n in _NON_FINITE_NAMES if n in metrics and not math.isfinite(metrics[n])]
        if broken:
            latest = self.non_finite[-1] if self.non_finite else None
            if latest is not None and latest.last_step == step - 1:
                latest.last_step = step
            else:
                what = ", ".join(f"{k} = {metrics[series_name(k)]}" for k in broken)
                self.non_finite.append(
                    Finding(
                        "non_finite", "critical", step, step, broken[0], what, panel=NON_FINITE.panel, found_at=step
                    )
                )
        if broken or any(n in metrics for n in _NON_FINITE_NAMES):
            said.append(Said("non_finite", "losses", bool(broken), None, None))
        for streak in self.streaks:
            check = streak.add(step, metrics)
            if check is not None:
                name, metric = streak.detector.name, verl_key(streak.metric or "")
                said.append(Said(name, metric, streak.alerts(), check.value, check.baseline))
        self._one_alert_an_incident(said)
        self.alerted.update(s.detector for s in said if s.finding)
        if not self.seen.issuperset(metrics):  # after every streak looked at the step's names as new
            self.seen.update(metrics)
        duration = self.times.add(step, metrics, at)
        if duration is not None:
            said.append(Said("stall", "step time", False, duration, self.times.median()))
        return said

    def _one_alert_an_incident(self, said: list[Said]) -> None:
        """The parts of an open incident alert once: its first found part's alert stands for it while
        it is open (and a part more severe than those before it alerts too), the others go quiet."""
        going_on = [s.findings[-1] for s in self.streaks if s.alerts() and s.findings[-1].severity != "info"]
        if not going_on:  # information (a plateau) is never part of an incident
            return
        carrying = alerting(self.findings(), going_on)
        if len(carrying.carriers) + len(carrying.quiet) < 2:
            return
        for s in said:
            s.finding = (s.finding and s.detector not in carrying.quiet) or s.detector in carrying.carriers
        spoken = {s.detector for s in said}
        for streak in self.streaks:  # a carrier whose own signal said nothing of this step still carries it
            if streak.detector.name in carrying.carriers - spoken:
                said.append(Said(streak.detector.name, verl_key(streak.metric or ""), True, None, None))

    def findings(self, finished: bool = True, now: float = 0.0) -> Findings:
        found = [*self.non_finite, *(f for s in self.streaks for f in s.findings), *self.times.findings]
        gap = None if finished else self.times.open_gap(now)
        return ranked([*found, *([gap] if gap else [])])


_NON_FINITE_NAMES = tuple(series_name(k) for k in NON_FINITE_KEYS)


def ranked(findings: Iterable[Finding]) -> Findings:
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.first_step, f.detector))


def steps_of(history: Mapping[str, Series]) -> list[tuple[int, dict[str, float]]]:
    """A run's history ({series name: [(step, value)]}) as its steps in order, each with its values."""
    by_step: dict[int, dict[str, float]] = {}
    for name, values in history.items():
        for step, value in values:
            by_step.setdefault(step, {})[name] = value
    return sorted(by_step.items())


def walked(
    history: Mapping[str, Series],
    step_times: Series = (),
    params: HealthSettings | None = None,
    resets: Sequence[int] = (),
    validation_keys: Sequence[str] = (),
) -> RunHealth:
    """The walk of a run's history ({series name: [(step, value)]}, values may be NaN): every step
    fed in order, as the server feeds them. ``step_times``: (step, time it was logged); ``resets``:
    steps at which every detector's baseline starts again."""
    walk = RunHealth(params or DEFAULTS, validation_keys=validation_keys)
    for step in resets:
        walk.reset_baseline(step)
    at: dict[int, float] = dict(step_times)
    steps = dict(steps_of(history))
    for step in sorted(set(steps) | set(at)):  # a step with a time and no scalar here still has a time
        walk.add(step, steps.get(step, {}), at.get(step))
    return walk


def diagnose(
    history: Mapping[str, Series],
    step_times: Series = (),
    finished: bool = True,
    now: float = 0.0,
    params: HealthSettings | None = None,
    resets: Sequence[int] = (),
    validation_keys: Sequence[str] = (),
) -> Findings:
    """Every finding in a run's history, the most severe first (``walked``)."""
    return walked(history, step_times, params, resets, validation_keys).findings(finished, now)
