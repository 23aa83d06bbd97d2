"""The two tools that change something, only with ``rl-insight mcp --allow-write``: a mark on a step
(``rl-insight runs mark``) and a profile request (``rl-insight profile``), each checked as the
command checks it and each logged to the MCP server's stderr (what, on which run, by whom: never
the credential). The server checks the credential again: a run credential marks its own run only,
and a profile request needs the token."""

from __future__ import annotations

import logging

from pydantic import JsonValue

from verl_rl_insight.commands.mcp import answers as a
from verl_rl_insight.commands.mcp.access import Refused
from verl_rl_insight.commands.mcp.reader import Json, Reader
from verl_rl_insight.commands.printable import printable
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.runs import Run

log = logging.getLogger("verl_rl_insight.mcp")


def mark_step(reader: Reader, run: Run, step: int, text: str, reset_baseline: bool | None) -> a.MarkMade:
    reader.run(run)  # a mistyped run is refused (404), not marked
    marks = reader.get(paths.RUN_MARKS, project=run[0], experiment_name=run[1]).get("marks")
    held = {m.get("step"): m for m in (marks if isinstance(marks, list) else []) if isinstance(m, dict)}
    if reset_baseline is None:  # as `runs mark`: a step marked again keeps its reset unless told otherwise
        reset_baseline = bool(held.get(step, {}).get("reset_baseline"))
    body: Json = {
        "project": run[0],
        "experiment_name": run[1],
        "step": step,
        "text": text,
        "reset_baseline": reset_baseline,
    }
    made = reader.post(paths.RUN_MARKS, body)
    log.warning(
        "mcp write: marked step %d of %s/%s (%s) by %s: %r",
        step,
        printable(run[0]),
        printable(run[1]),
        "baselines reset" if reset_baseline else "no reset",
        reader.credential.who(),
        printable(text)[:200],
    )
    return a.MarkMade(
        project=run[0],
        experiment=run[1],
        step=int(str(made.get("step", step))),
        text=str(made.get("text", text)),
        reset_baseline=bool(made.get("reset_baseline")),
    )


def request_profile(
    reader: Reader, run: Run, first: int, last: int | None, role: str | None, ranks: list[int] | None
) -> a.ProfileRequested:
    from verl_rl_insight.trainer.plugins.profiler_capability import refusal

    if reader.credential.is_run_credential:
        raise Refused("request_profile needs the server's token: a run credential writes its own run's data only")
    last = first if last is None else last
    if last < first:
        raise Refused(f"last_step: {last} is before first_step {first}")
    answer = reader.run(run)
    step = answer.get("step")
    if answer.get("state") == "finished":
        raise Refused(f"{run[0]}/{run[1]} has finished: it has no coming step to profile")
    if isinstance(step, int) and first <= step + 1:
        raise Refused(
            f"step {first} has begun or passed: {run[0]}/{run[1]} is at step {step}; ask for step {step + 2} or later"
        )
    picked: list[JsonValue] = [r for r in ranks or []]
    wanted: Json = {"role": role, "ranks": picked or None}
    able = reader.get(paths.PROFILES, project=run[0], experiment_name=run[1]).get("capability")
    if isinstance(able, dict):
        why = refusal(wanted, able)
        if why:
            raise Refused(f"this job's profiler cannot do it: {why}")
    body: Json = {"project": run[0], "experiment_name": run[1], "first_step": first, "last_step": last}
    body.update({k: v for k, v in wanted.items() if v})
    record = reader.post(paths.PROFILES, body)
    log.warning(
        "mcp write: requested a profile of steps %d..%d of %s/%s by %s (request %s)",
        first,
        last,
        printable(run[0]),
        printable(run[1]),
        reader.credential.who(),
        record.get("id"),
    )
    return a.ProfileRequested(
        id=str(record.get("id")),
        project=run[0],
        experiment=run[1],
        first_step=first,
        last_step=last,
        state=str(record.get("state")),
        note="the trainer takes it at its next step boundary; profile_analyze of the step reads it once made",
    )
