"""``rl-insight timeline export``: a run's timeline as a Chrome trace-event file (Perfetto UI,
chrome://tracing), from the server that kept the spans or from its Tempo: one command for both."""

import argparse
import json
import os
import re
from typing import Any

from verl_rl_insight.commands.api import SubParsers, call, common_options, server
from verl_rl_insight.commands.checks import PROBLEMS, REFUSED, CliError
from verl_rl_insight.commands.timeline.sources import Span
from verl_rl_insight.contract import paths


def steps_range(text: str) -> tuple[int | None, int | None]:
    """'A:B', 'A:', ':B' or 'A' -> (first, last), None where open (argparse type)."""
    head, sep, tail = text.partition(":")
    try:
        first = int(head) if head.strip() else None
        last = (int(tail) if tail.strip() else None) if sep else first
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step range (A:B, A:, :B or A)") from None
    if first is not None and last is not None and last < first:
        raise argparse.ArgumentTypeError(f"{text!r}: the last step is before the first")
    return first, last


def read_spans(base: str, token: str | None, project: str, experiment: str | None) -> tuple[list[Span], str]:
    """(spans, where from)."""
    from verl_rl_insight.commands.timeline import sources

    info = call("GET", base + paths.INFO, token)
    if info.get("spans_kept_by_hub"):
        try:
            return sources.from_server(base, project, experiment, token), "the rl-insight server"
        except sources.SourceError as exc:
            if exc.status in (401, 403):  # not "no spans": the server would not say
                raise CliError(
                    f"the server refused the token ({exc.status}): it shows the spans of {project}/{experiment} "
                    "only to the right one",
                    fix="give the server's token (RL_INSIGHT_SERVER_URL, or --server URL with it; "
                    "`rl-insight server status --secrets` shows it)",
                    code=REFUSED,
                ) from None
            runs = call("GET", base + paths.SPAN_RUNS, token)["runs"]
            known = ", ".join(f"{r['project']}/{r['experiment_name']}" for r in runs[:10]) or "none yet"
            raise CliError(
                f"no spans of {project}/{experiment}: {exc}", fix=f"runs with spans: {known}", code=PROBLEMS
            ) from None
    if "tempo" in info.get("services", ()):
        try:
            return sources.from_tempo(info["tempo"], project, experiment), f"Tempo at {info['tempo']}"
        except sources.SourceError as exc:
            raise CliError(f"cannot read the run from Tempo: {exc}", code=PROBLEMS) from None
    raise CliError(
        f"this server keeps no spans: trainers send them to {info.get('otlp_traces')}",
        fix="read them there (Tempo: --tempo URL)",
        code=PROBLEMS,
    )


def spans_of(args: argparse.Namespace) -> tuple[list[Any], str]:
    """(the run's spans, where from): the Tempo of --tempo, else what the server says holds them."""
    from verl_rl_insight.commands.timeline import sources

    if args.tempo:
        try:
            return sources.from_tempo(args.tempo.rstrip("/"), args.project, args.experiment), args.tempo
        except sources.SourceError as exc:
            raise CliError(str(exc), code=PROBLEMS) from None
    base, token = server(args)
    spans, origin = read_spans(base, token, args.project, args.experiment)
    return spans, origin


def output_file(output: str, project: str, experiment: str, steps: tuple[int | None, int | None] | None) -> str:
    """Where ``-o`` writes: the file named, or, in a directory named,
    ``<project>-<experiment>[-stepsA-B].trace.json``."""
    if not os.path.isdir(output):
        return output
    first, last = steps or (None, None)
    span = f"-steps{'' if first is None else first}-{'' if last is None else last}" if steps else ""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"{project}-{experiment}{span}").lstrip(".")
    return os.path.join(output, f"{name}.trace.json")


