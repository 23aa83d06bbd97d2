"""``rl-insight alerts [list] | silence | silences | unsilence``: what fires, and quiet while debugging.

Through the server's API (``/api/v1/alerts``, ``/api/v1/silences``), which asks the Alertmanager
the server runs; silencing and unsilencing are writes: the token rules apply.
"""

import argparse
import datetime
import json
import re
import time
import urllib.parse
from typing import Any

from verl_rl_insight.commands.api import SubParsers, call, common_options, server, show_list
from verl_rl_insight.contract import paths

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """'2h', '30m', '1d', '90s' or plain seconds -> seconds (argparse type)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30m, 2h, 1d)")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def _ago(iso: str | None) -> str:
    if not isinstance(iso, str):
        return "?"
    try:
        since = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return "?"
    minutes = max(0, int((time.time() - since.timestamp()) // 60))
    text = f"{minutes}m" if minutes < 120 else f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{text} ago"


def _value(text: str) -> str:
    try:
        return f"{float(text):.4g}"
    except (TypeError, ValueError):
        return text or "-"


def show(args: argparse.Namespace) -> int:
    base, token = server(args)
    alerts = call("GET", base + paths.ALERTS, token)["alerts"]
    alerts = sorted(
        (
            a
            for a in alerts
            if (not args.project or a["labels"].get("project") == args.project)
            and (not args.experiment or a["labels"].get("experiment_name") == args.experiment)
        ),
        key=lambda a: a.get("since") or "",
    )

    def row(a: dict[str, Any]) -> tuple[str, ...]:
        labels = a["labels"]
        run = f"{labels.get('project', '-')}/{labels.get('experiment_name', '-')}"
        state = "silenced" if a.get("silenced_by") else (a.get("state") or "firing").replace("active", "firing")
        return (
            a["alertname"] or "?",
            labels.get("severity", "-"),
            run,
            _ago(a.get("since")),
            _value(a["annotations"].get("value")),
            state,
        )

    empty = "no alerts firing" + (" for this run" if args.project or args.experiment else "")
    return show_list(args, alerts, empty, ("ALERT", "SEVERITY", "RUN", "SINCE", "VALUE", "STATE"), row)


def silence(args: argparse.Namespace) -> int:
    base, token = server(args)
    body = {"project": args.project, "experiment_name": args.experiment, "duration_s": args.duration}
    if args.alert:
        body["alertname"] = args.alert
    if args.comment:
        body["comment"] = args.comment
    made = call("POST", base + paths.SILENCES, token, json.dumps(body).encode())
    if args.json:
        print(json.dumps(made))
        return 0
    what = args.alert or "every alert"
    print(
        f"silenced {what} of {args.project}/{args.experiment} until {made['ends']} (id {made['id']})\n"
        f"  end it sooner: rl-insight alerts unsilence {made['id']}"
    )
    return 0


def silences(args: argparse.Namespace) -> int:
    base, token = server(args)

    def row(s: dict[str, Any]) -> tuple[str, ...]:
        matches = ",".join(f"{m['name']}={m['value']}" for m in s.get("matchers", []))
        return (s["id"], matches, s.get("endsAt", "?"), s.get("createdBy", "-"), s.get("comment", ""))

    return show_list(
        args,
        call("GET", base + paths.SILENCES, token)["silences"],
        "no silences",
        ("ID", "MATCHES", "UNTIL", "BY", "COMMENT"),
        row,
    )


def unsilence(args: argparse.Namespace) -> int:
    base, token = server(args)
    call("DELETE", base + paths.SILENCES + "?" + urllib.parse.urlencode({"id": args.id}), token)
    print(json.dumps({"expired": args.id}) if args.json else f"silence {args.id} ended; its alerts notify again")
    return 0


def add_parsers(sub: SubParsers) -> None:
    alerts = sub.add_parser("alerts", help="alerts firing now; silence a run's alerts while debugging")
    common_options(alerts, top=True)
    alerts.add_argument("--project", default=None, help="only this project's alerts")
    alerts.add_argument("--experiment", default=None, help="only this experiment's alerts")
    alerts.set_defaults(func=show)
    alerts_sub = alerts.add_subparsers(dest="alerts_command", metavar="COMMAND")
    listing = alerts_sub.add_parser("list", help="alerts firing now (the default)")
    listing.set_defaults(func=show)
    quiet = alerts_sub.add_parser("silence", help="no notifications for a run's alerts for a while")
    quiet.add_argument("--project", required=True)
    quiet.add_argument("--experiment", required=True, help="the experiment_name")
    quiet.add_argument(
        "--for",
        dest="duration",
        type=duration,
        required=True,
        metavar="DURATION",
        help="how long: 30m, 2h, 1d (1 minute to 30 days)",
    )
    quiet.add_argument("--alert", help="only this alert (e.g. RLInsightTrainingStalled)")
    quiet.add_argument("--comment", help="why (shown in Alertmanager)")
    quiet.set_defaults(func=silence)
    shown = alerts_sub.add_parser("silences", help="silences not yet expired")
    shown.set_defaults(func=silences)
    loud = alerts_sub.add_parser("unsilence", help="end a silence")
    loud.add_argument("id", help="the ID `alerts silence` printed")
    loud.set_defaults(func=unsilence)
    for parser in (listing, shown, loud, quiet):
        common_options(parser)
    for parser in (listing,):
        parser.add_argument("--project", default=argparse.SUPPRESS)
        parser.add_argument("--experiment", default=argparse.SUPPRESS)
