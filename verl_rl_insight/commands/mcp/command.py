"""``rl-insight mcp [--http HOST:PORT] [--allow-write]``: the runs as Model Context Protocol tools for
a coding agent, over stdio (the agent starts it: the user's credential, found as every command finds
it) or streamable HTTP (each request brings its own ``Authorization: Bearer``; this process holds
none). Read-only unless ``--allow-write``."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from pathlib import Path

from verl_rl_insight.commands.api import SubParsers, server
from verl_rl_insight.commands.checks import REFUSED, CliError
from verl_rl_insight.contract import environment

MAX_BYTES_LOW, MAX_BYTES_HIGH = 4_000, 4_000_000


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6), argparse type."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (127.0.0.1:8765)")
    return host, int(port)


def max_bytes(text: str) -> int:
    if not text.isdigit() or not MAX_BYTES_LOW <= int(text) <= MAX_BYTES_HIGH:
        raise argparse.ArgumentTypeError(f"{text!r}: give a byte count from {MAX_BYTES_LOW} to {MAX_BYTES_HIGH}")
    return int(text)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace) -> int:
    try:
        from verl_rl_insight.commands.mcp.app import Settings, build
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        fix = "pip install 'verl-rl-insight[mcp]'"
        raise CliError("rl-insight mcp needs the mcp package", fix=fix, code=REFUSED) from None
    base, secret = server(args)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="rl-insight mcp: %(message)s")
    settings = Settings(
        base=base,
        secret=None if args.http else secret,  # over HTTP, each request's own credential: none held here
        over_http=bool(args.http),
        allow_write=args.allow_write,
        traces_root=Path(args.traces_root).resolve() if args.traces_root else None,
        max_bytes=args.max_bytes,
        debug=args.debug or os.environ.get(environment.DEBUG, "") not in ("", "0"),
    )
    app = build(settings)
    mode = "read and write (marks, profile requests)" if args.allow_write else "read-only"
    if args.http is None:
        print(f"rl-insight mcp: stdio, {mode}, reading {base}", file=sys.stderr)
        app.run("stdio")
        return 0
    host, port = args.http
    print(
        f"rl-insight mcp: http://{host}:{port}/mcp, {mode}, reading {base}; each request sends its own "
        "Authorization: Bearer <token or run credential>",
        file=sys.stderr,
    )
    if not _loopback(host):
        print(f"rl-insight mcp: {host} is not loopback: anyone who reaches it can ask with their credential",
              file=sys.stderr)  # fmt: skip
    app.run("streamable-http", host=host, port=port, stateless_http=True, json_response=True)
    return 0


def add_parsers(sub: SubParsers) -> None:
    from verl_rl_insight.commands.api import common_options
    from verl_rl_insight.commands.mcp.bounded import DEFAULT_MAX_BYTES

    parser = sub.add_parser(
        "mcp",
        help="the runs, findings, curves, steps and profiles as MCP tools for a coding agent",
        description="A Model Context Protocol server reading the rl-insight server's API: over stdio (an agent "
        "starts `rl-insight mcp`) or streamable HTTP (--http HOST:PORT, each request with its own "
        "Authorization: Bearer). Read-only unless --allow-write.",
    )
    parser.add_argument("--http", type=host_port, metavar="HOST:PORT", help="serve streamable HTTP at /mcp")
    parser.add_argument("--allow-write", action="store_true", help="add mark_step and request_profile (logged)")
    parser.add_argument(
        "--traces-root", metavar="DIR", help="over HTTP, the only folder profile_analyze reads trace folders under"
    )
    parser.add_argument(
        "--max-bytes", type=max_bytes, default=DEFAULT_MAX_BYTES, help=f"an answer's cap (default {DEFAULT_MAX_BYTES})"
    )
    common_options(parser, top=True)
    parser.set_defaults(func=run)
