"""``rl-insight diagnose --baseline B``: the run's headline curves held against a baseline of its
project (an imported run, last week's): where each parts from it, by how much, and how close it
stayed before, e.g. "critic/score/mean 0.18 below the baseline at step 120, within 0.02 to step 90".
Where the curves part is ``mcp/curves.py``'s rule (what ``runs diff`` and ``compare_runs`` say); the
curves are read as ``runs diff`` reads them (``runs_parting.py``)."""

from __future__ import annotations

from typing import NamedTuple

from verl_rl_insight.commands.mcp.curves import parting
from verl_rl_insight.commands.runs_parting import shared_curves
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.verl_keys import ENTROPY, RESPONSE_LENGTH_MEAN, SCORE_KEYS

CANNOT = 2  # diagnose's exit code: could not diagnose
HEADLINE = (*SCORE_KEYS, RESPONSE_LENGTH_MEAN, ENTROPY)


def _num(x: float) -> str:
    """A difference as a person reads it: 3010, not 3.01e+03; 0.018, not 0.01800000001."""
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


class AgainstBaseline(NamedTuple):
    key: str
    step: int  # the newest step both logged
    difference: float  # the run's value minus the baseline's there
    parts_at: int | None  # from here on it stays apart (None: it has not)
    within: float  # the largest difference before it parted (or to the newest step)
    apart_from: int | None  # the first shared step, where it was as far apart from the start

    def line(self) -> str:
        side = "above" if self.difference > 0 else "below"
        if self.apart_from is not None:
            return (
                f"{self.key} {_num(abs(self.difference))} {side} the baseline at step {self.step}, "
                f"as far apart from step {self.apart_from} on"
            )
        if self.parts_at is None:
            return f"{self.key} within {_num(self.within)} of the baseline to step {self.step}"
        return (
            f"{self.key} {_num(abs(self.difference))} {side} the baseline at step {self.step}, "
            f"was within {_num(self.within)} to step {self.parts_at - 1}"
        )


def against(base: str, token: str | None, run: Run, baseline: Run) -> list[AgainstBaseline]:
    keys, mine, theirs = shared_curves(base, token, run, baseline, HEADLINE, code=CANNOT)
    found = []
    for key in keys:
        a = {s: v for s, v in zip(mine.steps, mine.series[key]) if v is not None}
        b = {s: v for s, v in zip(theirs.steps, theirs.series[key]) if v is not None}
        parted = parting(key, a, b)
        if parted is None:
            continue
        shared = sorted(set(a) & set(b))
        before = [s for s in shared if parted.parts_at is None or s < parted.parts_at] or shared[:1]
        within = max(abs(a[s] - b[s]) for s in before)
        apart = shared[0] if parted.parts_at is None and abs(parted.level) > 3 * parted.spread else None
        found.append(AgainstBaseline(key, shared[-1], a[shared[-1]] - b[shared[-1]], parted.parts_at, within, apart))
    return found
