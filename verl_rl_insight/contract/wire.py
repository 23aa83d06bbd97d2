"""What ``POST /api/v1/push`` accepts, checked field by field before anything is applied.

A bad field is a PushError whose message names it (``batches[3].metrics.loss: ...``) and whose
``status`` is the HTTP status to answer with. Every rule here is mirrored in the OpenAPI
document (server/openapi.py), which the fuzz test generates requests from.
"""

import math
import sys

from verl_rl_insight.contract.errors import BadInput, TooLarge
from verl_rl_insight.contract.naming import (
    GLOBAL_STEP_METRIC,
    is_label_name,
    is_metric_name,
    label_value_problem,
)

HUB_HEADER = "X-RL-Insight-Hub"   # the hub instance a sender expects; a restarted hub answers 409
RESERVED_LABELS = frozenset({"project", "experiment_name", "job", "instance"})
RESERVED_PREFIX = "rl_insight_hub_"   # the hub's own series
MAX_NAME = 200
MAX_LABEL_VALUE = 256
MAX_BATCHES = 10_000
MAX_METRICS_PER_BATCH = 10_000
MAX_EXTRA_LABELS = 16
MAX_STEP = 2**63 - 1
MAX_TIME = 1e11                       # seconds since the epoch (year 5138): timestamps fit in int64 ms
BATCH_FIELDS = frozenset({"project", "experiment_name", "step", "time", "metrics", "labels"})
SPECIAL_VALUES = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


class PushError(BadInput):
    """Bad push input; the message names the field."""


class PushTooLarge(PushError, TooLarge):
    """A push over a count limit."""


class Batch:
    """One validated batch: the stream's labels (sorted pairs), step, trainer time, names, values."""

    __slots__ = ("labels", "step", "time", "timed", "names", "values")

    def __init__(self, labels, step, time_s, timed, names, values):
        self.labels = labels
        self.step = step
        self.time = time_s
        self.timed = timed      # the trainer gave its own time (a resent copy can be recognised)
        self.names = names
        self.values = values


def _show(text, limit=60):
    """A bounded, printable rendering of what the client sent, for error messages."""
    return repr(text[:limit] if isinstance(text, str) else text)[: limit + 2]


def _label_value(where, value):
    problem = label_value_problem(value, MAX_LABEL_VALUE)
    if problem:
        raise PushError(f"{where} {problem}")
    return value


def _number(where, value):
    if isinstance(value, str):
        if value in SPECIAL_VALUES:
            return SPECIAL_VALUES[value]
        raise PushError(f"{where} must be a number or one of NaN, +Inf, -Inf, got {_show(value, 40)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PushError(f"{where} must be a number or one of NaN, +Inf, -Inf, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise PushError(f"{where} is too large for a 64-bit float") from None


def validate_batch(i, batch, now):
    where = f"batches[{i}]"
    if not isinstance(batch, dict):
        raise PushError(f"{where} must be an object")
    unknown = sorted(set(batch) - BATCH_FIELDS, key=str)
    if unknown:
        raise PushError(f"{where}: unknown field {_show(unknown[0], 40)} (known: {', '.join(sorted(BATCH_FIELDS))})")
    labels = [("project", _label_value(f"{where}.project", batch.get("project"))),
              ("experiment_name", _label_value(f"{where}.experiment_name", batch.get("experiment_name")))]
    extra = batch.get("labels")
    if extra is not None:
        if not isinstance(extra, dict) or len(extra) > MAX_EXTRA_LABELS:
            raise PushError(f"{where}.labels must be an object of at most {MAX_EXTRA_LABELS} labels")
        for name, value in extra.items():
            if not is_label_name(name):
                raise PushError(f"{where}.labels: invalid label name {_show(name, 40)} (must match "
                                "[a-zA-Z_][a-zA-Z0-9_]*, not starting with __)")
            if name in RESERVED_LABELS:
                raise PushError(f"{where}.labels.{name}: label {name!r} is reserved")
            labels.append((name, _label_value(f"{where}.labels.{name}", value)))
    step = batch.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP):
        raise PushError(f"{where}.step must be an integer from 0 to 2^63-1")
    timed = "time" in batch
    trainer_time = batch.get("time", now)
    if (isinstance(trainer_time, bool) or not isinstance(trainer_time, (int, float))
            or not 0 <= trainer_time <= MAX_TIME):
        raise PushError(f"{where}.time must be a number of seconds since the epoch (0 to 1e11)")
    metrics = batch.get("metrics")
    if not isinstance(metrics, dict):
        raise PushError(f"{where}.metrics must be an object of name: value")
    if len(metrics) > MAX_METRICS_PER_BATCH:
        raise PushTooLarge(f"{where}.metrics has more than {MAX_METRICS_PER_BATCH} entries")
    names, values = [], []
    for name, value in metrics.items():
        if not is_metric_name(name) or len(name) > MAX_NAME:
            raise PushError(f"{where}.metrics: invalid metric name {_show(name, MAX_NAME)} "
                            f"(must match [a-zA-Z_:][a-zA-Z0-9_:]*, at most {MAX_NAME} characters)")
        if name.startswith(RESERVED_PREFIX):
            raise PushError(f"{where}.metrics.{name}: names starting with {RESERVED_PREFIX} are the hub's own")
        names.append(sys.intern(name))
        values.append(_number(f"{where}.metrics.{name}", value))
    if step is not None:
        names.append(GLOBAL_STEP_METRIC)
        values.append(float(step))
    return Batch(tuple(sorted(labels)), step, float(trainer_time), timed, names, values)


def validate_push(payload, now):
    """The batches of a push body, every field checked; raises PushError naming the first bad one."""
    if not isinstance(payload, dict) or not isinstance(payload.get("batches"), list):
        raise PushError('body must be a JSON object {"batches": [...]}')
    unknown = sorted(set(payload) - {"batches"}, key=str)
    if unknown:
        raise PushError(f"unknown field {_show(unknown[0], 40)} (the body is {{\"batches\": [...]}})")
    batches = payload["batches"]
    if len(batches) > MAX_BATCHES:
        raise PushTooLarge(f"batches: at most {MAX_BATCHES} per push")
    return [validate_batch(i, b, now) for i, b in enumerate(batches)]