def export(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.timeline import chrome_trace

    spans, origin = spans_of(args)
    if args.steps:
        spans = chrome_trace.select_steps(spans, *args.steps)
    if not spans:
        raise CliError(
            f"no spans of {args.project}/{args.experiment}"
            + (" in those steps" if args.steps else "")
            + f" at {origin}",
            code=PROBLEMS,
        )
    document = chrome_trace.to_chrome_trace(spans, f"{args.project}/{args.experiment}")
    args.output = output_file(args.output, args.project, args.experiment, args.steps)
    tmp = f"{args.output}.tmp"
    with open(tmp, "w") as f:
        json.dump(document, f)
    os.replace(tmp, args.output)
    tracks = [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"]
    steps = sorted(chrome_trace.step_windows(spans))
    span_steps = f", steps {steps[0]}-{steps[-1]}" if steps else ""
    if args.json:
        print(json.dumps({"output": args.output, "spans": len(spans), "tracks": tracks, "from": origin}))
    else:
        shown = ", ".join(tracks[:6]) + (f", ... ({len(tracks)} in all)" if len(tracks) > 6 else "")
        print(
            f"wrote {args.output}: {len(spans)} spans from {origin}{span_steps}; tracks: {shown}\n"
            "  open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing"
        )
    return 0


def kept_of(args: argparse.Namespace) -> dict[str, object] | None:
    """What the server's span store says of the run (its bound, the steps it evicted, the oldest it
    keeps), or None when the spans come from Tempo or the server lists no such run."""
    if args.tempo:
        return None
    base, token = server(args)
    if not call("GET", base + paths.INFO, token).get("spans_kept_by_hub"):
        return None
    offset: int | None = 0
    while offset is not None:
        page = call("GET", f"{base}{paths.SPAN_RUNS}?limit=1000&offset={offset}", token)
        for run in page["runs"]:
            if (run["project"], run["experiment_name"]) == (args.project, args.experiment):
                return {k: run.get(k) for k in KEPT}
        offset = page.get("next_offset")
    return None


KEPT = ("max_bytes", "bytes", "oldest_step", "newest_step", "evicted_steps", "evicted_spans", "evicted_through_step")


def kept_line(kept: dict[str, object]) -> str:
    """One line under the table: the steps the server keeps of the run, its bound, what it evicted."""
    size = int(str(kept.get("max_bytes") or 0))
    bound = f"{size / 2**20:.0f} MiB a run" if size >= 2**20 else f"{size / 2**10:.0f} KiB a run"
    line = f"the server keeps steps {kept.get('oldest_step')}-{kept.get('newest_step')} of this run ({bound}"
    if kept.get("evicted_steps"):
        return line + (
            f"; the oldest {kept['evicted_steps']} steps evicted, through step {kept['evicted_through_step']}, "
            f"{kept['evicted_spans']} spans)"
        )
    return line + "; nothing evicted)"


def summarize(args: argparse.Namespace) -> int:
    """One row per step: phase seconds, the long tail, the slowest replica, idle shares."""
    from verl_rl_insight.commands.api import print_table
    from verl_rl_insight.server.timeline import summary

    spans, origin = spans_of(args)
    first, last = args.steps or (None, None)
    steps = summary.summarize(spans, first, last)
    if not steps:
        raise CliError(
            f"no trainer steps of {args.project}/{args.experiment}"
            + (" in those steps" if args.steps else "")
            + f" at {origin}",
            code=PROBLEMS,
        )
    kept = kept_of(args)
    if args.json:
        print(json.dumps({"from": origin, "steps": [s.as_json() for s in steps], "kept": kept}))
    else:
        print_table(summary.table(steps))
        if kept is not None:
            print(kept_line(kept))
    return 0


def add_parsers(sub: SubParsers) -> None:
    timeline = sub.add_parser(
        "timeline", help="a run's RL state timeline: as a file (Perfetto, chrome://tracing), or per step"
    )
    timeline_sub = timeline.add_subparsers(dest="timeline_command", metavar="COMMAND", required=True)
    out = timeline_sub.add_parser("export", help="write the run's timeline as Chrome trace-event JSON")
    out.add_argument("--project", required=True)
    out.add_argument("--experiment", required=True, help="the experiment_name")
    out.add_argument("--steps", type=steps_range, help="only these trainer steps: A:B (both included), A:, :B or A")
    out.add_argument(
        "-o", "--output", required=True, help="the file to write (trace.json), or a directory to write it in"
    )
    out.add_argument("--tempo", help="read from this Tempo (its HTTP API URL) instead of asking the server")
    common_options(out, top=True)
    out.set_defaults(func=export)
    brief = timeline_sub.add_parser(
        "summary", help="one row per step: phase seconds, the long tail, the slowest replica, idle shares"
    )
    brief.add_argument("--project", required=True)
    brief.add_argument("--experiment", required=True, help="the experiment_name")
    brief.add_argument("--steps", type=steps_range, help="only these trainer steps: A:B (both included), A:, :B or A")
    brief.add_argument("--tempo", help="read from this Tempo (its HTTP API URL) instead of asking the server")
    common_options(brief, top=True)
    brief.set_defaults(func=summarize)
