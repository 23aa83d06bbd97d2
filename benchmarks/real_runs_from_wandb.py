"""Convert a wandb run file (``wandb/run-*/run-<id>.wandb``) of a verl run into verl's ``file`` logger format.

verl's ``Tracking`` logs each step with ``wandb.log(data, step=step)``; wandb keeps it in the run file as a
``history`` record whose items are the same keys with their values as JSON (full precision), plus wandb's own
``_step``, ``_runtime`` and ``_timestamp``. This script reads those records and writes, for each one,
``{"step": _step, "data": {key: value}}`` as verl's ``FileLogger`` writes it (orjson; NaN/Infinity become
``null``). Left out: wandb's own ``_``-keys, and values that are not numbers (the ``val/generations`` table
that verl's generation logger logs to wandb at the same step, flattened by wandb into ``.../_type``,
``.../path`` ...: verl's metrics dict, which the file logger writes, holds numbers only). Nothing is added
or changed. One difference remains: wandb stores a whole float as an integer (-1.0 as -1).

The run file is the LevelDB log format that wandb uses: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then 32 KiB blocks of chunks (crc32, length, type: full/first/middle/last), each record a protobuf
``wandb.proto.wandb_internal_pb2.Record``. A file cut short (a run still going when it was committed) ends
with a partial record, which is reported and left out.

    python3 benchmarks/real_runs_from_wandb.py run-ID.wandb OUT.jsonl
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib
from pathlib import Path

from google.protobuf.message import Message
from real_runs_convert import write_run
from wandb.proto import wandb_internal_pb2

# the generated protobuf module has no type stubs; Record is wandb's top-level record message
RECORD: type[Message] = wandb_internal_pb2.Record  # type: ignore[attr-defined]

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


class BadRunFile(ValueError):
    """Not a wandb run file, or a chunk whose checksum does not match."""


def records(raw: bytes) -> tuple[list[bytes], int]:
    """The complete records of a run file, and how many trailing bytes were a cut-off record."""
    if raw[:4] != b":W&B" or struct.unpack("<H", raw[4:6])[0] != 0xBEE1:
        raise BadRunFile("not a wandb run file (no :W&B header)")
    done: list[bytes] = []
    pending = bytearray()
    pos = HEADER
    while pos + HEADER <= len(raw):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:
            pos += left_in_block
            continue
        checksum, length, kind = struct.unpack("<IHB", raw[pos : pos + HEADER])
        if checksum == 0 and length == 0 and kind == 0:
            break  # zero padding after the last record
        data = raw[pos + HEADER : pos + HEADER + length]
        if len(data) < length:
            return done, len(pending) + len(data)
        if zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise BadRunFile(f"checksum mismatch at byte {pos}")
        pos += HEADER + length
        if kind == FULL:
            done.append(bytes(data))
        elif kind == FIRST:
            pending = bytearray(data)
        elif kind == MIDDLE:
            pending += data
        elif kind == LAST:
            pending += data
            done.append(bytes(pending))
            pending = bytearray()
        else:
            raise BadRunFile(f"unknown chunk type {kind} at byte {pos}")
    return done, len(pending)


def history_rows(raw: bytes) -> tuple[list[dict[str, JsonValue]], int]:
    """Every history record as wandb stored it, an item a key (``_step``, ``_runtime``, ``_timestamp``
    and the run's keys, a nested key joined by ``/``); and the cut-off byte count."""
    rows: list[dict[str, JsonValue]] = []
    chunks, cut = records(raw)
    for chunk in chunks:
        record = RECORD()
        record.ParseFromString(chunk)
        if record.WhichOneof("record_type") != "history":
            continue
        entry = getattr(record, "history")  # noqa: B009 (a field of an unstubbed message)
        row: dict[str, JsonValue] = {}
        for item in entry.item:
            row[item.key if item.key else "/".join(item.nested_key)] = json.loads(item.value_json)
        if "_step" not in row and entry.HasField("step"):
            row["_step"] = entry.step.num
        rows.append(row)
    return rows, cut


def history(raw: bytes) -> tuple[list[tuple[int, dict[str, JsonValue]]], int]:
    """``(step, data)`` of every history record, wandb's ``_`` keys left out; and the cut-off byte count."""
    rows, cut = history_rows(raw)
    steps: list[tuple[int, dict[str, JsonValue]]] = []
    for row in rows:
        step = row.get("_step")
        if not isinstance(step, int):
            raise BadRunFile("history record without a step")
        data = {
            k: v
            for k, v in row.items()
            if not k.startswith("_") and isinstance(v, int | float) and not isinstance(v, bool)
        }
        steps.append((step, data))
    return steps, cut


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_file", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    rows, cut = history(args.run_file.read_bytes())
    if not rows:
        print(f"{args.run_file}: no history records", file=sys.stderr)
        return 1
    print(f"{write_run(args.out, rows)}, {cut} bytes of a cut-off last record left out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
