"""``rl-insight targets add | remove | list``: the server's scrape targets."""

import argparse
import json
import urllib.parse
from typing import Any

from verl_rl_insight.commands.api import SubParsers, show_list
from verl_rl_insight.commands.api import call as _call
from verl_rl_insight.commands.api import server as _server
from verl_rl_insight.commands.checks import CliError
from verl_rl_insight.contract import paths


def _endpoint(args: argparse.Namespace) -> tuple[str, str | None]:
    base, token = _server(args)
    return base + paths.TARGETS, token


def add(args: argparse.Namespace) -> int:
    from verl_rl_insight.server.stores.targets import TargetError, check_target

    labels = {}
    for item in args.label or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--label takes KEY=VALUE, got {item!r}")
        labels[key] = value
    try:
        check_target(args.address, args.job, labels, args.ttl)
    except TargetError as exc:
        raise CliError(str(exc)) from None
    url, token = _endpoint(args)
    record = _call(
        "POST",
        url,
        token,
        json.dumps({"address": args.address, "job": args.job, "labels": labels, "ttl_s": args.ttl}).encode(),
    )
    if args.json:
        print(json.dumps(record))
    else:
        expiry = "kept until removed" if not record["ttl_s"] else f"expires in {record['ttl_s']:.0f} s unless renewed"
        print(f"added {record['job']} {record['address']} ({expiry}); Prometheus scrapes it within a refresh")
    return 0


def remove(args: argparse.Namespace) -> int:
    url, token = _endpoint(args)
    query = urllib.parse.urlencode({"job": args.job, "address": args.address})
    record = _call("DELETE", f"{url}?{query}", token)
    print(json.dumps(record) if args.json else f"removed {args.job} {args.address}")
    return 0


def show(args: argparse.Namespace) -> int:
    url, token = _endpoint(args)

    def row(t: dict[str, Any]) -> tuple[str, ...]:
        labels = ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items())) or "-"
        return (
            t["job"],
            t["address"],
            labels,
            "never" if t["expires_in_s"] is None else f"in {t['expires_in_s']:.0f} s",
        )

    return show_list(
        args,
        _call("GET", url, token)["targets"],
        "no targets (rl-insight targets add HOST:PORT --job NAME adds one)",
        ("JOB", "ADDRESS", "LABELS", "EXPIRES"),
        row,
    )


def add_parsers(sub: SubParsers) -> None:
    from verl_rl_insight.commands.api import common_options as common

    targets = sub.add_parser("targets", help="scrape targets (node-exporter, dcgm-exporter, ...) of the server")
    common(targets, top=True)
    targets_sub = targets.add_subparsers(dest="targets_command", metavar="COMMAND", required=True)
    adding = targets_sub.add_parser("add", help="add a target Prometheus should scrape")
    adding.add_argument("address", help="HOST:PORT")
    adding.add_argument("--job", required=True, help="e.g. node-exporter, dcgm-exporter, npu-exporter")
    adding.add_argument("--label", action="append", metavar="KEY=VALUE")
    adding.add_argument("--ttl", type=float, default=0, help="seconds until it expires (default 0: never)")
    adding.set_defaults(func=add)
    removing = targets_sub.add_parser("remove", help="remove a target")
    removing.add_argument("address", help="HOST:PORT")
    removing.add_argument("--job", required=True)
    removing.set_defaults(func=remove)
    listing = targets_sub.add_parser("list", help="list targets")
    listing.set_defaults(func=show)
    for parser in (adding, removing, listing):
        common(parser)
