"""Where two runs' curves part (``rl-insight runs diff``): every key both logged, read through the
explorer's curves as ``rl-insight mcp``'s ``compare_runs`` reads them, and ``mcp/curves.py``'s rule:
the first step from which their difference stays beyond 3x its own step-to-step noise."""

from __future__ import annotations

from verl_rl_insight.commands.baseline import logged_keys
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.mcp.access import Checks, Credential, Refused
from verl_rl_insight.commands.mcp.curves import Parting, parted
from verl_rl_insight.commands.mcp.reader import Reader
from verl_rl_insight.commands.mcp.tools import COMPARED_KEYS
from verl_rl_insight.contract.runs import Run


def parting_keys(base: str, token: str | None, first: Run, second: Run) -> tuple[list[Parting], int]:
    """The keys whose curves part, the farthest apart first; and how many keys both runs logged."""
    reader = Reader(base, Credential(token, over_http=False), Checks())
    try:
        shared = sorted(logged_keys(reader.run(first)) & logged_keys(reader.run(second)))[:COMPARED_KEYS]
        if not shared:
            return [], 0
        a, b = reader.curves(first, shared, None, None), reader.curves(second, shared, None, None)
    except Refused as exc:
        raise CliError(str(exc), code=PROBLEMS) from None
    return parted(shared, a.steps, a.series, b.steps, b.series), len(shared)
