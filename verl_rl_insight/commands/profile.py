"""``rl-insight profile``: have the running trainer profile future steps with verl's own profiler;
``rl-insight profile list``: the requests, how they went, and where the traces are."""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
from typing import Any

from verl_rl_insight.commands.api import call, common_options, print_table, server
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.timeline.command import steps_range
from verl_rl_insight.contract.wire import PROFILE_ROLES

ENDED = ("finished", "missed", "refused")


def ranks_list(text: str) -> list[int]:
    """'0,1,3' -> [0, 1, 3] (argparse type)."""
    try:
        ranks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks (0,1,3)") from None
    if not ranks or ranks[0] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: ranks are 0 or more")
    return ranks


def _run_step(base: str, token: str | None, project: str, experiment: str) -> int | None:
    """The run's newest logged step, as the hub holds it (None: not known there)."""
    streams = call("GET", base + "/api/v1/streams", token).get("streams", [])
    steps = [
        s["step"]
        for s in streams
        if s.get("step") is not None
        and s["labels"].get("project") == project
        and s["labels"].get("experiment_name") == experiment
    ]
    return max(steps) if steps else None


def _profiles(base: str, token: str | None, project: str | None, experiment: str | None) -> dict[str, Any]:
    query = urllib.parse.urlencode({k: v for k, v in (("project", project), ("experiment_name", experiment)) if v})
    found: dict[str, Any] = call("GET", f"{base}/api/v1/profiles" + (f"?{query}" if query else ""), token)
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
    step = _run_step(base, token, args.project, args.experiment)
    if step is not None and first <= step + 1:
        raise CliError(
            f"step {first} has begun or passed: {args.project}/{args.experiment} is at step {step}",
            fix=f"ask for step {step + 2} or later (verl decides at the end of a step whether the next is profiled)",
            code=PROBLEMS,
        )
    wanted = {"role": args.role, "ranks": args.ranks}
    able = _profiles(base, token, args.project, args.experiment).get("capability")
    if able is not None:
        why = refusal(wanted, able)
        if why:
            raise CliError(f"this job's profiler cannot do it: {why}", code=PROBLEMS)
    body = {"project": args.project, "experiment_name": args.experiment, "first_step": first, "last_step": last}
    body.update({k: v for k, v in wanted.items() if v})
    record = call("POST", base + "/api/v1/profiles", token, json.dumps(body).encode())
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


def _wait(base: str, token: str | None, request_id: str, args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    seen = None
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


def add_parsers(sub: Any) -> None:
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
    common_options(parser, top=True)
    parser.set_defaults(func=request)
    profile_sub = parser.add_subparsers(dest="profile_command", metavar="COMMAND")
    listing = profile_sub.add_parser("list", help="requested, running and finished profiles, with their traces")
    listing.add_argument("--project")
    listing.add_argument("--experiment", help="the experiment_name")
    common_options(listing)
    listing.set_defaults(func=list_profiles)
