"""``rl-insight profile analyze DIR``: the command's arguments and its exits (0 read, 2 refused:
no trace, a cut file, two steps' files; one line naming the file)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from verl_rl_insight.commands.checks import REFUSED, CliError
from verl_rl_insight.commands.traces import render
from verl_rl_insight.commands.traces.analysis import analyse
from verl_rl_insight.commands.traces.files import LOOKED_FOR, read_all, trace_files
from verl_rl_insight.commands.traces.page import html_page
from verl_rl_insight.commands.traces.schema import as_json
from verl_rl_insight.commands.traces.summary import BadTrace


def analyze(args: argparse.Namespace) -> int:
    folder = Path(args.dir)
    try:
        paths = trace_files(folder)
        if not paths:
            raise BadTrace(str(folder), f"no trace of verl's profiler in it (looked for {LOOKED_FOR})")
        view = analyse(read_all(paths, args.jobs), args.step)
    except BadTrace as exc:
        raise CliError(str(exc), code=REFUSED) from None
    if args.output:
        Path(args.output).write_text(html_page(view), encoding="utf-8")
    if args.json:
        print(json.dumps(as_json(view)))
    else:
        render.print_view(view)
        if args.output:
            print(f"written: {args.output}")
    return 0


def add_parser(profile_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = profile_sub.add_parser(
        "analyze",
        help="which rank, in which RL phase, held a profiled step (reads verl's profiler traces)",
        description="Read every rank's trace of one step (torch profiler *.json.gz, NVTX jsonlines from "
        "`nsys export --type jsonlines`, Ascend MSTX trace_view.json), one process per file, streaming; print "
        "per RL phase each rank's time, the slowest rank, the spread and the time spent waiting in collectives. "
        "Exit 2: no trace, a file that is not whole, or traces of more than one step.",
    )
    parser.add_argument("dir", help="the profiler's save_path (or any folder holding one step's traces)")
    parser.add_argument("--step", type=int, help="the step to analyse when the folder holds several")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("-o", "--output", help="also write the view as a self-contained HTML file")
    parser.add_argument("--jobs", type=int, help="reading processes (default: one per CPU)")
    parser.set_defaults(func=analyze)
