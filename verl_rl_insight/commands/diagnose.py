"""``rl-insight diagnose --project P --experiment E [--steps A:B] [--json]``: the run's whole
history read back from Prometheus, walked by the same detectors the server runs on every step
(``server/health/detectors.py``), and the findings ranked by severity.

``rl-insight diagnose --file RUN.jsonl [--json]``: a finished run without a server, from verl's
``file`` logger output or a ``runs export`` CSV (``commands/run_file.py``): the same walk, findings
and exit codes.

Exit codes: 0 nothing found (or information only: a plateau), 1 a warning or critical finding,
2 could not diagnose (usage, an unknown run, no Prometheus, a file that is not a run).
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from verl_rl_insight.commands import marks as run_marks
from verl_rl_insight.commands.api import SubParsers, call, common_options, server
from verl_rl_insight.commands.baseline import AgainstBaseline, against
from verl_rl_insight.commands.checks import CliError
from verl_rl_insight.commands.incidents_text import print_incidents
from verl_rl_insight.commands.run_file import RunFileError, read_run
from verl_rl_insight.commands.timeline.command import steps_range
from verl_rl_insight.commands.watch.data import DataError, Prometheus
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.attempts import superseded
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, STEP_TIME_METRIC
from verl_rl_insight.contract.profile_summary import analyze_command
from verl_rl_insight.contract.promql import run_selector
from verl_rl_insight.contract.runs import RUN_FINISHED
from verl_rl_insight.server.health import detectors, moved, side_series
from verl_rl_insight.server.health.incidents import incidents
from verl_rl_insight.server.settings.health import HealthSettings

CANNOT = 2
CHUNK_S = 2 * 3600  # raw samples are read in windows of this length, newest first
MAX_S = 35 * 86400  # and no further back than this (Prometheus' retention is 30 days by default)
DASHBOARD = "verl_trainer_v1_with_vllm_engine"


def _names(validation_keys: Sequence[str] = ()) -> str:
    """The series the detectors read (the server's walk reads the same: ``server/health/walk.py``),
    the validation keys named for this run among them; what moved with a slow step is looked for
    among them too."""
    keys = {k for d in detectors.ALL for k in (*d.keys, *d.extra)} | set(detectors.NON_FINITE_KEYS)
    keys |= set(validation_keys)
    wanted = {detectors.series_name(k) for k in keys if not k.endswith("/")} | {GLOBAL_STEP_METRIC}
    families = {detectors.series_name(k) + ".*" for k in keys if k.endswith("/")}
    return "|".join(sorted(wanted) + sorted(families))


def read_history(
    prom: Prometheus, project: str, experiment: str, now: float, validation_keys: Sequence[str] = ()
) -> tuple[dict[str, Any], list[Any]]:
    """({series name: [(step, value)]}, [(step, first time seen)]) of the run's trainer scalars.

    Raw samples (every scrape's, in windows of CHUNK_S going back until the run's start): each is
    matched to its step by the global-step sample of the same timestamp, since the hub stamps a
    step's values and its step with one time."""
    selector = run_selector(project, experiment)[1:-1]
    query = f'{{__name__=~"{_names(validation_keys)}",{selector}}}'
    samples: dict[str, dict[float, float]] = {}
    end, seen_run = now, False
    while now - end < MAX_S:
        found = prom.query(f"{query}[{CHUNK_S}s] @ {end:.3f}")
        useful = [
            r for r in found if set(r["metric"]) - {"__name__", "job", "instance"} == {"project", "experiment_name"}
        ]
        for r in useful:
            into = samples.setdefault(r["metric"]["__name__"], {})
            for t, v in r["values"]:
                into.setdefault(float(t), float(v))
        steps_here = any(r["metric"]["__name__"] == GLOBAL_STEP_METRIC and r["values"] for r in useful)
        if seen_run and not steps_here:
            break
        seen_run = seen_run or steps_here
        end -= CHUNK_S
    step_at = {t: int(v) for t, v in samples.pop(GLOBAL_STEP_METRIC, {}).items()}
    for t in superseded(step_at):  # the name used again from an earlier step: the newest attempt's steps
        del step_at[t]
    history: dict[str, list[tuple[int, float]]] = {}
    for name, values in samples.items():
        by_step: dict[int, float] = {}
        for t in sorted(values):
            if t in step_at:
                by_step.setdefault(step_at[t], values[t])
        history[name] = sorted(by_step.items())
    first_seen: dict[int, float] = {}
    for t in sorted(step_at):
        first_seen.setdefault(step_at[t], t)
    return history, sorted(first_seen.items())


def panel_link(grafana: str | None, project: str, experiment: str) -> str:
    if not grafana:
        return ""
    query = urllib.parse.urlencode({"var-project": project, "var-experiment_name": experiment})
    return f"{grafana}/d/{DASHBOARD}?{query}"


def card_validation_keys(base: str, token: str | None, project: str, experiment: str) -> list[str]:
    """The validation keys the run names in its config (``rl_insight.health.validation_keys``, read
    from the card the server keeps; [] without a card, or where the setting was ignored)."""
    from verl_rl_insight.commands.run_card import fetch
    from verl_rl_insight.server.health.card_keys import validation_keys

    try:
        _, card = fetch(base, token, (project, experiment))
    except CliError:
        return []
    return validation_keys(card)[0]


def logged_names(base: str, token: str | None, project: str, experiment: str) -> dict[str, str]:
    """The names the detectors give the run's series -> the keys as the trainer logged them (the
    server keeps what the trainer said; {} from a server older than that)."""
    from verl_rl_insight.server.explorer.keys import logged_names as named

    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    try:
        return named(call("GET", f"{base}{paths.RUN_KEYS}?{query}", token)["keys"])
    except (CliError, KeyError, TypeError, AttributeError):
        return {}


def run(args: argparse.Namespace) -> int:
    if args.file is not None:
        return from_file(args)
    if not args.project or not args.experiment:
        raise CliError("--project and --experiment name the run (or --file RUN.jsonl: a run's file)", code=CANNOT)
    base, token = server(args)
    info = call("GET", base + paths.INFO, token)
    prom_url = args.prometheus or info.get("prometheus")
    if not prom_url or (not args.prometheus and "prometheus" not in info.get("services", ("prometheus",))):
        raise CliError(f"the server at {base} runs no Prometheus", fix="give --prometheus URL", code=CANNOT)
    prom = Prometheus(prom_url, timeout=30)
    # the keys named here, by the run's own config (its card) and by the server's: in that order
    run_keys = card_validation_keys(base, token, args.project, args.experiment)
    keys = [*(args.validation_key or ()), *run_keys, *(info.get("validation_keys") or ())]
    try:
        history, times = read_history(prom, args.project, args.experiment, time.time(), keys)
        finished = prom.scalar(f"{RUN_FINISHED}{run_selector(args.project, args.experiment)}") == 1
    except DataError as exc:
        raise CliError(str(exc), code=CANNOT) from None
    if not times:
        from verl_rl_insight.commands.profile import known_run

        known_run(base, token, args.project, args.experiment)  # a mistyped run: refused, the known ones named
        raise CliError(f"no step of {args.project}/{args.experiment} in Prometheus", code=CANNOT)
    params = HealthSettings.from_wire(info.get("health") or {})  # a newer server's own settings: ignored
    marks = run_marks.fetch(base, token, args.project, args.experiment)  # rl-insight runs mark
    resets = run_marks.resets(marks)
    walk = detectors.walked(history, times, params=params, resets=resets, validation_keys=keys)
    findings = walk.findings(finished, time.time())
    link = panel_link(
        info.get("grafana") if "grafana" in info.get("services", ()) else None, args.project, args.experiment
    )
    named = {detectors.series_name(k): k for k in keys if not k.endswith("/")}  # a key named is a key logged
    names = named | logged_names(base, token, args.project, args.experiment)
    for finding in findings:
        finding.panel = f"{finding.panel}: {link}" if link else finding.panel
        finding.metric = names.get(finding.metric, finding.metric)  # the key as the trainer logged it
    run_id = {"project": args.project, "experiment_name": args.experiment}
    history = with_side_series(prom, args, history, times)
    steps = (times[0][0], times[-1][0])
    found = profiled(base, token, args.project, args.experiment)
    held = (
        against(base, token, (args.project, args.experiment), (args.project, args.baseline)) if args.baseline else None
    )
    code = report(
        args, f"{args.project}/{args.experiment}", run_id, steps, findings, history, found, walk.alerted, held
    )
    if not args.json:
        run_marks.print_marks(marks)
    return code


def from_file(args: argparse.Namespace) -> int:
    """A finished run from verl's ``file`` logger output or a ``runs export`` CSV."""
    path = Path(args.file)
    try:
        history = read_run(path)
    except RunFileError as exc:
        raise CliError(str(exc), code=CANNOT) from None
    steps = sorted({s for values in history.values() for s, _ in values})
    if not steps:
        raise CliError(f"{path}: no step with a number in it", code=CANNOT)
    times = history.pop(STEP_TIME_METRIC, [])  # a runs export CSV has each step's own time
    read = {k for d in detectors.ALL for k in (*d.keys, *d.extra)} | set(detectors.NON_FINITE_KEYS)
    names = {detectors.series_name(k) for k in read if not k.endswith("/")}
    families = tuple(detectors.series_name(k) for k in read if k.endswith("/"))
    if not any(name in names or name.startswith(families) for name in history):
        raise CliError(
            f"{path}: none of the keys the detectors read is in it: nothing was checked",
            fix="give a file of verl's keys (actor/pg_loss, critic/score/mean, actor/entropy, ...), as verl's "
            "file logger or `rl-insight runs export` writes them",
            code=CANNOT,
        )
    walk = detectors.walked(history, times, validation_keys=args.validation_key or ())
    found = walk.findings()
    return report(args, str(path), {"file": str(path)}, (steps[0], steps[-1]), found, history, alerted=walk.alerted)


SLOW_SHOWN = 3  # the ranges whose time left the run's level furthest


class Profiled(NamedTuple):
    """A step profiled through ``rl-insight profile``: the answer of its traces, and the command
    that gives their whole analysis (None when the trainer did not say where they are)."""

    step: int
    answer: str
    command: str | None


def profiled(base: str, token: str | None, project: str, experiment: str) -> dict[int, Profiled]:
    """The run's profiled steps whose per-rank summary the server holds, by step (none from a
    server without profile requests)."""
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    try:
        listed = call("GET", f"{base}{paths.PROFILES}?{query}", token)
    except CliError:
        return {}
    found: dict[int, Profiled] = {}
    for record in listed.get("profiles", []) if isinstance(listed, dict) else []:
        if not isinstance(record, dict) or not isinstance(record.get("summaries"), dict):
            continue
        trace_dir = record.get("trace_dir")
        for step, summary in record["summaries"].items():
            if str(step).isdigit() and isinstance(summary, dict):
                command = analyze_command(trace_dir, int(step)) if isinstance(trace_dir, str) else None
                found[int(step)] = Profiled(int(step), str(summary.get("answer", ""))[:500], command)
    return found


def _profiled_in(exc: Any, found: dict[int, Profiled]) -> list[Profiled]:
    return [found[s] for s in sorted(found) if exc.first_step <= s <= exc.last_step]


def _slow(args: argparse.Namespace, history: dict[str, Any]) -> list[Any]:
    """The ranges where the step time (or a phase's) left its level, within ``--steps``."""
    first, last = args.steps or (None, None)
    return [
        (e, m)
        for e, m in moved.what_moved(history)
        if (first is None or e.last_step >= first) and (last is None or e.first_step <= last)
    ]


def with_side_series(
    prom: Prometheus, args: argparse.Namespace, history: dict[str, side_series.Series], times: list[tuple[int, float]]
) -> dict[str, side_series.Series]:
    """``history`` and the run's engine, TransferQueue and GPU series (``health/side_series.py``)
    over the steps of the ranges shown, as candidates of what moved with them; ``history`` alone
    when none is shown or Prometheus will not give them."""
    shown = moved.largest(_slow(args, history), SLOW_SHOWN)
    around = side_series.around(times, {s for e, _ in shown for s in (*e.baseline_steps, *e.steps)})

    def query(promql: str) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        return [(r["metric"], [(float(t), float(v)) for t, v in r.get("values", ())]) for r in prom.query(promql)]

    try:
        side = side_series.read(query, args.project, args.experiment, around)
    except DataError:  # (too many samples for one query, say): the trainer's keys alone
        return history
    return {**history, **side}


def _print_slow(slow: list[Any], found: dict[int, Profiled]) -> None:
    if not slow:
        return
    print(f"\ntime: {len(slow)} range(s) of steps left the run's own level; what moved with the largest:")
    for exc, with_it in moved.largest(slow, SLOW_SHOWN):
        print("  " + "\n  ".join(moved.describe(exc, with_it)))
        for p in _profiled_in(exc, found):  # why that step was slow, from its traces
            print(f"    profiled: {p.answer}")
            if p.command:
                print(f"      the whole analysis: {p.command}")


def report(
    args: argparse.Namespace,
    name: str,
    run_id: dict[str, str],
    steps: tuple[int, int],
    found: list[Any],
    history: dict[str, Any],
    profiles: dict[int, Profiled] | None = None,
    alerted: set[str] | None = None,
    baseline: list[AgainstBaseline] | None = None,
) -> int:
    """The findings within ``--steps``, ranked and grouped into incidents, as text or JSON; the exit
    code. The slow ranges name the steps in them that were profiled, with the answer of their traces.
    ``alerted``: the detectors whose alert the walk fired (one an incident)."""
    first, last = args.steps or (None, None)
    profiles = profiles or {}
    findings = [f for f in found if (first is None or f.last_step >= first) and (last is None or f.first_step <= last)]
    grouped = incidents(findings, history)
    code = 1 if any(f.severity != "info" for f in findings) else 0
    slow = _slow(args, history)
    if args.json:
        out = {**run_id, "steps": list(steps), "findings": [f.as_json() for f in findings]}
        out["incidents"] = [i.as_json() for i in grouped]
        out["alerted"] = sorted(alerted or ())
        if baseline is not None:
            out["baseline"] = [{**b._asdict(), "line": b.line()} for b in baseline]
        out["slow_steps"] = [
            {**moved.as_json(e, m), "profiled": [p._asdict() for p in _profiled_in(e, profiles)]}
            for e, m in moved.largest(slow, SLOW_SHOWN)
        ]
        print(json.dumps(out))
        return code
    span_all = f"steps {steps[0]}-{steps[1]}"
    if not findings:
        print(f"{name} ({span_all}): no finding ({len(detectors.ALL)} detectors)")
    else:
        print_incidents(name, span_all, grouped)
    _print_slow(slow, profiles)
    if baseline is not None:
        print(f"against the baseline {args.baseline}:" if baseline else f"no headline key shared with {args.baseline}")
        for held in baseline:
            print(f"  {held.line()}")
    return code


def add_parsers(sub: SubParsers) -> None:
    parser = sub.add_parser(
        "diagnose",
        help="find known RL failure modes in a run's whole history (what the alerts find online)",
        description="Exit codes: 0 nothing found (or information only), 1 a warning or critical finding, "
        "2 could not diagnose.",
    )
    parser.add_argument("--project", help="the run's project (read from the server's Prometheus)")
    parser.add_argument("--experiment", help="the experiment_name")
    parser.add_argument(
        "--file",
        help="a finished run without a server: verl's file logger output (trainer.logger=['file'], JSONL) "
        "or a `runs export` CSV",
    )
    parser.add_argument(
        "--steps", type=steps_range, help="only findings within these steps: A:B (both included), A:, :B"
    )
    parser.add_argument("--prometheus", help="read this Prometheus instead of the server's")
    parser.add_argument(
        "--baseline",
        metavar="EXPERIMENT",
        help="a run of the same project to hold the headline curves against (rl-insight runs import one)",
    )
    parser.add_argument(
        "--validation-key",
        action="append",
        metavar="KEY",
        help="a verl key the run validates under beyond verl's own names (val-core/, val-aux/, val/, test_score/); "
        "a family ends in / (val-aux/my_task/); repeat for more; followed first",
    )
    common_options(parser, top=True)
    parser.set_defaults(func=run)
