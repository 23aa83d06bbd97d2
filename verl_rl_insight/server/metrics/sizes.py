"""What the hub's objects are estimated to hold, in bytes (checked against tracemalloc by
tests/server/metrics/test_memory.py): the figures the memory bound is kept with (``memory.py``)."""

from __future__ import annotations

from verl_rl_insight.server.metrics.positions import StreamKey

SERIES_BYTES = 400  # a latest value and its dict slot
# A series' exposition line is held in five copies at the most: cached in its stream, in the
# shared /metrics body, twice while a body is rendered (its pieces, then the whole; renders go one
# at a time, the render lock) and in one named scrape's body while it is sent. They are booked
# with the series; a named scrape books its history's lines, and its live lines too when another
# named scrape's body is held.
LINE_COPIES = 5
LINE_EXTRA = 40  # a line's braces, space, value and newline
SNAPSHOT_BYTES = 420  # a snapshot, its values tuple, its identity in the stream's set of seen ones
VALUE_BYTES = 40  # a value in a snapshot (a tuple slot and its float), and its share of a names tuple
STREAM_BYTES = 4096  # a stream's own objects
TIMESTAMP_CHARS = 14  # a history line's timestamp


def line_length(labels_chars: int, name: str) -> int:
    return labels_chars + len(name) + LINE_EXTRA


def series_cost(labels_chars: int, name: str) -> int:
    """Bytes one series holds: its value and every copy of its exposition line."""
    return SERIES_BYTES + LINE_COPIES * line_length(labels_chars, name)


def labels_chars(key: StreamKey) -> int:
    """About the length of ``key``'s label text (escaping aside), without building it."""
    return sum(len(name) + len(value) + 4 for name, value in key)


def snapshot_bytes(values: int) -> int:
    """A snapshot of ``values`` values."""
    return SNAPSHOT_BYTES + VALUE_BYTES * values
