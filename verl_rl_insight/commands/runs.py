"""``rl-insight runs list | export | delete``: the runs the server knows, as a table, as a file
(one row per step, one column per logged scalar), or gone; ``runs mark | marks | unmark``: notes on
a run's steps (commands/marks.py)."""

import argparse
import csv
import json
import os
import sys
import time
import urllib.parse
from typing import Any

from verl_rl_insight.commands import marks, run_card, runs_import
from verl_rl_insight.commands.api import SubParsers, call, common_options, print_table, server
from verl_rl_insight.commands.checks import PROBLEMS, REFUSED, CliError
from verl_rl_insight.commands.watch.data import PREFIX, STEP, DataError, Prometheus
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.naming import STEP_TIME_METRIC
from verl_rl_insight.contract.promql import run_selector
from verl_rl_insight.contract.runs import RUN_FINISHED, Run


def _prometheus(base: str, token: str | None) -> Prometheus | None:
    info = call("GET", base + paths.INFO, token)
    if "prometheus" not in info.get("services", ()):
        return None
    return Prometheus(info["prometheus"], timeout=60)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def known_runs(
    base: str, token: str | None, prom: Prometheus | None, project: str | None = None, since: str = "30d"
) -> dict[Run, dict[str, Any]]:
    """{(project, experiment): {"step", "last_push_s", "series", "finished", "where"}} from the hub and Prometheus."""
    runs: dict[Run, dict[str, Any]] = {}
    for stream in call("GET", base + paths.STREAMS, token)["streams"]:
        labels = stream["labels"]
        key = (labels.get("project"), labels.get("experiment_name"))
        if None in key or (project and key[0] != project):
            continue
        run = runs.setdefault(
            key, {"step": None, "last_push_s": None, "series": 0, "finished": False, "where": {"hub"}}
        )
        run["series"] += stream.get("series", 0)
        if stream.get("step") is not None:
            run["step"] = max(run["step"] or 0, stream["step"])
        # the newest step's own time: the same age Prometheus gives after a crash, and one that a
        # clean restart (which keeps the streams) does not reset
        age = stream.get("last_step_s_ago")
        idle = age if age is not None else stream.get("idle_s")
        run["last_push_s"] = idle if run["last_push_s"] is None else min(run["last_push_s"], idle)
    if prom is not None:
        selector = run_selector(project, None) if project else ""
        try:
            steps = prom.query(f"max by (project, experiment_name) (last_over_time({STEP}{selector}[{since}]))")
            # the last step's own time, as a value (a sample's timestamp is the last scrape's)
            seen = prom.query(
                f"max by (project, experiment_name) (last_over_time({STEP_TIME_METRIC}{selector}[{since}]))"
            )
            finished = prom.query(
                f"max by (project, experiment_name) (last_over_time({RUN_FINISHED}{selector}[{since}]))"
            )
        except DataError as exc:
            raise CliError(str(exc), code=PROBLEMS) from None
        when = {(r["metric"].get("project"), r["metric"].get("experiment_name")): float(r["value"][1]) for r in seen}
        for r in steps:
            key = (r["metric"].get("project"), r["metric"].get("experiment_name"))
            run = runs.setdefault(
                key, {"step": None, "last_push_s": None, "series": None, "finished": False, "where": set()}
            )
            run["where"].add("prometheus")
            run["step"] = max(run["step"] or 0, int(float(r["value"][1])))
            if run["last_push_s"] is None and key in when:
                run["last_push_s"] = max(0.0, time.time() - when[key])
        for r in finished:
            key = (r["metric"].get("project"), r["metric"].get("experiment_name"))
            if key in runs and float(r["value"][1]) == 1:
                runs[key]["finished"] = True
    return runs


