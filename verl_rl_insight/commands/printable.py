"""What the CLI shows of what a server holds, made safe for a terminal.

Run names, profile details, trace paths, target jobs, alert texts and span names are written by
whoever holds a credential (a run credential is handed to every Ray worker). A control character in
one of them (an escape sequence that sets the title, clears the screen or colours fake instructions;
a newline or carriage return that forges a line of the table) would reach the operator's terminal.
Every path by which the CLI reads a server, Prometheus or Tempo answer passes it through
``printable`` once, where it is decoded; nothing printed afterwards carries a control character.
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

# C0 (tab and newline included: a value is one cell of one line), DEL, C1 (0x9b is a one-byte CSI
# in some terminals), and Unicode's bidirectional overrides and isolates (they reorder what is shown).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

Decoded = TypeVar("Decoded")


def _shown(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}" if ord(match.group()) < 0x100 else f"\\u{ord(match.group()):04x}"


def printable(value: Decoded) -> Decoded:
    """``value`` (a decoded JSON document, or a string) with every control character in every string,
    keys included, written out as its escape (``\\x1b``): visible, never obeyed."""
    if isinstance(value, str):
        cleaned: object = CONTROL.sub(_shown, value)
    elif isinstance(value, list):
        cleaned = [printable(item) for item in value]
    elif isinstance(value, tuple):
        cleaned = tuple(printable(item) for item in value)
    elif isinstance(value, dict):
        cleaned = {printable(key): printable(item) for key, item in value.items()}
    else:
        return value
    return cast(Decoded, cleaned)  # the same shape, its strings cleaned
