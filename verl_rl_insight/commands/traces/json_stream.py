"""A chrome trace read as a stream of events: the standard library's JSON decoder (its C scanner)
run on one event at a time over a sliding buffer. Memory: the buffer (``CHUNK`` and the longest
event, at most ``MAX_VALUE`` characters), never the trace. Hostile input is bounded: a value nested
deeper than the interpreter's recursion limit is refused at once (ijson's item builder took memory
in the square of the depth: 24 GB for a 348-byte trace of 100,000 nested lists), ``NaN`` and
``Infinity`` are read as null (no stamp), and a value that never ends stops at ``MAX_VALUE``. Time:
about 10 % under ijson's on kineto's traces, and no object graph of the whole file for the collector
to walk (what makes ``json.load`` of a 200 MB trace slower per megabyte than of a 20 MB one).

The top level is an object (torch: the header keys, ``traceEvents``, then ``traceName``) or a bare
list of events (MSTX). The header's keys before ``traceEvents`` are handed back whole; the keys
after it are not read."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Protocol

CHUNK = 1 << 20  # characters read at a time
MAX_VALUE = 64 << 20  # characters one value (an event, a header key's value) may take
_DECODER = json.JSONDecoder(parse_constant=lambda _: None)  # NaN, Infinity: no number


class TooDeep(ValueError):
    """A value nested deeper than the decoder goes."""


_SPACE = re.compile(r"[ \t\n\r]*")
_SPACE_OR_COMMA = re.compile(r"[ \t\n\r,]*")


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Truncated(ValueError):
    """The trace ends inside its JSON."""


class _Buffer:
    def __init__(self, raw: Readable) -> None:
        self.raw = raw
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.at = 0
        self.ended = False

    def more(self) -> bool:
        """Reads a chunk more (the consumed part dropped); False at the end of the file."""
        if self.ended:
            return False
        data = self.raw.read(CHUNK)
        self.text = self.text[self.at :] + self.utf8.decode(data, final=not data)
        self.at = 0
        self.ended = not data
        return True

    def skip(self, commas: bool = False) -> str:
        """The next character that is not white space (nor a comma, with ``commas``), not consumed; ''
        at the end."""
        pattern = _SPACE_OR_COMMA if commas else _SPACE
        while True:
            found = pattern.match(self.text, self.at)  # a run of zero or more: it always matches
            at = found.end() if found else self.at
            self.at = at
            if at < len(self.text):
                return self.text[at]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        found = self.skip()
        if found != char:
            raise ValueError(f"expected {char!r}, found {found or 'the end of the file'!r}") if found else Truncated()
        self.at += 1

    def value(self, skipped: bool = False) -> object:
        """The next JSON value, read more until it is whole (``skipped``: the white space before it is)."""
        while True:
            if not skipped:
                self.skip()
            skipped = False
            try:
                found, end = _DECODER.raw_decode(self.text, self.at)
            except RecursionError:
                raise TooDeep("a value nested deeper than the JSON decoder goes") from None
            except json.JSONDecodeError:
                if len(self.text) - self.at > MAX_VALUE:
                    raise ValueError(f"a value of over {MAX_VALUE >> 20} M characters, or not JSON") from None
                if self.more():
                    continue
                raise Truncated() from None
            if end >= len(self.text) and not self.ended and isinstance(found, (int, float)):
                if self.more():  # a number at the buffer's end may go on in the next chunk
                    continue
            self.at = end
            return found


def read_events(raw: Readable, header: dict[str, object]) -> Iterator[object]:
    """Every item of the trace's events, in order; ``header`` receives the top-level keys before
    them. Raises ``Truncated`` when the file ends inside its JSON, ValueError when it is not one."""
    buffer = _Buffer(raw)
    first = buffer.skip()
    if first == "[":
        buffer.at += 1
        yield from _items(buffer)
        return
    buffer.expect("{")
    while True:
        key = buffer.value()
        if not isinstance(key, str):
            raise ValueError("the trace's keys are not strings")
        buffer.expect(":")
        if key == "traceEvents":
            buffer.expect("[")
            yield from _items(buffer)
            return
        header[key] = buffer.value()
        if buffer.skip() == ",":
            buffer.at += 1
        else:
            buffer.expect("}")
            return  # an object without traceEvents: no event


def _items(buffer: _Buffer) -> Iterator[object]:
    while True:
        found = buffer.skip(commas=True)
        if found == "]":
            buffer.at += 1
            return
        if not found:
            raise Truncated()
        yield buffer.value(skipped=True)
