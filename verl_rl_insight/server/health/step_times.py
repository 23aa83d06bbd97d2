"""How long each step took, against the run's own median: the stall detector's walk (a step of
``stall_ratio`` x the median and at least ``stall_s`` is a stall; a run not finished whose last step
is longer ago than that has an open gap)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from verl_rl_insight.server.health.modes import KEEP, STALL, Finding, Findings, series_name
from verl_rl_insight.server.health.signals import fmt, trim
from verl_rl_insight.server.health.verl_keys import STEP_TIME_KEYS
from verl_rl_insight.server.settings.health import HealthSettings


class StepTimes:
    """How long each step took (``timing_s/step``, else the time between two steps) against the
    run's own median: a step of ``stall_ratio`` x the median, and at least ``stall_s``, is a stall."""

    def __init__(self, params: HealthSettings, keep: int = KEEP) -> None:
        self.params, self.keep = params, keep
        self.durations: list[tuple[int, float]] = []
        self.last: tuple[int, float] | None = None  # (step, time) of the newest step with a time
        self.findings: Findings = []
        self.resets: list[int] = []

    def limit(self) -> float | None:
        """The longest a step may take now; None before the run has a step time."""
        if not self.durations:
            return None
        window = [d for _, d in self.durations[-self.params.window :]]
        return max(self.params.stall_ratio * statistics.median(window), self.params.stall_s)

    def median(self) -> float | None:
        window = [d for _, d in self.durations[-self.params.window :]]
        return statistics.median(window) if window else None

    def add(self, step: int, metrics: Mapping[str, float], at: float | None) -> float | None:
        """The step's duration, where known."""
        if self.last is not None and step <= self.last[0]:
            return None
        duration = next(
            (x for k in STEP_TIME_KEYS if (x := metrics.get(series_name(k))) is not None and math.isfinite(x)), None
        )
        if duration is None and at is not None and self.last is not None:
            duration = at - self.last[1]
        done = [r for r in self.resets if r <= step]
        trim(self.durations, self.keep, done[-1] if done else None)
        if at is not None:
            self.last = (step, at)
        if duration is None or duration < 0:
            return None
        limit = self.limit()
        if limit is not None and duration > limit:
            self.findings.append(
                Finding(
                    "stall",
                    "warning",  # it completed: the run carries on (critical is a step that never comes)
                    step,
                    step,
                    "step time",
                    f"step {step} took {duration:.0f} s, {duration / (self.median() or 1):.1f}x the run's median "
                    f"step ({fmt(self.median())} s; a stall is over {limit:.0f} s)",
                    duration,
                    self.median(),
                    STALL.panel,
                    found_at=step,
                )
            )
        self.durations.append((step, duration))
        return duration

    def open_gap(self, now: float) -> Finding | None:
        """A run not finished whose last step is longer ago than its limit."""
        limit = self.limit()
        if limit is None or self.last is None or now - self.last[1] <= limit:
            return None
        step, at = self.last
        return Finding(
            "stall",
            "critical",
            step,
            step,
            "step time",
            f"no step for {now - at:.0f} s after step {step} (the run's median step: {fmt(self.median())} s)",
            now - at,
            self.median(),
            STALL.panel,
            found_at=step,
        )
