"""``rl-insight profile``: have the running trainer profile future steps with verl's own profiler;
``rl-insight profile list``: the requests, how they went, and where the traces are."""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
from typing import Any, NamedTuple

from verl_rl_insight.commands.api import SubParsers, call, common_options, print_table, server
from verl_rl_insight.commands.checks import PROBLEMS, REFUSED, CliError, positive_float
from verl_rl_insight.commands.timeline.command import steps_range
from verl_rl_insight.commands.traces import command as analyze_command
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.runs import RUN_FINISHED, Run
from verl_rl_insight.contract.wire import PROFILE_ROLES

ENDED = ("finished", "missed", "refused")
FINISHED_EVERY_S = 10.0  # how often --wait asks whether the run has finished


def ranks_list(text: str) -> list[int]:
    """'0,1,3' -> [0, 1, 3] (argparse type)."""
    try:
        ranks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks (0,1,3)") from None
    if not ranks or ranks[0] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: ranks are 0 or more")
    return ranks


class RunSeen(NamedTuple):
    """What the hub holds of a run: its newest step, and how long ago that step was logged."""

    step: int | None
    step_s_ago: float | None


def _runs_at_hub(base: str, token: str | None) -> dict[Run, RunSeen]:
    """Every run the hub has a stream of, with its newest step and that step's age."""
    runs: dict[Run, RunSeen] = {}
    for stream in call("GET", base + paths.STREAMS, token).get("streams", []):
        labels = stream.get("labels") or {}
        project, experiment = labels.get("project"), labels.get("experiment_name")
        if not isinstance(project, str) or not isinstance(experiment, str):
            continue
        key = (project, experiment)
        seen = runs.get(key, RunSeen(None, None))
        step, age = stream.get("step"), stream.get("last_step_s_ago")
        if step is not None and (seen.step is None or step > seen.step):
            seen = RunSeen(step, age)
        runs[key] = seen
    return runs


def known_run(base: str, token: str | None, project: str, experiment: str) -> RunSeen:
    """The run as the hub holds it; refused (exit 2) with the runs it knows when it holds none of that name."""
    runs = _runs_at_hub(base, token)
    if (project, experiment) in runs:
        return runs[(project, experiment)]
    same_project = sorted(e for p, e in runs if p == project)
    if same_project:
        known = f"project {project} has {', '.join(same_project[:10])}" + (" ..." if len(same_project) > 10 else "")
    else:
        names = sorted(f"{p}/{e}" for p, e in runs)
        known = "the server's runs: " + (", ".join(names[:10]) + (" ..." if len(names) > 10 else "") or "none yet")
    raise CliError(
        f"no run {project}/{experiment} at the server ({known})",
        fix="check --project and --experiment (`rl-insight runs list`); a run appears with its first logged step",
        code=REFUSED,
    )


def _profiles(base: str, token: str | None, project: str | None, experiment: str | None) -> dict[str, Any]:
    query = urllib.parse.urlencode({k: v for k, v in (("project", project), ("experiment_name", experiment)) if v})
    found: dict[str, Any] = call("GET", base + paths.PROFILES + (f"?{query}" if query else ""), token)
    return found


def request(args: argparse.Namespace) -> int:
    from verl_rl_insight.trainer.plugins.profiler import refusal

    if not (args.project and args.experiment and args.steps):
        raise CliError("give --project, --experiment and --steps N[:M] (or `profile list`)", code=2)
    first, last = args.steps
    if first is None:
        raise CliError("--steps needs its first step (N or N:M)", code=2)
    last = last if last is not None else first
    base, token = server(args)
    step = known_run(base, token, args.project, args.experiment).step
    if step is not None and first <= step + 1:
        raise CliError(
            f"step {first} has begun or passed: {args.project}/{args.experiment} is at step {step}",
            fix=f"ask for step {step + 2} or later (verl decides at the end of a step whether the next is profiled)",
            code=PROBLEMS,
        )
    if _finished(base, token, args.project, args.experiment):
        raise CliError(
            f"{args.project}/{args.experiment} has finished: it has no coming step to profile",
            fix="profile a run that is still training (`rl-insight runs list` says which are running)",
            code=REFUSED,
        )
    wanted = {"role": args.role, "ranks": args.ranks}
    able = _profiles(base, token, args.project, args.experiment).get("capability")
    if able is not None:
        why = refusal(wanted, able)
        if why:
            raise CliError(f"this job's profiler cannot do it: {why}", code=PROBLEMS)
    body = {"project": args.project, "experiment_name": args.experiment, "first_step": first, "last_step": last}
    body.update({k: v for k, v in wanted.items() if v})
    record = call("POST", base + paths.PROFILES, token, json.dumps(body).encode())
    if args.json and not args.wait:
        print(json.dumps(record))
        return 0
    if not args.json:
        print(
            f"profile {record['id']} requested: steps {first}..{last} of {args.project}/{args.experiment}"
            + (f" (the run is at step {step})" if step is not None else " (no step of the run seen yet)")
        )
        if able is None:
            print("  the trainer has not reported its profiler yet: it says at its next step boundary what it can do")
        print("  `rl-insight profile list` shows how it goes" if not args.wait else "  waiting for it to end ...")
    if not args.wait:
        return 0
    return _wait(base, token, record["id"], args)


