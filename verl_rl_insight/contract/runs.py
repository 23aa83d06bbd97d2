"""A training run, as every layer names it: ``(project, experiment_name)``, the two labels each of its
series carries; the series that says it finished; and where a request names one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from verl_rl_insight.contract.errors import BadInput
from verl_rl_insight.contract.naming import label_value_problem

Run = tuple[str, str]  # (project, experiment_name)

# 0 from a run's first log, 1 after verl's Tracking.finish(): alerts and the explorer tell a
# finished run from a stalled one by it
RUN_FINISHED = "rl_insight_run_finished"


def trainer_run(labels: Sequence[tuple[str, str]]) -> Run | None:
    """The run of a trainer's own stream (its labels, sorted pairs: experiment_name and project,
    nothing else); None for any other stream (an engine's, a sampler's, a derived one)."""
    if len(labels) != 2 or labels[0][0] != "experiment_name" or labels[1][0] != "project":
        return None
    return labels[1][1], labels[0][1]


def run_in_query(query: Mapping[str, Sequence[str]]) -> Run:
    """The run ``?project=P&experiment_name=E`` names (the last of each, both label values); 400
    naming the field when one is missing or not a label value."""
    found = []
    for name in ("project", "experiment_name"):
        values = query.get(name)
        value = values[-1] if values else None
        if value is None or value == "":
            raise BadInput(f"{name}: missing; give ?project=P&experiment_name=E")
        problem = label_value_problem(value)
        if problem:
            raise BadInput(f"{name}: {problem}")
        found.append(value)
    return found[0], found[1]
