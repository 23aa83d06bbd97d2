"""``rl-insight runs show P/E`` and ``runs diff P/E1 P/E2``: the run's card (what the run was
started with, as its trainer sent it) and the keys in which two runs' cards differ.

What the server holds was written by trainers: every string is printed with its control
characters escaped (a local strip, until the CLI has one shared function for it).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import time
import urllib.parse

from verl_rl_insight.commands.api import SubParsers, call, print_table, server
from verl_rl_insight.commands.checks import CliError, Parser
from verl_rl_insight.commands.mcp.curves import Parting
from verl_rl_insight.commands.runs_parting import parting_keys
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.run_card import ABSENT, Absent, Json, card_keys, differences
from verl_rl_insight.contract.runs import Run

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
PARTED_SHOWN = 10  # rows of the parting table (--json: every key that parts)


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b``): server-held text cannot drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def run_name(text: str) -> Run:
    """``PROJECT/EXPERIMENT`` (argparse type): split at the first slash."""
    project, slash, experiment = text.partition("/")
    if not slash or not project or not experiment:
        raise argparse.ArgumentTypeError(f"{text!r} is not PROJECT/EXPERIMENT")
    return project, experiment


def shown(value: Json | Absent) -> str:
    """A value as one readable piece of text: text as it is, anything else as JSON (lists in full)."""
    if value is ABSENT:
        return "(absent)"
    return printable(value if isinstance(value, str) else json.dumps(value))


def fetch(base: str, token: str | None, run: Run) -> tuple[dict[str, Json], dict[str, Json]]:
    """(what the server keeps: card and time received, the card itself)."""
    query = urllib.parse.urlencode({"project": run[0], "experiment_name": run[1]})
    kept = call("GET", f"{base}{paths.RUN_CARD}?{query}", token)
    card = kept.get("card") if isinstance(kept, dict) else None
    if not isinstance(card, dict):
        raise CliError(f"the server's card of {run[0]}/{run[1]} is not an object")
    return kept, card


def _summary(card: dict[str, Json], received: object) -> list[tuple[str, str]]:
    versions = card.get("versions") if isinstance(card.get("versions"), dict) else {}
    assert isinstance(versions, dict)
    git = card.get("git")
    if isinstance(git, dict) and git.get("commit"):
        flag = git.get("dirty")
        dirty = " (dirty: uncommitted changes)" if flag is True else ("" if flag is False else " (dirty: unknown)")
        commit = f"{git['commit']}{dirty}"
    else:
        commit = "- (the working folder is no git work tree)"
    command = card.get("command")
    nodes, gpus = card.get("nodes"), card.get("gpus_per_node")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(received)) if isinstance(received, float) else "-"
    rows = [
        ("run", f"{card.get('project')}/{card.get('experiment_name')}"),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items()) or "-"),
        ("commit", commit),
        ("command", shlex.join(str(a) for a in command) if isinstance(command, list) else "-"),
        ("nodes x GPUs", f"{nodes} x {gpus}" if nodes is not None or gpus is not None else "-"),
        ("model", str(card.get("model") or "-")),
        ("received", when),
    ]
    notes = card.get("notes")
    if isinstance(notes, list) and notes:
        rows.append(("notes", "; ".join(str(n) for n in notes)))
    return [(name, printable(value)) for name, value in rows]


def show_card(args: argparse.Namespace) -> int:
    base, token = server(args)
    kept, card = fetch(base, token, args.run)
    if args.json:
        print(json.dumps(kept))
        return 0
    rows = _summary(card, kept.get("received"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    config = card.get("config")
    keys = card_keys({"config": config}) if isinstance(config, dict) else {}
    print(f"config ({len(keys)} keys)" if keys else "config: none sent")
    for key, kept_value in keys.items():
        print(f"  {printable(key)} = {shown(kept_value)}")
    return 0


def _card_or_none(base: str, token: str | None, run: Run) -> dict[str, Json] | None:
    """The run's card; None where it has none (an imported run, a trainer that sent none)."""
    try:
        return fetch(base, token, run)[1]
    except CliError as exc:
        if "(404)" in str(exc):
            return None
        raise


def _figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _print_parting(parted: list[Parting], shared: int, names: list[str]) -> None:
    if not parted:
        print(f"their curves do not part ({shared} keys both logged, compared by step)")
        return
    print(f"curves that part most ({len(parted)} of the {shared} keys both logged, by step):")
    rows = [("KEY", "PARTS AT STEP", f"LAST {printable(names[0])}", f"LAST {printable(names[1])}", "APART")]
    for p in parted[:PARTED_SHOWN]:
        rows.append(
            (printable(p.key), str(p.parts_at), _figure(p.a_last), _figure(p.b_last), f"{p.distance:.0f}x noise")
        )
    print_table(rows)


def diff_cards(args: argparse.Namespace) -> int:
    base, token = server(args)
    first, second = (_card_or_none(base, token, run) for run in (args.first, args.second))
    names = ["/".join(args.first), "/".join(args.second)]
    parted, shared = parting_keys(base, token, args.first, args.second)
    found, by_nature = differences(first, second) if first is not None and second is not None else ([], [])
    if args.json:
        rows = [
            {
                "key": d.key,
                "first": None if d.first is ABSENT else d.first,
                "second": None if d.second is ABSENT else d.second,
                "absent": "first" if d.first is ABSENT else ("second" if d.second is ABSENT else None),
            }
            for d in found
        ]
        cards = first is not None and second is not None
        print(
            json.dumps(
                {
                    "first": names[0],
                    "second": names[1],
                    "differences": rows if cards else None,
                    "by_nature": by_nature,
                    "parting": [p._asdict() for p in parted],
                    "keys_compared": shared,
                }
            )
        )
        return 0
    if first is None or second is None:
        which = " and ".join(printable(n) for n, c in zip(names, (first, second)) if c is None)
        print(f"{which} sent no card (an imported run has one only with runs import --card): no config to compare")
    elif not found:
        print(f"{printable(names[0])} and {printable(names[1])} were started alike: no key differs")
    else:
        header = ("KEY", *(printable(n) for n in names))
        print_table([header, *((printable(d.key), shown(d.first), shown(d.second)) for d in found)])
    if by_nature:
        print(
            f"({len(by_nature)} more differ by nature: they hold the runs' own names or copy a key above, "
            f"e.g. {printable(by_nature[0])}; --json lists them)"
        )
    _print_parting(parted, shared, names)
    return 0


def add_parsers(runs_sub: SubParsers) -> list[Parser]:
    """``runs show`` and ``runs diff`` (their parsers, for the common options)."""
    show = runs_sub.add_parser(
        "show", help="a run's card: versions, commit, command, nodes x GPUs, model, then its config as dotted keys"
    )
    show.add_argument("run", type=run_name, metavar="PROJECT/EXPERIMENT")
    show.set_defaults(func=show_card)
    diff = runs_sub.add_parser(
        "diff", help="the keys in which two runs' cards differ (dotted, lists in full), and the curves that part most"
    )
    diff.add_argument("first", type=run_name, metavar="PROJECT/EXPERIMENT")
    diff.add_argument("second", type=run_name, metavar="PROJECT/EXPERIMENT")
    diff.set_defaults(func=diff_cards)
    return [show, diff]
