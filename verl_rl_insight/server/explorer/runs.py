"""The runs list (``/api/v1/explorer/runs``) and one run's page (``/api/v1/explorer/run``)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.errors import NotFound
from verl_rl_insight.contract.run_card import ABSENT, Json, differences
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.verl_keys import ENTROPY, SCORE_KEYS
from verl_rl_insight.server.explorer.findings import Finding, shown
from verl_rl_insight.server.explorer.keys import PREFIX, key_of, logged_names, panels, series_of
from verl_rl_insight.server.explorer.samples_seen import of_run
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.incidents import CLIP_SERIES, incidents

IDLE_AFTER_S = 600.0  # no step for this long (and five median steps): idle, not running (`runs list`: 600 s)
SPARK_POINTS = 100
BACKFILL_RUNS = 16  # runs the list reads back from Prometheus after a restart, newest first
SPARK_KEYS = (*SCORE_KEYS, ENTROPY)
Answer = dict[str, object]


class Marks(Protocol):
    def of_run(self, project: str, experiment: str) -> dict[str, object]: ...


class Cards(Protocol):
    def get(self, project: str, experiment: str) -> dict[str, Json]: ...


class HubRun(NamedTuple):
    age_s: float | None  # seconds since its newest step (its trainer's time)
    step: int | None  # its newest step the hub holds (kept across restarts, as the hub's streams are)


def _hub_runs(streams: Sequence[Mapping[str, object]]) -> dict[Run, HubRun]:
    """run -> its newest step and that step's age, from the hub's streams."""
    found: dict[Run, HubRun] = {}
    for stream in streams:
        labels = stream.get("labels")
        if not isinstance(labels, dict) or "project" not in labels or "experiment_name" not in labels:
            continue
        run = (str(labels["project"]), str(labels["experiment_name"]))
        age, step = stream.get("last_step_s_ago"), stream.get("step")
        seconds = float(age) if isinstance(age, (int, float)) else None
        newest = step if isinstance(step, int) and not isinstance(step, bool) else None
        kept = found.get(run, HubRun(None, None))
        found[run] = HubRun(
            seconds if kept.age_s is None else (kept.age_s if seconds is None else min(kept.age_s, seconds)),
            newest if kept.step is None else (kept.step if newest is None else max(kept.step, newest)),
        )
    return found


def marks_of(marks: Marks, run: Run) -> list[dict[str, Json]]:
    listed = marks.of_run(*run).get("marks")
    return [
        {
            "step": int(str(m.get("step"))),
            "text": str(m.get("text", "")),
            "reset_baseline": bool(m.get("reset_baseline")),
        }
        for m in (listed if isinstance(listed, list) else [])
        if isinstance(m, dict)
    ]


def findings_of(sources: Sources, run: Run, marks: Marks) -> list[Finding]:
    return _findings(sources, run, marks)[1]


def _findings(sources: Sources, run: Run, marks: Marks) -> tuple[list[detectors.Finding], list[Finding]]:
    """The run's findings, as the walk holds them and as the page shows them (each naming its key
    as the trainer logged it)."""
    resets = sorted(int(str(m["step"])) for m in marks_of(marks, run) if m["reset_baseline"])
    walked = sources.health.run_findings(run, resets)
    names = logged_names(sources.logged(run))
    found = [shown(f) for f in walked]
    return walked, [{**f, "key": names[str(f["key"])]} if str(f["key"]) in names else f for f in found]


def incidents_of(sources: Sources, run: Run, walked: list[detectors.Finding]) -> list[Answer]:
    """The run's findings grouped into incidents (``health/incidents.py``), each naming its findings
    by their place in the answer's ``findings``."""
    history = sources.history(run)
    clip = {CLIP_SERIES: history.series(CLIP_SERIES)} if history is not None and CLIP_SERIES in history.columns else {}
    place = {id(f): i for i, f in enumerate(walked)}
    return [
        {
            **{k: v for k, v in incident.as_json().items() if k != "findings"},
            "chain": [
                {
                    "signal": link.signal,
                    "detector": link.detector,
                    "first_step": link.first_step,
                    "severity": link.severity,
                }
                for link in incident.chain
            ],
            "findings": [place[id(f)] for f in incident.findings],
        }
        for incident in incidents(walked, clip)
    ]


def _summary(sources: Sources, run: Run, hub: HubRun, now: float) -> Answer:
    """One row of the runs list (read under the histories' lock): from the run's step table, or
    from the hub's streams for a run the explorer has not read since the server started."""
    history = sources.histories.get(run)
    age = hub.age_s
    step = history.steps[-1] if history and history.steps else hub.step
    at = history.times[-1] if history and history.steps else (now - age if age is not None else None)
    age = now - at if at is not None else age
    durations = [b - a for a, b in zip(history.times[-21:], history.times[-20:])] if history else []
    patience = max(IDLE_AFTER_S, 5 * statistics.median(durations)) if durations else IDLE_AFTER_S
    if sources.imports.get(run) is not None:
        state = "imported"  # a finished run from a file: never running, never idle
    elif history is not None and history.finished == 1:
        state = "finished"
    else:
        state = "running" if age is not None and age <= patience else "idle"
    spark: Answer = {"key": None, "steps": [], "values": []}
    for key in SPARK_KEYS:
        column = history.columns.get(series_of(key)) if history else None
        if history is not None and column is not None:
            stride = max(1, math.ceil(len(column) / SPARK_POINTS))
            values = column[::stride].tolist()
            spark = {
                "key": key,
                "steps": history.steps[::stride],
                "values": [x if math.isfinite(x) else None for x in values],
            }
            break
    return {"project": run[0], "experiment": run[1], "step": step, "last_step_time": at, "age_s": age, "state": state,
            "sparkline": spark, "imported": imported_of(sources, run)}  # fmt: skip


