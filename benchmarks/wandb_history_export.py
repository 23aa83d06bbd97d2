"""Write a wandb run file's history (``wandb/run-*/run-<id>.wandb``) as wandb's API hands it out:
``run.scan_history()`` rows, one JSON object a line, and ``run.history(pandas=True).to_csv()``, a CSV
with pandas' index as its first, unnamed column and one column per key (empty where a row did not
log it). Each row is one ``history`` record with every item as wandb stored it: ``_step``,
``_runtime``, ``_timestamp``, the run's keys, and values that are not numbers (the ``val/generations``
table wandb keeps as a ``table-file`` object) as they are. The data for ``rl-insight runs import``'s
tests of a wandb export; the real run's own records, nothing added.

    python3 benchmarks/wandb_history_export.py run-ID.wandb OUT.jsonl OUT.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from real_runs_from_wandb import history_rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_file", type=Path)
    parser.add_argument("jsonl", type=Path)
    parser.add_argument("csv", type=Path)
    args = parser.parse_args(argv)
    rows, _ = history_rows(args.run_file.read_bytes())
    args.jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    columns = sorted({k for row in rows for k in row})
    with args.csv.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["", *columns])
        for i, row in enumerate(rows):
            cells = [row.get(c) for c in columns]
            out.writerow([i, *("" if v is None else json.dumps(v) if isinstance(v, dict | list) else v for v in cells)])
    print(f"{args.jsonl}, {args.csv}: {len(rows)} rows, {len(columns)} columns")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
