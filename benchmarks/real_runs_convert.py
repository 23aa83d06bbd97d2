"""Convert a verl console log into verl's ``file`` logger format (``trainer.logger=['file']``).

verl's console logger prints one line a step, ``step:N - key:value - key:value ...``
(``verl.utils.logger.aggregate_logger.concat_dict_to_str``; older verl printed every number with
``:.3f``, newer verl with ``pprint.pformat``). Its file logger writes the same dict as one JSON object
a line, ``{"step": N, "data": {key: value}}``, with orjson. This script turns the first into the
second and keeps exactly what the log printed: a value printed with a decimal point or an exponent
becomes a float, one printed as a bare integer an int, ``nan``/``inf`` a float that orjson writes as
``null``. Nothing is filled in, smoothed or reordered; a line that does not parse stops the script.

A console capture can cut long lines: wandb's ``files/output.log`` keeps at most 4096 characters of a
line (and strips the space the cut may leave at the end), so a step line with many validation keys loses
its tail. ``--cut-at 4096`` marks a line of 4095 or 4096 characters as cut: its last item (possibly a
partial key or number) is dropped, the items before it are kept, and the keys after the cut are simply
absent from that step. (A complete line of exactly that length would lose one real item: never a made-up
one.)

A log can hold more than one run (a restart prints ``step:1`` again). verl's file logger opens its
file anew for each run, so ``--segment K`` picks the K-th run (0 = the first; -1 = the last) where
a segment starts whenever the step goes down.

    python3 benchmarks/real_runs_convert.py RUN.log OUT.jsonl [--segment K] [--last-step N] [--cut-at 4096]
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import orjson

# what precedes "step:" on a line: Ray's "(TaskRunner pid=...)" prefix and its ANSI colour codes
_STEP_LINE = re.compile(r"(?:^|[\s\]m])step:(\d+) - (.*)$")
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)")
# numpy 2 scalars as pprint.pformat prints them: np.float64(0.5)
_NUMPY = re.compile(r"np\.(?:float|int|uint)\d+\((.*)\)")

Value = int | float
Step = tuple[int, dict[str, Value]]


class UnparsedLine(ValueError):
    """A step line with an item that is not ``key:number``."""


def parse_value(text: str) -> Value:
    """The number as printed: an int when printed without a decimal point or exponent."""
    wrapped = _NUMPY.fullmatch(text)
    if wrapped:
        text = wrapped.group(1)
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    raise UnparsedLine(f"not a number: {text!r}")


def parse_line(line: str, cut_at: int | None = None) -> Step | None:
    """``(step, data)`` of one console line, or None when the line is not a step line.

    A line ``cut_at`` or ``cut_at - 1`` characters long was cut by the capture: its last item is dropped."""
    text = line.rstrip("\r\n")
    match = _STEP_LINE.search(text)
    if match is None:
        return None
    step = int(match.group(1))
    items = match.group(2).split(" - ")
    if cut_at is not None and len(text) >= cut_at - 1:
        items = items[:-1]
    data: dict[str, Value] = {}
    for item in items:
        key, sep, text = item.rpartition(":")
        if not sep or not key:
            raise UnparsedLine(f"step {step}: item without key:value: {item!r}")
        if key in data:
            raise UnparsedLine(f"step {step}: key printed twice: {key!r}")
        data[key] = parse_value(text.strip())
    return step, data


def parse_log(lines: list[str], cut_at: int | None = None) -> list[list[Step]]:
    """Every step line of the log, split into runs wherever the step goes down."""
    segments: list[list[Step]] = [[]]
    for number, line in enumerate(lines, start=1):
        try:
            parsed = parse_line(line, cut_at)
        except UnparsedLine as error:
            raise UnparsedLine(f"line {number}: {error}") from None
        if parsed is None:
            continue
        current = segments[-1]
        if current and parsed[0] < current[-1][0]:
            segments.append([])
        segments[-1].append(parsed)
    return [segment for segment in segments if segment]


def to_jsonl(steps: list[Step]) -> bytes:
    """The lines verl's FileLogger would have written for these steps."""
    return b"".join(orjson.dumps({"step": step, "data": data}) + b"\n" for step, data in steps)


def write_run(out: Path, steps: list[Step]) -> str:
    """Write the steps as verl's file logger lines; what was written, in one line."""
    out.write_bytes(to_jsonl(steps))
    non_finite = sum(1 for _, data in steps for v in data.values() if isinstance(v, float) and not math.isfinite(v))
    keys = {k for _, data in steps for k in data}
    return (
        f"{out}: {len(steps)} lines, steps {steps[0][0]}..{steps[-1][0]}, {len(keys)} keys, "
        f"{non_finite} non-finite values (written as null)"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--segment", type=int, default=None, help="which run of a restarted log (0, 1, ..., -1)")
    parser.add_argument("--last-step", type=int, default=None, help="drop steps after this one")
    parser.add_argument("--cut-at", type=int, default=None, help="lines this long were cut: drop their last item")
    args = parser.parse_args(argv)
    lines = args.log.read_text(encoding="utf-8", errors="replace").splitlines()
    segments = parse_log(lines, args.cut_at)
    if not segments:
        print(f"{args.log}: no step lines", file=sys.stderr)
        return 1
    if len(segments) > 1 and args.segment is None:
        starts = ", ".join(f"{k}: steps {s[0][0]}..{s[-1][0]} ({len(s)} lines)" for k, s in enumerate(segments))
        print(f"{args.log}: {len(segments)} runs ({starts}); pick one with --segment", file=sys.stderr)
        return 1
    steps = segments[args.segment or 0]
    if args.last_step is not None:
        steps = [s for s in steps if s[0] <= args.last_step]
    # one console line is one log call, and verl's FileLogger writes one JSON line per call: a step
    # logged twice (old verl logged validation and training of step 0 separately) stays two lines
    repeated = sorted({s for s, _ in steps if sum(1 for t, _ in steps if t == s) > 1})
    if repeated:
        print(f"{args.log}: steps logged in more than one call (kept as separate lines): {repeated[:10]}")
    if args.cut_at is not None:
        cut = [line for line in lines if len(line) >= args.cut_at - 1 and _STEP_LINE.search(line)]
        print(f"{args.log}: {len(cut)} step lines cut at {args.cut_at} characters (their last item dropped)")
    print(write_run(args.out, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
