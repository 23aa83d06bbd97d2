"""One run's walk of the detectors, the one the alerts and the explorer both read (``live.py``):
``rl-insight diagnose``'s walk (``detectors.RunHealth``: the same detectors, parameters, baseline
resets and validation keys), fed each step of the run's history (``history/histories.py``, the
per-run step columns the server keeps once) once, in order, with the series diagnose reads back
from Prometheus (``read_names``).

The walk follows the history step by step (``fed``: its place, counted from the run's first step
the history ever held; a run at its cap drops its oldest steps and the walk keeps going). It is
walked again from the start when what it had is no longer a prefix of the history (``fits``): a
late step, a second batch of a step it had (verl's validation call for the same step, a resent
step with keys of its own), a new attempt, steps dropped before it had them, other baseline
resets, other validation keys.

What the detectors say of a step becomes the alert series once (``Emitted``): the time of the
newest step emitted per detector and metric is kept (a series' samples go out in time order), so a
walk again from the start emits nothing for a step already emitted, except the series never emitted
among the run's last ``LATE`` steps (validation keys a run's card names after its first steps: a
fall already seen counts); a run read back from Prometheus emits nothing up to the newest step's
time read back (its series were exposed before). A new attempt of the run (its name used again
from an earlier step, later) or a run deleted and started again emits its steps: their times are
newer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.detectors import BY_NAME, Said
from verl_rl_insight.server.history.run_history import RunHistory
from verl_rl_insight.server.settings.health import HealthSettings

ONLINE = {d.name for d in BY_NAME.values() if d.online} | {"stall"}  # stall: its step times, for its rule
LATE = 64  # a walk again from the start emits the series never emitted of the run's last LATE steps at most


class StepValues(NamedTuple):
    """A step as the walk feeds it to the detectors."""

    step: int
    values: dict[str, float]  # its values the detectors read
    time: float  # its time


def read_names(names: Sequence[str], validation_keys: Sequence[str] = ()) -> list[str]:
    """The series diagnose reads back from Prometheus (its ``_names``): the detectors' keys, their
    families, and the validation keys named (the server's and the run's own)."""
    keys = {k for d in detectors.ALL for k in (*d.keys, *d.extra)} | set(detectors.NON_FINITE_KEYS) | {*validation_keys}
    wanted = {detectors.series_name(k) for k in keys if not k.endswith("/")}
    families = tuple(detectors.series_name(k) for k in keys if k.endswith("/"))
    return [n for n in names if n in wanted or n.startswith(families)]


class Emitted:
    """What a run's walk made into series (kept while its walk may be let go: a few numbers)."""

    def __init__(self) -> None:
        self.newest: dict[tuple[str, str], float] = {}  # (detector, metric) -> the newest step's time emitted
        self.counts: dict[str, float] = {}  # detector -> steps emitted that belonged to a finding


class RunWalk:
    """diagnose's walk of one run, fed its history's steps once each."""

    def __init__(
        self, params: HealthSettings, history: RunHistory, resets: tuple[int, ...], keys: tuple[str, ...]
    ) -> None:
        self.keys, self.resets = keys, resets  # other keys or resets: walked again from the start
        self.health = detectors.RunHealth(params, validation_keys=keys)
        for step in resets:
            self.health.reset_baseline(step)
        self.rewrites = history.rewrites
        # the steps in ``health``, counted from the run's first step the history ever held: those
        # still held are history.steps[:fed - history.dropped]
        self.fed = history.dropped
        self.last_fed: int | None = None
        self.version = -1  # the history's version when the walk last caught up with it

    def place(self, history: RunHistory) -> int:
        """Where in ``history.steps`` the next step to feed is."""
        return self.fed - history.dropped

    def fits(self, history: RunHistory, resets: tuple[int, ...], keys: tuple[str, ...]) -> bool:
        """Still a prefix of ``history`` (or more: what was dropped since it was fed): nothing it
        had changed since, and no step it never had was dropped."""
        place = self.place(history)
        if resets != self.resets or keys != self.keys or history.rewrites != self.rewrites:
            return False
        if not 0 <= place <= len(history.steps):
            return False
        return place == 0 or history.steps[place - 1] == self.last_fed

    def goes_on(self, history: RunHistory, resets: tuple[int, ...], keys: tuple[str, ...]) -> bool:
        """A run the histories forgot for room that logs again (``history.partial``: its older steps
        are in Prometheus only), holding only steps after those the walk had: the walk goes on over
        them with its baselines, as if the history still held the rest (forty long runs under one
        memory bound: the one forgotten is not walked again from a few steps, its alerts blind until
        their baselines fill again). Until the explorer reads it back whole: then it no longer fits,
        and is walked again from its first step."""
        if not (history.partial and history.steps and resets == self.resets and keys == self.keys):
            return False
        if self.last_fed is None or history.steps[0] <= self.last_fed:
            return False
        self.fed, self.rewrites = history.dropped, history.rewrites
        return True

    def unfed(self, history: RunHistory) -> list[StepValues]:
        """The steps it has not had, copied out (under the histories' lock, which the pushes take:
        the walking itself runs after it is let go)."""
        names = read_names(list(history.columns), self.keys)
        out = []
        for i in range(self.place(history), len(history.steps)):
            values = {}
            for name in names:
                x = history.value(name, i)
                if x is not None:
                    values[name] = x
            out.append(StepValues(history.steps[i], values, history.times[i]))
        self.version = history.version
        return out

    def feed(self, steps: list[StepValues]) -> list[tuple[StepValues, list[Said]]]:
        """Feed ``steps`` in order; what the detectors said of each."""
        said = [(step, self.health.add(step.step, step.values, step.time)) for step in steps]
        if steps:
            self.fed, self.last_fed = self.fed + len(steps), steps[-1].step
        return said


def to_emit(
    emitted: Emitted, said: list[tuple[StepValues, list[Said]]], floor: float | None, again: tuple[int, int] | None
) -> list[tuple[StepValues, Said]]:
    """Of what the detectors said, what was never made into series: a step later than the newest
    emitted for its detector and metric and than ``floor`` (read back: exposed before); ``again``
    (walked again from the start: the newest step walked before, the first of the run's last
    ``LATE``): a step walked before only from the last LATE on."""
    out = []
    for step, saids in said:
        if floor is not None and step.time <= floor:
            continue
        for s in saids:
            key = (s.detector, s.metric)
            newest = emitted.newest.get(key)
            if s.detector not in ONLINE or (newest is not None and step.time <= newest):
                continue
            if again is not None and step.step <= again[0] and step.step < again[1]:
                continue
            emitted.newest[key] = step.time
            out.append((step, s))
    return out
