"""``rl-insight watch [--project P] [--experiment E] [--server URL] [--once]``: one run, live."""

import argparse
import contextlib
import json
import os
import select
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from verl_rl_insight.commands.api import SubParsers, call, server
from verl_rl_insight.commands.checks import PROBLEMS, CliError, positive_float
from verl_rl_insight.contract import paths


def _sources(
    args: argparse.Namespace,
) -> tuple[str, Callable[[], Sequence[tuple[str, str, float]]], Callable[[str, str], dict[str, Any] | None]]:
    """(Prometheus URL, a function giving the hub's runs by recency: (project, experiment, idle s),
    a function giving a run's last step as lanes, or None)."""
    if args.prometheus and not args.server:
        return args.prometheus, lambda: (), lambda project, experiment: None
    base, token = server(args)
    info = call("GET", base + paths.INFO, token)
    if not args.prometheus and (
        not info.get("prometheus") or "prometheus" not in info.get("services", ("prometheus",))
    ):
        raise CliError(f"the server at {base} runs no Prometheus", fix="give --prometheus URL", code=PROBLEMS)

    def recent() -> Sequence[tuple[str, str, float]]:
        try:
            streams = call("GET", base + paths.STREAMS, token)["streams"]
        except CliError:
            return ()
        return [
            (s["labels"].get("project"), s["labels"].get("experiment_name"), s.get("idle_s", 0))
            for s in streams
            if s.get("step") is not None and "project" in s["labels"]
        ]

    def last_step(project: str, experiment: str) -> dict[str, Any] | None:
        try:
            params = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
            lanes: dict[str, Any] = call("GET", f"{base}{paths.TIMELINE_LAST_STEP}?{params}", token)
            return lanes
        except CliError:  # no step with spans yet, or an older server: the frame goes without lanes
            return None

    return args.prometheus or info["prometheus"], recent, last_step


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """A function returning the key pressed since the last call ('' for none), in cbreak mode
    on a terminal (restored on the way out)."""
    if not sys.stdin.isatty():

        def wait(timeout: float) -> str:
            time.sleep(timeout)
            return ""

        yield wait
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:

        def read(timeout: float) -> str:
            ready, _, _ = select.select([fd], [], [], timeout)
            return os.read(fd, 16).decode(errors="replace") if ready else ""

        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def watch(args: argparse.Namespace) -> int:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from verl_rl_insight.commands.watch import data, view

    prom_url, recent, last_step = _sources(args)
    prom = data.Prometheus(prom_url)
    console = Console()

    def render() -> tuple[Group | Text, data.DataError | None]:
        try:
            project, experiment = data.pick_run(prom, args.project, args.experiment, recent())
            snapshot = data.snapshot(prom, project, experiment)
            snapshot["timeline"] = last_step(project, experiment)
            return view.frame(snapshot, console.width, console.height), None
        except data.DataError as exc:
            return Text(f"rl-insight watch: {exc}"), exc

    if args.once and args.json:  # for scripts: the frame's data, not its drawing
        try:
            project, experiment = data.pick_run(prom, args.project, args.experiment, recent())
            snapshot = data.snapshot(prom, project, experiment)
        except data.DataError as exc:
            raise CliError(str(exc), code=PROBLEMS) from None
        snapshot["timeline"] = last_step(project, experiment)
        print(json.dumps(snapshot))
        return 0
    if args.once:
        shown, problem = render()
        if problem is not None:
            raise CliError(str(problem), code=PROBLEMS)
        console.print(shown)
        return 0
    footer = Text(f"\nrefresh every {args.interval:g} s; q or Ctrl+C quits", style="dim")
    try:
        with (
            _keys() as key,
            Live(
                Text("reading Prometheus ..."), console=console, screen=console.is_terminal, auto_refresh=False
            ) as live,
        ):
            while True:
                shown, _ = render()
                live.update(Group(shown, footer), refresh=True)
                deadline = time.monotonic() + args.interval
                while time.monotonic() < deadline:
                    if "q" in key(min(0.2, max(0.0, deadline - time.monotonic()))).lower():
                        return 0
    except KeyboardInterrupt:  # Ctrl+C is how a person leaves a live view: no error
        return 0


def add_parsers(sub: SubParsers) -> None:
    from verl_rl_insight.commands.api import common_options

    parser = sub.add_parser("watch", help="one run live in the terminal: step, curves, replicas, GPUs, alerts")
    parser.add_argument("--project", help="the run's project (default: the newest run)")
    parser.add_argument("--experiment", help="the run's experiment_name (default: the newest run)")
    parser.add_argument("--prometheus", help="read this Prometheus instead of the server's")
    parser.add_argument("--interval", type=positive_float, default=5.0, help="seconds between refreshes (default 5)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit (scripts, CI logs)")
    common_options(parser, top=True)
    parser.set_defaults(func=watch)
