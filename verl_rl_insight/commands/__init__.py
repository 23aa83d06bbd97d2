"""The ``rl-insight`` command.

Every error is one line, and a second with the fix where there is one; never a traceback
(``--debug`` or ``RL_INSIGHT_DEBUG=1`` shows it, for bug reports). Exit codes: 0 ok, 1 ran with
problems, 2 refused (bad usage or config), 3 ``server status``: not running, 130 interrupted.
"""

import argparse
import os
import sys
from collections.abc import Sequence

from verl_rl_insight import __version__
from verl_rl_insight.commands import alerts, diagnose, job, profile, report, runs, samples, targets
from verl_rl_insight.commands.checks import PROBLEMS, REFUSED, CliError, Parser
from verl_rl_insight.commands.mcp import command as mcp
from verl_rl_insight.commands.server import command as server
from verl_rl_insight.commands.timeline import command as timeline
from verl_rl_insight.commands.watch import command as watch
from verl_rl_insight.contract import environment
from verl_rl_insight.contract.errors import ConfigError

FILE_MISTAKES = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rl-insight", description="Real-time monitoring for verl RL training.")
    parser.add_argument("--version", action="version", version=f"rl-insight {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    server.add_parsers(sub)
    targets.add_parsers(sub)
    alerts.add_parsers(sub)
    timeline.add_parsers(sub)
    watch.add_parsers(sub)
    runs.add_parsers(sub)
    job.add_parsers(sub)
    profile.add_parsers(sub)
    diagnose.add_parsers(sub)
    samples.add_parsers(sub)
    report.add_parsers(sub)
    mcp.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(environment.DEBUG, "") not in ("", "0")
    try:
        code = args.func(args) or 0
        sys.stdout.flush()  # a reader that went away is seen here, not as an error at exit
        return int(code)
    except CliError as exc:
        print(f"rl-insight: {exc}" + (f"\n  fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        return int(exc.code)
    except ConfigError as exc:  # a config file, variable or setting to fix: its message says which
        print(f"rl-insight: {str(exc).splitlines()[0]}", file=sys.stderr)
        return REFUSED
    except KeyboardInterrupt:
        print("rl-insight: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rl-insight config | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141  # as a program ended by SIGPIPE
    except Exception as exc:
        if isinstance(exc, FILE_MISTAKES) and exc.filename is not None:  # -o in a folder that is not there, ...
            print(f"rl-insight: cannot use {exc.filename}: {exc.strerror}", file=sys.stderr)
            return REFUSED
        if debug:
            raise
        print(
            f"rl-insight: unexpected error: {type(exc).__name__}: {str(exc)[:300]}\n"
            "  fix: run it again with --debug (or RL_INSIGHT_DEBUG=1) and report the traceback",
            file=sys.stderr,
        )
        return PROBLEMS
