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

# C0 and C1 controls (escape codes, newlines), zero-width and bidirectional format characters
# (U+200B-U+200F, U+202A-U+202E, U+2060-U+206F), line and paragraph separators, the BOM
MARK_TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]+(?!\n)$"
MARK_TEXT_RULE = f"must be 1 to {MAX_MARK_TEXT} printable characters (no control or invisible format characters)"

RunName = Annotated[str, Meta(min_length=1, max_length=256, pattern=LABEL_VALUE_PATTERN)]


class MarkBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/runs/marks``: mark step ``step`` of a run with ``text``."""

    project: RunName
    experiment_name: RunName
    step: Annotated[int, Meta(ge=0, le=MAX_MARK_STEP)]
    text: Annotated[str, Meta(min_length=1, max_length=MAX_MARK_TEXT, pattern=MARK_TEXT_PATTERN)]
    reset_baseline: bool = False
