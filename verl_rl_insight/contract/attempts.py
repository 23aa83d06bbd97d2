"""One run, one answer: which of a run's logged steps are its own when its name was used again.

verl resumes a run from a checkpoint under the same experiment name, its steps going on (N+1, ...);
a trainer started again from an earlier step under that name is a new attempt: its steps replace
the steps it logs again and every later one the older attempt had (a restart from step 1 replaces
them all; a resume from a checkpoint at step 20 after step 25 was logged replaces 21-25). Every
reader of a run's steps (the explorer, ``diagnose``, ``watch``) applies this same rule to the
samples it reads, matched to their steps by time: the hub stamps a step's values with its time.
"""

from __future__ import annotations

from collections.abc import Mapping

# the attempt each step of a run belongs to (1, 2, ...): a series the hub adds to each trainer
# batch with a step, same timestamp as its global step, so Grafana's panels join on it
# (server/stores/run_attempts.py); a client's key of that name is dropped
ATTEMPT_METRIC = "rl_insight_run_attempt"


def attempts(step_at: Mapping[float, int]) -> list[tuple[float, int]]:
    """(start time, first step) of each attempt after the first: where, in time order, the step
    went back."""
    found: list[tuple[float, int]] = []
    previous: int | None = None
    for t in sorted(step_at):
        step = step_at[t]
        if previous is not None and step < previous:
            found.append((t, step))
        previous = step
    return found


def superseded(step_at: Mapping[float, int]) -> set[float]:
    """The times whose samples a later attempt replaced (their step is at or after its first)."""
    later = attempts(step_at)
    if not later:
        return set()
    return {t for t, step in step_at.items() if any(start > t and first <= step for start, first in later)}
