"""Two runs' curves side by side, read through the explorer's curves as ``rl-insight mcp``'s
``compare_runs`` reads them: where they part (``rl-insight runs diff``: every key both logged, by
``mcp/curves.py``'s rule, the first step from which their difference stays beyond 3x its own
step-to-step noise), and the headline keys ``diagnose --baseline`` holds a run against."""

from __future__ import annotations

from collections.abc import Sequence

from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.mcp.access import Checks, Credential, Refused
from verl_rl_insight.commands.mcp.curves import Parting, parted
from verl_rl_insight.commands.mcp.reader import CurveData, Reader
from verl_rl_insight.commands.mcp.tools import COMPARED_KEYS
from verl_rl_insight.contract.runs import Run


def logged_keys(answer: object) -> set[str]:
    keys = answer.get("keys") if isinstance(answer, dict) else None
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def shared_curves(
    base: str, token: str | None, first: Run, second: Run, wanted: Sequence[str] | None = None, code: int = PROBLEMS
) -> tuple[list[str], CurveData, CurveData]:
    """The keys both runs logged (of ``wanted``, in its order; else all, by name, at most COMPARED_KEYS)
    and both runs' curves of them; a refusal is a CliError of ``code``."""
    reader = Reader(base, Credential(token, over_http=False), Checks())
    empty = CurveData([], {}, {}, 1)
    try:
        both = logged_keys(reader.run(first)) & logged_keys(reader.run(second))
        keys = [k for k in wanted if k in both] if wanted is not None else sorted(both)[:COMPARED_KEYS]
        if not keys:
            return [], empty, empty
        return keys, reader.curves(first, keys, None, None), reader.curves(second, keys, None, None)
    except Refused as exc:
        raise CliError(str(exc), code=code) from None


def parting_keys(base: str, token: str | None, first: Run, second: Run) -> tuple[list[Parting], int]:
    """The keys whose curves part, the farthest apart first; and how many keys both runs logged."""
    keys, a, b = shared_curves(base, token, first, second)
    return parted(keys, a.steps, a.series, b.steps, b.series), len(keys)