def _finished(base: str, token: str | None, project: str, experiment: str) -> bool:
    """True when the run said it finished (``rl_insight_run_finished`` 1 in the server's Prometheus;
    a server without one cannot say, and the idle limit ends the wait)."""
    from verl_rl_insight.commands.watch.data import DataError, Prometheus
    from verl_rl_insight.contract.promql import run_selector

    info = call("GET", base + paths.INFO, token)
    if "prometheus" not in info.get("services", ()):
        return False
    try:
        flag = Prometheus(info["prometheus"]).scalar(f"{RUN_FINISHED}{run_selector(project, experiment)}")
        return bool(flag == 1)
    except DataError:
        return False


def _ended(base: str, token: str | None, args: argparse.Namespace, checked: list[float]) -> str | None:
    """Why the wait is over although the request is not (the run finished, or logs no new step), or None."""
    run = _runs_at_hub(base, token).get((args.project, args.experiment), RunSeen(None, None))
    if run.step_s_ago is not None and run.step_s_ago > args.idle:
        return (
            f"no new step of {args.project}/{args.experiment} for {run.step_s_ago:.0f} s (it is at step {run.step}): "
            "the run has ended or stalls; the request stays queued (`rl-insight profile list`)"
        )
    if time.monotonic() - checked[0] >= FINISHED_EVERY_S:
        checked[0] = time.monotonic()
        if _finished(base, token, args.project, args.experiment):
            at = f" at step {run.step}" if run.step is not None else ""
            return f"{args.project}/{args.experiment} has finished{at}: its requested steps will not come"
    return None


def _wait(base: str, token: str | None, request_id: str, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    seen = None
    checked = [0.0]
    while True:
        found = [p for p in _profiles(base, token, args.project, args.experiment)["profiles"] if p["id"] == request_id]
        record = found[0] if found else None
        if record is not None and (record["state"], record["detail"]) != seen and not args.json:
            seen = (record["state"], record["detail"])
            print(f"  {record['state']}: {record['detail']}", flush=True)
        if record is not None and record["state"] in ENDED:
            if args.json:
                print(json.dumps(record))
            return 0 if record["state"] == "finished" else PROBLEMS
        why = _ended(base, token, args, checked)
        if why is not None:
            raise CliError(f"profile {request_id}: {why}", code=PROBLEMS)
        if time.monotonic() > deadline:
            raise CliError(f"profile {request_id} has not ended after {args.timeout:g} s", code=PROBLEMS)
        time.sleep(1.0)


def list_profiles(args: argparse.Namespace) -> int:
    base, token = server(args)
    found = _profiles(base, token, args.project, args.experiment)
    if args.json:
        print(json.dumps(found))
        return 0
    profiles = found["profiles"]
    if not profiles:
        print("no profile requests" + (f" for {args.project}/{args.experiment or '*'}" if args.project else ""))
        return 0
    rows = [["id", "run", "steps", "state", "profiled", "traces / detail"]]
    for p in profiles:
        steps = f"{p['first_step']}" + (f"..{p['last_step']}" if p["last_step"] != p["first_step"] else "")
        if p.get("role") or p.get("ranks"):
            steps += f" ({p.get('role') or 'all roles'}" + (f", ranks {p['ranks']}" if p.get("ranks") else "") + ")"
        done = ",".join(map(str, p.get("steps") or [])) or "-"
        where = p["trace_dir"] if p["state"] in ("running", "finished") and p.get("trace_dir") else p["detail"]
        rows.append([p["id"], f"{p['project']}/{p['experiment_name']}", steps, p["state"], done, where])
    print_table(rows)
    return 0


def add_parsers(sub: SubParsers) -> None:
    parser = sub.add_parser(
        "profile",
        help="profile future steps of a running job with verl's own profiler (global_profiler)",
        description="Ask the running trainer, through the server, to profile steps N..M with verl's profiler: "
        "it adds them to global_profiler.steps at its next step boundary. The job needs a profiler tool "
        "at launch (global_profiler.tool, <role>.profiler.enable) or +rl_insight.plugins.profiler.arm=torch.",
    )
    parser.add_argument("--project")
    parser.add_argument("--experiment", help="the experiment_name")
    parser.add_argument("--steps", type=steps_range, help="N or N:M (both included): steps still to come")
    parser.add_argument("--role", choices=PROFILE_ROLES, help="only if this role's profiler is on (default: any)")
    parser.add_argument("--ranks", type=ranks_list, help="0,1: only if the job profiles these ranks")
    parser.add_argument("--wait", action="store_true", help="wait until the request ends and say how")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds --wait waits (default 3600)")
    parser.add_argument(
        "--idle",
        type=positive_float,
        default=600.0,
        help="--wait ends when the run logs no new step for this many seconds (default 600)",
    )
    common_options(parser, top=True)
    parser.set_defaults(func=request)
    profile_sub = parser.add_subparsers(dest="profile_command", metavar="COMMAND")
    listing = profile_sub.add_parser("list", help="requested, running and finished profiles, with their traces")
    listing.add_argument("--project")
    listing.add_argument("--experiment", help="the experiment_name")
    common_options(listing)
    listing.set_defaults(func=list_profiles)
    analyze_command.add_parser(profile_sub)
