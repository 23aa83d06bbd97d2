"""A finished run written into the server's own Prometheus with its own times: as TSDB blocks made
by ``promtool tsdb create-blocks-from openmetrics`` and moved into Prometheus' data folder, which
Prometheus loads on its own (it looks for new blocks about once a minute) and queries like any other.

Why blocks and not the hub: the hub exposes a step with the step's own time only while it is newer
than what Prometheus holds of the stream (an older one is stamped just after it), and the
out-of-order window reaches back ``history_s`` only; a finished run's steps are hours or months old.
Blocks keep each sample's time, and keep it once: an import is written once (``stores/imports.py``
refuses a second of the same name). A ``remote_write`` store gets no import (Prometheus forwards what
it scrapes, not blocks it loads): import there with the store's own tools.

A run older than Prometheus' retention would be deleted at the next compaction: its times are moved
forward by whole days (the answer and the run's record say by how many), which keeps each step's
time of day and the gaps between steps.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.contract.errors import Unavailable
from verl_rl_insight.contract.naming import (
    GLOBAL_STEP_METRIC,
    METRIC_PREFIX,
    STEP_TIME_METRIC,
    escape_label_value,
    format_special,
    metric_name,
)
from verl_rl_insight.contract.run_import import ImportBody
from verl_rl_insight.contract.runs import RUN_FINISHED

DAY_S = 86400.0
RETENTION_MARGIN_S = 2 * DAY_S  # a shifted run starts this far inside the retention
PROMTOOL_TIMEOUT_S = 300.0
IMPORTED_LABEL = "imported"  # on the run's attempt series only: the dashboards' legend says "imported"
OWN_SERIES = frozenset((GLOBAL_STEP_METRIC, STEP_TIME_METRIC, RUN_FINISHED, ATTEMPT_METRIC))


def shift_days(first_time: float, retention_s: float, now: float) -> int:
    """Whole days to move a run forward so that Prometheus keeps it (0: it is inside the retention)."""
    oldest = now - retention_s + RETENTION_MARGIN_S
    return 0 if first_time >= oldest else math.ceil((oldest - first_time) / DAY_S)


def series_names(keys: tuple[str, ...]) -> list[str | None]:
    """Each key's series (None: a second key of the same series, or one the import writes itself)."""
    seen: set[str] = set(OWN_SERIES)
    names: list[str | None] = []
    for key in keys:
        name = metric_name(METRIC_PREFIX, key)
        names.append(None if name in seen else name)
        seen.add(name)
    return names


def _value(x: float) -> str:
    return repr(x) if math.isfinite(x) else format_special(x)


def openmetrics(body: ImportBody, shift_s: float) -> Iterator[str]:
    """The run as OpenMetrics text, a family at a time, each series' samples in time order."""
    run = f'project="{escape_label_value(body.project)}",experiment_name="{escape_label_value(body.experiment)}"'
    times = [f"{s.time + shift_s:.3f}" for s in body.steps]
    own = (
        (GLOBAL_STEP_METRIC, run, [(t, str(s.step)) for t, s in zip(times, body.steps)]),
        (STEP_TIME_METRIC, run, [(t, t) for t in times]),  # the step's time is its value too
        (ATTEMPT_METRIC, f'{run},{IMPORTED_LABEL}="{IMPORTED_LABEL}"', [(t, "1") for t in times]),
        (RUN_FINISHED, run, [(times[-1], "1")]),
    )
    for family, labels, samples in own:
        yield f"# TYPE {family} gauge\n"
        yield "".join(f"{family}{{{labels}}} {v} {t}\n" for t, v in samples)
    for column, name in enumerate(series_names(body.keys)):
        if name is None:
            continue
        lines = []
        for t, step in zip(times, body.steps):
            x = step.values[column]
            if x is not None:
                lines.append(f"{name}{{{run}}} {_value(x)} {t}\n")
        if lines:
            yield f"# TYPE {name} gauge\n"
            yield "".join(lines)
    yield "# EOF\n"


def promtool_beside(prometheus_binary: str) -> str | None:
    """promtool from Prometheus' own release (beside its binary), else the one on PATH."""
    own = Path(prometheus_binary).parent / "promtool"
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which("promtool")


def write_blocks(promtool: str, tsdb: Path, text: Iterator[str]) -> int:
    """The blocks of ``text`` made beside ``tsdb`` (same file system: a rename moves each whole)
    and moved into it; how many. A block is moved only once promtool has made every one."""
    scratch = Path(tempfile.mkdtemp(prefix=".import-", dir=tsdb.parent))
    try:
        source = scratch / "run.om"
        with source.open("w", encoding="utf-8") as f:
            f.writelines(text)
        out = scratch / "blocks"
        out.mkdir()
        try:
            done = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(out)],
                capture_output=True,
                text=True,
                timeout=PROMTOOL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"promtool did not make the blocks: {exc}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise Unavailable(f"promtool did not make the blocks: {said[-1][:300] if said else done.returncode}")
        blocks = [p for p in out.iterdir() if p.is_dir() and (p / "meta.json").is_file()]
        tsdb.mkdir(parents=True, exist_ok=True)
        for block in blocks:
            os.replace(block, tsdb / block.name)
        return len(blocks)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