def show(args: argparse.Namespace) -> int:
    base, token = server(args)
    runs = known_runs(base, token, _prometheus(base, token), args.project, args.since)
    listed = call("GET", base + paths.RUN_IMPORTS, token)["runs"]
    imported = {(r["project"], r["experiment_name"]) for r in listed}
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "project": p,
                        "experiment_name": e,
                        **dict(r, where=sorted(r["where"])),
                        "imported": (p, e) in imported,
                    }
                    for (p, e), r in sorted(runs.items())
                ]
            )
        )
        return 0
    if not runs:
        print(
            "no runs" + (f" in project {args.project}" if args.project else "") + " (a run appears with its "
            "first logged step)"
        )
        return 0
    rows = [("PROJECT", "EXPERIMENT", "LAST STEP", "LOGGED", "SERIES", "STATE")]
    newest_first = sorted(runs.items(), key=lambda item: (item[1]["last_push_s"] is None, item[1]["last_push_s"] or 0))
    for (project, experiment), run in newest_first:
        state = (
            "imported"
            if (project, experiment) in imported
            else "finished"
            if run["finished"]
            else ("running" if "hub" in run["where"] and (run["last_push_s"] or 0) < 600 else "idle")
        )
        rows.append(
            (
                project,
                experiment,
                "-" if run["step"] is None else str(run["step"]),
                _ago(run["last_push_s"]),
                "-" if run["series"] is None else str(run["series"]),
                state,
            )
        )
    print_table(rows)
    return 0


def table(
    prom: Prometheus, project: str, experiment: str | None, since: str
) -> tuple[list[str], list[tuple[int, list[float | None]]]]:
    """(columns, rows): one row per step (the first column), one column per logged scalar."""
    selector = run_selector(project, experiment)
    names = prom.names(f'{{__name__=~"{PREFIX}.+",{selector[1:-1]}}}', time.time() - _seconds(since))
    steps = prom.samples(f"{STEP}{selector}[{since}]")
    if not steps:
        raise CliError(f"no steps of {project}/{experiment} in Prometheus (the last {since})", code=PROBLEMS)
    columns: list[str] = []
    values: dict[int, dict[str, float]] = {}
    for name in sorted(n for n in names if n != STEP):
        column = name[len(PREFIX) :]
        columns.append(column)
        for t, value in sorted(prom.samples(f"{name}{selector}[{since}]").items()):
            if t in steps:
                values.setdefault(int(steps[t]), {}).setdefault(column, value)  # a step's first sample
    for step in {int(s) for s in steps.values()}:
        values.setdefault(step, {})
    return columns, [(step, [values[step].get(c) for c in columns]) for step in sorted(values)]


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _seconds(duration: str) -> float:
    return float(duration[:-1]) * UNITS[duration[-1]]


def since(text: str) -> str:
    """A Prometheus duration: digits and one of s m h d w (argparse type)."""
    import argparse
    import re

    if not re.fullmatch(r"[1-9][0-9]{0,5}[smhdw]", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30d, 12h, 90m")
    return text


def export(args: argparse.Namespace) -> int:
    base, token = server(args)
    prom = _prometheus(base, token)
    if prom is None:
        raise CliError("the server runs no Prometheus: nothing to export from", code=PROBLEMS)
    try:
        columns, rows = table(prom, args.project, args.experiment, args.since)
    except DataError as exc:
        raise CliError(str(exc), code=PROBLEMS) from None
    tmp = f"{args.output}.tmp"
    if args.format == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise CliError(
                "--format parquet needs pyarrow", fix="pip install 'verl-rl-insight[export]'", code=REFUSED
            ) from None
        data: dict[str, list[int] | list[float | None]] = {"step": [step for step, _ in rows]}
        data.update({c: [values[i] for _, values in rows] for i, c in enumerate(columns)})
        pq.write_table(pa.table(data), tmp)
    else:
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", *columns])
            for step, values in rows:
                writer.writerow([step, *("" if v is None else repr(v) for v in values)])
    os.replace(tmp, args.output)
    print(
        json.dumps({"output": args.output, "steps": len(rows), "columns": len(columns)})
        if args.json
        else f"wrote {args.output}: {len(rows)} steps x {len(columns)} scalars of {args.project}/{args.experiment}"
    )
    return 0


def delete(args: argparse.Namespace) -> int:
    base, token = server(args)
    what = f"{args.project}/{args.experiment}"
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(f"deleting {what} needs a yes", fix="add --yes (no terminal to ask in)", code=REFUSED)
        answer = input(f"delete run {what}: its values in the hub, its series in Prometheus and its spans? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 0
    query = urllib.parse.urlencode({"project": args.project, "experiment_name": args.experiment})
    result = call("DELETE", f"{base}{paths.RUNS}?{query}", token, timeout_s=90)  # two deletes, a scrape apart
    if args.json:
        print(json.dumps(result))
        return 0
    spans = "its spans deleted" if result["spans"] else "no spans kept here"
    whole = result["prometheus"] in ("deleted", "no Prometheus runs here")
    print(
        f"{'deleted' if whole else 'partly deleted'} {what}: {result['hub_streams']} hub stream(s), "
        f"{result['hub_series']} series; {spans}; Prometheus: {result['prometheus']}"
    )
    if not whole:
        print("  the run stays in Prometheus (and in `runs list`) until its retention ends", file=sys.stderr)
    return 0 if whole else PROBLEMS


def revoke(args: argparse.Namespace) -> int:
    base, token = server(args)
    query = urllib.parse.urlencode({"project": args.project, "experiment_name": args.experiment})
    result = call("POST", f"{base}{paths.RUN_REVOKE}?{query}", token)
    if args.json:
        print(json.dumps(result))
        return 0
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result["revoked_at"]))
    print(
        f"revoked {args.project}/{args.experiment}: its run credentials minted until {at} are refused (403)\n"
        "  its trainers and Ray workers stop reaching the monitor (training goes on); "
        "a job started now carries a new credential\n"
        "  every credential of every run at once: change the server's token (RL_INSIGHT_TOKEN) and restart it"
    )
    return 0