def imported_of(sources: Sources, run: Run) -> Answer | None:
    """Where an imported run came from (None: a run that logged here)."""
    record = sources.imports.get(run)
    if record is None:
        return None
    return {"source": record.source, "format": record.format, "times": record.times, "imported_at": record.imported_at}


def _age_or_inf(hub: HubRun) -> float:
    return math.inf if hub.age_s is None else hub.age_s


def runs_answer(streams: Sequence[Mapping[str, object]], sources: Sources, marks: Marks) -> Answer:
    now = time.time()
    ages = _hub_runs(streams)
    # a run the hub knows (its streams outlive a restart) whose steps the explorer has not read since
    # the server started: read back from Prometheus now, so that the list says what its page and
    # `rl-insight runs list` say (finished, its sparkline), the newest runs first, at most BACKFILL_RUNS
    unread = [run for run in ages if sources.histories.get(run) is None]
    unread.sort(key=lambda run: _age_or_inf(ages[run]))
    imported = sorted(sources.imports.runs(), key=lambda r: -r.imported_at)
    unread_imports = [
        (r.project, r.experiment) for r in imported if sources.histories.get((r.project, r.experiment)) is None
    ]
    for run in unread[:BACKFILL_RUNS] + unread_imports[:BACKFILL_RUNS]:
        sources.history(run)
    for record in imported:
        ages.setdefault((record.project, record.experiment), HubRun(None, None))
    for run in sources.histories.runs():
        ages.setdefault(run, HubRun(None, None))
    rows = []
    for run, age in ages.items():
        with sources.histories.lock:
            row = _summary(sources, run, age, now)
        counts = {"critical": 0, "warning": 0, "info": 0}
        for finding in findings_of(sources, run, marks):
            counts[str(finding["severity"])] = counts.get(str(finding["severity"]), 0) + 1
        rows.append({**row, "findings": counts})
    rows.sort(key=lambda r: -(r["last_step_time"] or 0.0) if isinstance(r["last_step_time"], float) else 0.0)
    return {"runs": rows}


def card_diff(cards: Cards, first: Run, second: Run) -> Answer | None:
    """The keys in which two runs' cards differ, as ``rl-insight runs diff P/FIRST P/SECOND`` lists
    them (``contract.run_card.differences``); None when either run sent no card."""
    try:
        a, b = cards.get(*first), cards.get(*second)
    except NotFound:
        return None
    mine, theirs = a.get("card"), b.get("card")
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return None
    found, by_nature = differences(mine, theirs)
    rows = [[d.key, None if d.first is ABSENT else d.first, None if d.second is ABSENT else d.second] for d in found]
    return {"first": first[1], "second": second[1], "differences": rows, "by_nature": len(by_nature)}


def run_answer(
    run: Run,
    streams: Sequence[Mapping[str, object]],
    sources: Sources,
    marks: Marks,
    cards: Cards,
    card_ok: bool,
    diff_from: str | None = None,
) -> Answer:
    ages = _hub_runs(streams)
    history = sources.history(run)
    if history is None and run not in ages and sources.imports.get(run) is None:
        raise NotFound(f"experiment_name: no run {run[0][:100]!r} / {run[1][:100]!r} here (GET {paths.EXPLORER_RUNS})")
    try:
        kept: dict[str, Json] | None = cards.get(*run)
    except NotFound:
        kept = None
    sent = kept.get("card") if kept is not None else None  # its batch size is shown to anyone, the card is not
    with sources.histories.lock:
        row = _summary(sources, run, ages.get(run, HubRun(None, None)), time.time())
        names = list(history.columns) if history is not None else []
        seen = of_run(history, sent if isinstance(sent, dict) else None)
    logged = sources.logged(run)  # kept with the run's files: as logged after a restart too
    keys = sorted({logged.get(n) or key_of(n) for n in names if n.startswith(PREFIX)})
    card: Json = kept if card_ok else None
    others = (
        {r for r in ages} | set(sources.histories.runs()) | {(r.project, r.experiment) for r in sources.imports.runs()}
    )
    diff = card_diff(cards, (run[0], diff_from), run) if card_ok and diff_from else None
    walked, shown_findings = _findings(sources, run, marks)
    return {
        "project": run[0],
        "experiment": run[1],
        "state": row["state"],
        "imported": row["imported"],
        "step": row["step"],
        "samples_seen": {"per_step": seen.per_step, "from": seen.source},
        "keys": keys,
        "panels": panels(keys, sources.params),
        "findings": shown_findings,
        "incidents": incidents_of(sources, run, walked),
        "marks": marks_of(marks, run),
        "others": sorted(e for p, e in others if p == run[0] and e != run[1]),
        "others_imported": sorted(r.experiment for r in sources.imports.runs() if r.project == run[0]),
        "card": card,
        "card_needs_token": not card_ok,
        **({"card_diff": diff} if diff is not None else {}),
    }
