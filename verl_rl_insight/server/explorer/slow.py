"""What moved with a step whose time left the run's level, for the step page: ``health/moved.py``
(what ``rl-insight diagnose`` prints) over the steps around it only, so a page of a long run
costs a few dozen steps' values, not its whole history."""

from __future__ import annotations

import bisect
import math

from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health import moved

BEFORE = moved.WINDOW * 3  # steps before the step: its level, and a range that began earlier
AFTER = moved.WINDOW  # and after: the range it is in, to its end (a range longer than this is a new level)


def moved_at(sources: Sources, run: tuple[str, str], step: int) -> list[dict[str, object]]:
    """The ranges of steps around ``step`` that hold it and left their level, with what moved."""
    history = sources.history(run)
    if history is None:
        return []
    with sources.histories.lock:  # copied out under it; the walk runs outside (pushes wait on it)
        first = bisect.bisect_left(history.steps, step - BEFORE)
        last = bisect.bisect_right(history.steps, step + AFTER)
        steps = history.steps[first:last]
        local = {
            name: [(s, x) for s, x in zip(steps, column[first:last]) if math.isfinite(x)]
            for name, column in history.columns.items()
        }
    return [
        moved.as_json(exc, with_it)
        for exc, with_it in moved.what_moved(local)
        if exc.first_step <= step <= exc.last_step
    ]
