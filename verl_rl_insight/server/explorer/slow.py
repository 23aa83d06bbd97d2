"""What moved with a step whose time left the run's level, for the step page: ``health/moved.py``
(what ``rl-insight diagnose`` prints) over the steps around it only, so a page of a long run
costs a few dozen steps' values, not its whole history. When the step is in such a range, the run's
engine, TransferQueue and GPU series over those steps are read from the server's Prometheus
(``health/side_series.py``) and ranked with the trainer's keys."""

from __future__ import annotations

import bisect
import math

from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health import moved, side_series

BEFORE = moved.WINDOW * 3  # steps before the step: its level, and a range that began earlier
AFTER = moved.WINDOW  # and after: the range it is in, to its end (a range longer than this is a new level)


def moved_at(sources: Sources, run: Run, step: int) -> list[dict[str, object]]:
    """The ranges of steps around ``step`` that hold it and left their level, with what moved."""
    history = sources.history(run)
    if history is None:
        return []
    with sources.histories.lock:  # copied out under it; the walk runs outside (pushes wait on it)
        first = bisect.bisect_left(history.steps, step - BEFORE)
        last = bisect.bisect_right(history.steps, step + AFTER)
        steps = history.steps[first:last]
        times = list(zip(steps, history.times[first:last]))
        local = {
            name: [(s, x) for s, x in zip(steps, column[first:last]) if math.isfinite(x)]
            for name, column in history.columns.items()
        }
    holding = [(exc, with_it) for exc, with_it in moved.what_moved(local) if exc.first_step <= step <= exc.last_step]
    if holding and sources.prometheus is not None:
        wanted = {s for exc, _ in holding for s in (*exc.baseline_steps, *exc.steps)}
        around = side_series.around(times, wanted)
        side = side_series.read(sources.prometheus.samples, run[0], run[1], around)
        if side:
            local.update(side)
            holding = [(exc, moved.associated(local, exc)) for exc, _ in holding]
    return [moved.as_json(exc, with_it) for exc, with_it in holding]
