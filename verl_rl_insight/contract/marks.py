"""Marks: a person's note on one step of a run (``rl-insight runs mark``), drawn on the dashboards
and listed by ``rl-insight diagnose``; with ``reset_baseline`` the detectors start their baselines
again at that step (a planned curriculum change is not a reward collapse).

The text comes from a client that may be hostile, and it lands in a Prometheus label and on
terminals: it is printable text only (no control characters, no bidirectional or invisible format
characters), at most ``MAX_MARK_TEXT`` characters, checked by the schema the server decodes with.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

from verl_rl_insight.contract.naming import LABEL_VALUE_PATTERN

MAX_MARK_TEXT = 200
MAX_MARKS_PER_RUN = 100  # the label cardinality of the mark series: one series per mark
MAX_MARKS = 10_000  # all runs together
MAX_MARK_STEP = 2**53  # a step that still reads back exactly from a float
# the hub's own series of the marks: value = the step's trainer time in ms (Grafana's useValueForTime)
MARK_METRIC = "rl_insight_hub_run_mark"

# C0 and C1 controls (escape codes, newlines); every format character of Unicode (category Cf:
# the soft hyphen U+00AD, the Arabic letter mark U+061C, zero-width and bidirectional characters
# U+200B-U+200F, U+202A-U+202E, U+2060-U+206F, the BOM, the tag characters U+E0001, U+E0020-U+E007F,
# ...); line and paragraph separators; characters that draw nothing (the combining grapheme joiner,
# Hangul fillers, Khmer inherent vowels, Mongolian and other variation selectors). A test checks the
# list against every Cf character Python's unicodedata knows.
INVISIBLE = (
    r"\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u17b4-\u17b5\u180b-\u180f"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    r"\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
    r"\U000e0100-\U000e01ef"
)
MARK_TEXT_PATTERN = rf"^[^\x00-\x1f\x7f-\x9f{INVISIBLE}]+(?!\n)$"
MARK_TEXT_RULE = (
    f"must be 1 to {MAX_MARK_TEXT} printable characters (no control, format, invisible or bidirectional characters)"
)
# changes (a mark, a mark again, an unmark) of one run a second, and of all runs: each rewrites
# marks.json with fsync; more is 429 with Retry-After
MAX_MARK_WRITES_PER_RUN_S = 4
MARK_WRITES_BURST = 10  # at once, before the rate applies
MAX_MARK_WRITES_S = 32

RunName = Annotated[str, Meta(min_length=1, max_length=256, pattern=LABEL_VALUE_PATTERN)]


class MarkBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/runs/marks``: mark step ``step`` of a run with ``text``."""

    project: RunName
    experiment_name: RunName
    step: Annotated[int, Meta(ge=0, le=MAX_MARK_STEP)]
    text: Annotated[str, Meta(min_length=1, max_length=MAX_MARK_TEXT, pattern=MARK_TEXT_PATTERN)]
    reset_baseline: bool = False
