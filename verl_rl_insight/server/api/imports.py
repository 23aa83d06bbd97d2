"""Finished runs imported from files (``POST /api/v1/runs/import``, ``GET /api/v1/runs/imports``):
written into the server's own Prometheus with their own steps and times (``managed/backfill.py``),
recorded as imported (``stores/imports.py``), and from then on drawn, listed and compared like any
run, but never taken for a live one: no stall, no alerts (their history is read back, never walked
live), "imported" wherever they are shown.

Refused, naming the field, and with nothing of the live runs touched: a body that breaks the rules
of ``contract/run_import.py`` (400/413), a name a live run logs under or that Prometheus holds from
a run that logged live (409), another file under an imported run's name (409), a server without its
own Prometheus or promtool (503). The same file under the same name again adds nothing (200,
``"added": 0``). One import is written at a time (a second meanwhile: 429 with Retry-After).
"""

from __future__ import annotations

import json
import time

from verl_rl_insight.contract.errors import BadInput, Busy, Conflict, Unavailable
from verl_rl_insight.contract.run_import import ImportBody, parse_body
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.api.context import Context
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.api.request import Request
from verl_rl_insight.server.managed.backfill import DAY_S, openmetrics, series_names, shift_days
from verl_rl_insight.server.stores.imports import Imported

Answer = dict[str, object]


def _live(parts: ApiParts, run: Run) -> bool:
    for stream in parts.hub.streams():
        labels = stream.get("labels")
        if isinstance(labels, dict) and (labels.get("project"), labels.get("experiment_name")) == run:
            return True
    return False


def _check_name(parts: ApiParts, body: ImportBody) -> Imported | None:
    """The run's record when this very file was imported under this name; Conflict when the name is taken."""
    run = (body.project, body.experiment)
    held = parts.imports.get(run)
    if held is not None:
        if held.sha256 == body.sha256:
            return held
        raise Conflict(
            f"experiment_name: {body.experiment!r} in project {body.project!r} was imported from another file "
            f"({held.source}, sha256 {held.sha256[:12]}...); import under another --experiment, or delete it "
            "first (rl-insight runs delete)"
        )
    if _live(parts, run):
        raise Conflict(
            f"experiment_name: a live run {body.experiment!r} in project {body.project!r} logs into this server; "
            "import under another --experiment"
        )
    reader = parts.explorer.prometheus if parts.explorer is not None else None
    if reader is not None and reader.has_run(body.project, body.experiment, time.time()):
        raise Conflict(
            f"experiment_name: Prometheus holds a run {body.experiment!r} in project {body.project!r} that logged "
            "here; import under another --experiment"
        )
    return None


def import_run(parts: ApiParts, raw: bytes) -> Answer:
    try:
        parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInput(f"body is not valid JSON: {str(exc)[:200]}") from None
    body = parse_body(parsed)
    if parts.import_blocks is None:
        raise Unavailable("imports need the server's own Prometheus and its promtool (rl-insight server start)")
    if not parts.imports.writing.acquire(blocking=False):
        raise Busy("another import is being written; retry shortly")
    try:
        held = _check_name(parts, body)
        if held is not None:
            return {"imported": held.as_json(), "added": 0, "note": "this file was imported under this name already"}
        now = time.time()
        newest = body.steps[-1]
        if newest.time > now + parts.max_future_s:
            raise BadInput(f"steps[{len(body.steps) - 1}][1]: the time of step {newest.step} is in the future")
        days = shift_days(body.steps[0].time, parts.retention_s, now)
        if body.steps[-1].time + days * DAY_S > now + parts.max_future_s:
            raise BadInput(
                "steps: the run spans more than Prometheus' retention keeps; import a part of it, or raise retention"
            )
        blocks = parts.import_blocks(openmetrics(body, days * DAY_S))
        record = Imported(
            body.project,
            body.experiment,
            body.source,
            body.format,
            body.sha256,
            f"shifted {days} days" if days else body.times,
            len(body.steps),
            body.steps[0].step,
            newest.step,
            len(body.keys),
            body.steps[0].time + days * DAY_S,
            newest.time + days * DAY_S,
            now,
            blocks,
        )
        parts.imports.add(record)
    finally:
        parts.imports.writing.release()
    names = series_names(body.keys)
    if parts.explorer is not None:
        parts.explorer.names.add(
            (body.project, body.experiment),
            {n: k for k, n in zip(body.keys, names) if n is not None},
        )
        parts.explorer.again((body.project, body.experiment))
    written = [i for i, n in enumerate(names) if n is not None]  # not a key the import writes itself
    values = sum(s.values[i] is not None for s in body.steps for i in written)
    return {"imported": record.as_json(), "added": values}


async def post_import(ctx: Context, request: Request) -> None:
    async with ctx.body(request) as raw:
        answer = await ctx.in_thread(import_run, ctx.parts, raw)
    await ctx.json(request, answer)


def imports_answer(parts: ApiParts, project: str | None, experiment: str | None) -> Answer:
    """The imported runs (of ``project``; ``experiment`` too: that one run, with ``loaded``: whether
    Prometheus has loaded its blocks yet, which it does about once a minute)."""
    reader = parts.explorer.prometheus if parts.explorer is not None else None
    rows: list[Answer] = []
    for record in parts.imports.runs():
        if project is not None and record.project != project:
            continue
        if experiment is not None:
            if record.experiment != experiment:
                continue
            loaded = reader.has_run(record.project, record.experiment, record.last_time + 1) if reader else False
            rows.append({**record.as_json(), "loaded": loaded})
        else:
            rows.append(record.as_json())
    return {"runs": rows}


async def get_imports(ctx: Context, request: Request) -> None:
    project, experiment = request.param("project"), request.param("experiment_name")
    await ctx.json_from(request, lambda: imports_answer(ctx.parts, project, experiment))
