"""What the command line refuses before anything starts, each as one line naming the bad value."""

import argparse
import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from verl_rl_insight.contract.errors import RLInsightError

# Exit codes (README "Exit codes"): 0 ok, 1 ran with problems, 2 refused (bad usage or config).
OK, PROBLEMS, REFUSED = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line and where to read more: no usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(REFUSED, f"{self.prog}: {message}\n  fix: see `{self.prog} --help`\n")


Number = TypeVar("Number", int, float)


class CliError(RLInsightError):
    """What the user must change: one line, and a second with the fix when there is one."""

    def __init__(self, message: str, fix: str | None = None, code: int = REFUSED) -> None:
        super().__init__(message)
        self.fix = fix
        self.code = code


def positive_int(text: str) -> int:
    return _number(text, int, 0, 1e9, "must be a whole number above 0, got {text!r}")


def positive_float(text: str) -> float:
    return _number(text, float, 0, 1e9, "must be a number of seconds above 0, got {text!r}")


def port(text: str) -> int:
    return _number(text, int, 0, 65536, "port {text} is out of range (1-65535)", "must be a port number (1-65535)")


def _number(
    text: str,
    kind: Callable[[str], Number],
    low: float,
    high: float,
    out_of_range: str,
    not_a_number: str | None = None,
) -> Number:
    """``text`` as a ``kind`` strictly between ``low`` and ``high``, or argparse's one-line error."""
    try:
        value = kind(text)
    except ValueError:
        message = f"{not_a_number}, got {text!r}" if not_a_number else out_of_range.format(text=text)
        raise argparse.ArgumentTypeError(message) from None
    if not low < value < high:
        raise argparse.ArgumentTypeError(out_of_range.format(text=text))
    return value


def bind_address(text: str) -> str:
    """An address to listen on: an IP address, or a name this machine resolves."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    try:
        socket.getaddrinfo(text, None)
    except (socket.gaierror, UnicodeError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IP address or a host name this machine resolves "
            "(0.0.0.0 listens on every interface, 127.0.0.1 on this machine only)"
        ) from None
    return text


def check_server_url(url: str, where: str = "--server") -> str:
    """``url`` as the address of an rl-insight server (http or https, a host, a valid port)."""
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises for a port that is not a number or out of range
    except ValueError as exc:
        raise CliError(f"{where} is not a server URL ({exc}): give http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(
            f"{where} is not a server URL: give http://HOST:PORT, e.g. http://10.0.0.5:18080",
            fix="the line `rl-insight server start` prints has the right value",
        )
    return url


def writable_folder(path: Path) -> Path:
    """``path`` as a folder to write into: created when missing; refused when it is a file or not writable."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise CliError(f"{folder} is a file, not a folder", fix="give a folder (it is created when missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create {folder}: {exc.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CliError(f"cannot write into {folder}: permission denied")
    return folder