def add_parsers(sub: SubParsers) -> None:
    runs = sub.add_parser("runs", help="the runs the server knows: list, export, delete, revoke; mark steps")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)
    listing = runs_sub.add_parser("list", help="every run: last step, last push, series, state")
    listing.add_argument("--project")
    listing.add_argument("--since", type=since, default="30d", help="how far back Prometheus is asked (default 30d)")
    listing.set_defaults(func=show)
    out = runs_sub.add_parser("export", help="every logged scalar by step, one row per step")
    out.add_argument("--project", required=True)
    out.add_argument("--experiment", required=True, help="the experiment_name")
    out.add_argument("--format", choices=("csv", "parquet"), default="csv")
    out.add_argument("-o", "--output", required=True)
    out.add_argument("--since", type=since, default="30d", help="how far back (default 30d)")
    out.set_defaults(func=export)
    gone = runs_sub.add_parser("delete", help="remove a run from the hub, Prometheus and the kept spans")
    gone.add_argument("--project", required=True)
    gone.add_argument("--experiment", required=True, help="the experiment_name")
    gone.add_argument("--yes", action="store_true", help="do not ask")
    gone.set_defaults(func=delete)
    revoked = runs_sub.add_parser(
        "revoke", help="refuse the run credentials a run's trainers carry (leaked in a log?): minted until now"
    )
    revoked.add_argument("--project", required=True)
    revoked.add_argument("--experiment", required=True, help="the experiment_name")
    revoked.set_defaults(func=revoke)
    cards = run_card.add_parsers(runs_sub)  # runs show, runs diff
    runs_import.add_parser(runs_sub)
    marked = runs_sub.add_parser(
        "mark", help="mark a step (a planned data or curriculum change): on the dashboards and in diagnose"
    )
    marked.add_argument("--project", required=True)
    marked.add_argument("--experiment", required=True, help="the experiment_name")
    marked.add_argument("--step", required=True, type=marks.step, help="the step marked")
    marked.add_argument("--text", required=True, help="what happened there, in a few words")
    marked.add_argument(
        "--reset-baseline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the detectors start their baselines again at this step (a step marked again keeps what its mark "
        "had unless --no-reset-baseline)",
    )
    marked.set_defaults(func=marks.mark)
    marks_of = runs_sub.add_parser("marks", help="a run's marks, by step")
    marks_of.add_argument("--project", required=True)
    marks_of.add_argument("--experiment", required=True, help="the experiment_name")
    marks_of.set_defaults(func=marks.show)
    unmarked = runs_sub.add_parser("unmark", help="remove the mark of a step")
    unmarked.add_argument("--project", required=True)
    unmarked.add_argument("--experiment", required=True, help="the experiment_name")
    unmarked.add_argument("--step", required=True, type=marks.step)
    unmarked.set_defaults(func=marks.unmark)
    for parser in (listing, out, gone, revoked, marked, marks_of, unmarked, *cards):
        common_options(parser, top=True)
