"""A finished run read from a file (``diagnose --file``): any format ``run_formats.py`` reads, as
the detectors' history, ``{series name: [(step, value)]}``."""

from __future__ import annotations

from pathlib import Path

from verl_rl_insight.commands.run_formats import RunFile, RunFileError, read_file
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, metric_name
from verl_rl_insight.server.health.detectors import PREFIX

History = dict[str, list[tuple[int, float]]]

__all__ = ["History", "RunFileError", "history_of", "read_run"]


def history_of(run: RunFile) -> History:
    """Each series by step (a runs export's columns are series names already, without the prefix)."""
    history: History = {}
    for step, values in run.steps.items():
        for key, value in values.items():
            name = PREFIX + key if run.format == "runs-csv" else metric_name(PREFIX, key)
            series = history.setdefault(name, [])
            if not series or series[-1][0] != step:  # two keys of one series name: the first
                series.append((step, value))
    history.pop(GLOBAL_STEP_METRIC, None)
    return history


def read_run(path: Path) -> History:
    """{series name: [(step, value)]} of the run in ``path``."""
    return history_of(read_file(path))
