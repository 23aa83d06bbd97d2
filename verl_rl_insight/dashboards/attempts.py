"""A run's attempts on the trainer's panels: a restart from an earlier step under the same name is
a new attempt, a resume (steps N+1...) is not (contract/attempts.py); each attempt is a line of its
own, named ``<experiment> #<attempt>``, not one line that mixes them.

The hub adds ``rl_insight_run_attempt`` (the attempt's number) to each trainer step it applies,
with the same timestamp as the step's values (server/stores/run_attempts.py). A query joins on it
at each point in time: a point gets the attempt its run was in at that point's time, which is the
attempt that logged it (the older attempt's points have older times).
"""

from verl_rl_insight.contract.attempts import ATTEMPT_METRIC

# every PromQL query's run filter (panels.RUN: regex matchers, the variables are multi-select)
RUN_MATCHERS = 'project=~"$project",experiment_name=~"$experiment_name"'
# a run's attempt at each point in time as a label (1 as the value): the hub adds it to each trainer
# step (server/stores/run_attempts.py); a run imported from a file (rl-insight runs import) carries
# imported="imported" on that series only, which the legend shows. ``without``, not ``by (project,
# experiment_name, imported)``: Prometheus 2.42 (Debian 12's) answers count_values with a grouping
# label that a series lacks with that series' other grouping labels dropped, and a live run lacks
# ``imported`` (tests/e2e/test_demo.py's percent panels went empty)
ATTEMPT_LABEL = f'count_values without (instance, job) ("attempt", {ATTEMPT_METRIC}{{{RUN_MATCHERS}}})'
EXP = "{{experiment_name}} #{{attempt}} {{imported}}"  # the legend of a trainer series: its run and attempt
BY_ATTEMPT = "max by (project, experiment_name, attempt, imported)"  # one series per run and attempt


JOIN = f" * on (project, experiment_name) group_left (attempt, imported) {ATTEMPT_LABEL}"


def per_attempt(expr: str) -> str:
    """``expr`` (series of runs' trainer keys) with an ``attempt`` label: the attempt of its run at
    each point in time (a restart from an earlier step under the same name is a new one, a resume
    N+1... is not: contract/attempts.py), so two attempts are two lines, not one. ``*`` drops the
    metric name: a query that shows it copies it first to ``key`` (``with_key``)."""
    return f"({expr}){JOIN}"


def joined(expr: str) -> str | None:
    """The ``expr`` that ``per_attempt`` was given (None: not one of its queries)."""
    return expr[1 : -len(JOIN) - 1] if expr.startswith("(") and expr.endswith(")" + JOIN) else None


def with_key(expr: str) -> str:
    """``expr`` with its metric name copied to the label ``key`` (kept by ``per_attempt``)."""
    return f'label_replace({expr}, "key", "$1", "__name__", "(.+)")'
