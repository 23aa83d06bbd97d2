"""How the commands reach the server's API: which server, its token, one-line errors."""

import argparse
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypeVar

from verl_rl_insight.commands import http_fetch
from verl_rl_insight.commands.checks import PROBLEMS, CliError, Parser, check_server_url
from verl_rl_insight.commands.printable import printable


def common_options(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """--server and --json, on the command and on each subcommand."""
    parser.add_argument(
        "--server",
        default=None if top else argparse.SUPPRESS,
        help="server URL (default: RL_INSIGHT_SERVER_URL, else the server running here)",
    )
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="print JSON for scripts"
    )


def server(args: argparse.Namespace) -> tuple[str, str | None]:
    """(server URL without credentials, token or None): --server, else RL_INSIGHT_SERVER_URL, else
    the server running here (whose token this user can read)."""
    from verl_rl_insight.commands.server import control
    from verl_rl_insight.contract import server_url
    from verl_rl_insight.trainer.config import ENV_SERVER_URL, ENV_TOKEN

    if args.server:
        base = check_server_url(args.server, "--server")
    elif os.environ.get(ENV_SERVER_URL):
        base = check_server_url(os.environ[ENV_SERVER_URL], ENV_SERVER_URL)
    else:
        state = control.read_state()
        if state is None:
            raise CliError(
                "no server: none runs here and RL_INSIGHT_SERVER_URL is not set",
                fix="rl-insight server start --detach, or give --server URL",
            )
        base = control.trainer_url(state, local=True)
    base, token = server_url.split(base.rstrip("/"))
    return base, os.environ.get(ENV_TOKEN) or token


Item = TypeVar("Item")
# what ``add_subparsers()`` gives: each command module adds its parsers to it
SubParsers: TypeAlias = "argparse._SubParsersAction[Parser]"


def call(method: str, url: str, token: str | None, body: bytes | str | None = None, timeout_s: float = 10) -> Any:
    """The rl-insight server's API: its JSON answer (printable), or a CliError a person reads."""
    return printable(call_json(method, url, token, body, timeout_s))


def call_json(
    method: str, url: str, token: str | None, body: bytes | str | None = None, timeout_s: float = 10
) -> object:
    """``call``'s answer as the server sent it (for a program, not a terminal: names kept as they
    are, a control character in them too); its errors are ``call``'s."""
    where = url.rsplit("/api/", 1)[0]
    try:
        reply = http_fetch.fetch(method, url, token=token, body=body, timeout_s=timeout_s)
    except http_fetch.NoAnswer as exc:
        raise CliError(f"cannot reach the server at {where}: {exc}", code=PROBLEMS) from None
    if not reply.ok:
        fix = "export the RL_INSIGHT_SERVER_URL line the server printed" if reply.status == 401 else None
        raise CliError(f"the server refused ({reply.status}): {printable(reply.error())}", fix=fix, code=PROBLEMS)
    try:
        return reply.json()
    except ValueError:
        raise CliError(f"the server at {where} did not answer with JSON", code=PROBLEMS) from None


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of strings as aligned columns (the first row the header); the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])


def show_list(
    args: argparse.Namespace,
    items: Sequence[Item],
    empty: str,
    header: Sequence[str],
    row: Callable[[Item], Sequence[str]],
) -> int:
    """A list command's output: JSON for --json, ``empty`` for none, else a table of ``row(item)``."""
    if args.json:
        print(json.dumps(items))
    elif not items:
        print(empty)
    else:
        print_table([header, *(row(item) for item in items)])
    return 0
