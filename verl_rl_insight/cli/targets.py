"""``rl-insight targets add | remove | list``: the server's scrape targets."""

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request

from .checks import PROBLEMS, CliError, check_server_url


def _endpoint(args):
    """(targets URL without credentials, token or None): --server, else RL_INSIGHT_SERVER_URL, else
    the server running here (whose token this user can read)."""
    from ..client import server_url
    from ..config import ENV_SERVER_URL, ENV_TOKEN
    from ..server import control

    if args.server:
        base = check_server_url(args.server, "--server")
    elif os.environ.get(ENV_SERVER_URL):
        base = check_server_url(os.environ[ENV_SERVER_URL], ENV_SERVER_URL)
    else:
        state = control.read_state()
        if state is None:
            raise CliError("no server: none runs here and RL_INSIGHT_SERVER_URL is not set",
                           fix="rl-insight server start --detach, or give --server URL")
        base = control.trainer_url(state, local=True)
    base, token = server_url.split(base.rstrip("/"))
    return base + "/api/v1/targets", os.environ.get(ENV_TOKEN) or token


def _call(method, url, token, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read() or b"{}").get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        fix = "export the RL_INSIGHT_SERVER_URL line the server printed" if exc.code == 401 else None
        raise CliError(f"the server refused ({exc.code}): {reason}", fix=fix, code=PROBLEMS) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot reach the server at {url.rsplit('/api/', 1)[0]}: {getattr(exc, 'reason', exc)}",
                       code=PROBLEMS) from None


def add(args):
    from ..server.targets import TargetError, check_target

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
    record = _call("POST", url, token, json.dumps({"address": args.address, "job": args.job, "labels": labels,
                                                   "ttl_s": args.ttl}).encode())
    if args.json:
        print(json.dumps(record))
    else:
        expiry = "kept until removed" if not record["ttl_s"] else f"expires in {record['ttl_s']:.0f} s unless renewed"
        print(f"added {record['job']} {record['address']} ({expiry}); Prometheus scrapes it within a refresh")
    return 0


def remove(args):
    url, token = _endpoint(args)
    query = urllib.parse.urlencode({"job": args.job, "address": args.address})
    record = _call("DELETE", f"{url}?{query}", token)
    print(json.dumps(record) if args.json else f"removed {args.job} {args.address}")
    return 0


def show(args):
    url, token = _endpoint(args)
    targets = _call("GET", url, token)["targets"]
    if args.json:
        print(json.dumps(targets))
        return 0
    if not targets:
        print("no targets (rl-insight targets add HOST:PORT --job NAME adds one)")
        return 0
    rows = [("JOB", "ADDRESS", "LABELS", "EXPIRES")]
    for t in targets:
        labels = ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items())) or "-"
        rows.append((t["job"], t["address"], labels,
                     "never" if t["expires_in_s"] is None else f"in {t['expires_in_s']:.0f} s"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
    return 0


def add_parsers(sub):
    def common(parser, top=False):
        parser.add_argument("--server", default=None if top else argparse.SUPPRESS,
                            help="server URL (default: RL_INSIGHT_SERVER_URL, else the server running here)")
        parser.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                            help="print JSON for scripts")

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
