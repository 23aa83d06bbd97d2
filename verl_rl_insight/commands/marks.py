"""``rl-insight runs mark | marks | unmark``: a person's notes on a run's steps, and what
``rl-insight diagnose`` takes from them (it lists them with the findings, and passes the
reset-baseline steps to the detectors: their baselines start again there)."""

from __future__ import annotations

import argparse
import json
import time
import unicodedata
import urllib.parse
from collections.abc import Mapping, Sequence

from verl_rl_insight.commands.api import call, print_table, server
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.marks import MAX_MARK_TEXT

Mark = Mapping[str, object]


def printable(text: object, limit: int = MAX_MARK_TEXT) -> str:
    """Text as a terminal may show it: every control or format character (escape codes, newlines,
    bidirectional overrides) as a '?', at most ``limit`` characters (the server refuses them anyway)."""
    shown = "".join("?" if unicodedata.category(c)[0] == "C" else c for c in str(text))
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _when(mark: Mark) -> str:
    at = mark.get("time")
    if not isinstance(at, (int, float)):
        return "when the step arrives"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def fetch(base: str, token: str | None, project: str, experiment: str) -> list[Mark]:
    """The run's marks, by step."""
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    marks: list[Mark] = call("GET", f"{base}{paths.RUN_MARKS}?{query}", token)["marks"]
    return marks


def mark(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.profile import known_run

    base, token = server(args)
    known_run(base, token, args.project, args.experiment)  # a mistyped run is refused, the known ones named
    held = {int(str(m["step"])): m for m in fetch(base, token, args.project, args.experiment)}
    reset = args.reset_baseline
    kept = ""
    if reset is None:  # neither --reset-baseline nor --no-reset-baseline: a step marked again keeps its reset
        reset = bool(args.step in held and held[args.step].get("reset_baseline"))
        kept = " (its baseline reset kept: --no-reset-baseline drops it)" if reset else ""
    body = {
        "project": args.project,
        "experiment_name": args.experiment,
        "step": args.step,
        "text": args.text,
        "reset_baseline": reset,
    }
    made: Mark = call("POST", base + paths.RUN_MARKS, token, json.dumps(body))
    if args.json:
        print(json.dumps(made))
        return 0
    reset = ("; the detectors start their baselines again here" + kept) if made["reset_baseline"] else ""
    print(
        f"marked step {made['step']} of {printable(args.project, 100)}/{printable(args.experiment, 100)}: "
        f'"{printable(made["text"])}"{reset}; on the dashboards {"at " if made.get("time") else ""}{_when(made)}'
    )
    return 0


def show(args: argparse.Namespace) -> int:
    base, token = server(args)
    marks = fetch(base, token, args.project, args.experiment)
    if args.json:
        print(json.dumps(marks))
    elif not marks:
        print(f"no marks on {printable(args.project, 100)}/{printable(args.experiment, 100)} (rl-insight runs mark)")
    else:
        rows = [("STEP", "RESET", "STEP TIME", "TEXT")]
        rows += [(str(m["step"]), "yes" if m["reset_baseline"] else "-", _when(m), printable(m["text"])) for m in marks]
        print_table(rows)
    return 0


def unmark(args: argparse.Namespace) -> int:
    base, token = server(args)
    query = urllib.parse.urlencode({"project": args.project, "experiment_name": args.experiment, "step": args.step})
    result = call("DELETE", f"{base}{paths.RUN_MARKS}?{query}", token)
    if args.json:
        print(json.dumps(result))
    else:
        gone: Mark = result["removed"]
        print(f'removed the mark of step {gone["step"]}: "{printable(gone["text"])}"')
    return 0


def step(text: str) -> int:
    """A step number (argparse type): a whole number, 0 or more."""
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a step (a whole number, 0 or more)")
    return int(text)


# -- diagnose ------------------------------------------------------------------------------
def resets(marks: Sequence[Mark]) -> list[int]:
    return sorted(int(str(m["step"])) for m in marks if m.get("reset_baseline"))


def print_marks(marks: Sequence[Mark]) -> None:
    """The run's marks, under the findings: what a person said happened at those steps."""
    if not marks:
        return
    print(f"\nmarks ({len(marks)}, rl-insight runs marks):")
    for m in marks:
        reset = "  [baselines start again here]" if m.get("reset_baseline") else ""
        print(f"  step {m['step']}: {printable(m['text'])}{reset}")
