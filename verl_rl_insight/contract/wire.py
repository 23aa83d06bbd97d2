"""The wire schema: every body a client sends the server, and its limits, defined once.

Each body is a msgspec Struct; decoding bytes into it checks every type, bound and unknown field
in one pass in C, and the OpenAPI document (``server/api/openapi.py``) is generated from these
same Structs. Two rules are checked beside the decode, from the constants below:

- metric names against ``METRIC_NAME_PATTERN``, with a bounded cache of names already accepted:
  a regular expression per key would cost more than the whole decode, and a run pushes the same
  few hundred names every step;
- the names the server makes itself (``RESERVED_PREFIXES``, ``RESERVED_NAMES``): such a key is
  dropped from its batch, the rest of the batch applied, and the push's answer names it (one key
  never costs a step); labels the server sets (``RESERVED_LABELS``) are refused, naming the field;
- the global-step series ``rl_insight_monitor_training_global_step`` (what verl's own
  ``training/global_step`` becomes) is the step: the batch's ``step`` where that is absent; where
  both are given and disagree, the key wins and the answer counts it.

A bad body is a PushError (or PushTooLarge) whose message names the field:
``batches[3].metrics.loss: ...``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from verl_rl_insight.contract.naming import (
    GLOBAL_STEP_METRIC,
    LABEL_NAME_PATTERN,
    LABEL_VALUE_PATTERN,
    METRIC_NAME_PATTERN,
    SPECIAL_VALUES,
    STEP_TIME_METRIC,
)
from verl_rl_insight.contract.profile_summary import MAX_SUMMARY_RANKS as MAX_SUMMARY_RANKS
from verl_rl_insight.contract.wire_errors import PushError as PushError
from verl_rl_insight.contract.wire_errors import PushTooLarge as PushTooLarge
from verl_rl_insight.contract.wire_errors import _explain, _explain_malformed, _show
from verl_rl_insight.contract.wire_errors import field_problem as field_problem
from verl_rl_insight.contract.wire_limits import (
    ADDRESS_PATTERN as ADDRESS_PATTERN,
)
from verl_rl_insight.contract.wire_limits import (
    ALERT_NAME_PATTERN as ALERT_NAME_PATTERN,
)
from verl_rl_insight.contract.wire_limits import (
    HOST_PATTERN as HOST_PATTERN,
)
from verl_rl_insight.contract.wire_limits import (
    HUB_HEADER as HUB_HEADER,
)
from verl_rl_insight.contract.wire_limits import (
    JOB_PATTERN as JOB_PATTERN,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_BATCHES as MAX_BATCHES,
)
from verl_rl_insight.contract.wire_limits import MAX_DROPPED_NAME, too_long_why
from verl_rl_insight.contract.wire_limits import (
    MAX_DROPPED_NAMED as MAX_DROPPED_NAMED,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_EXTRA_LABELS as MAX_EXTRA_LABELS,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_FUTURE_S as MAX_FUTURE_S,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_LABEL_VALUE as MAX_LABEL_VALUE,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_METRICS_PER_BATCH as MAX_METRICS_PER_BATCH,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_NAME as MAX_NAME,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_SILENCE_S as MAX_SILENCE_S,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_STEP as MAX_STEP,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_TARGET_LABELS as MAX_TARGET_LABELS,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_TIME as MAX_TIME,
)
from verl_rl_insight.contract.wire_limits import (
    MAX_TTL_S as MAX_TTL_S,
)
from verl_rl_insight.contract.wire_limits import (
    MIN_SILENCE_S as MIN_SILENCE_S,
)
from verl_rl_insight.contract.wire_limits import (
    PORT_PATTERN as PORT_PATTERN,
)
from verl_rl_insight.contract.wire_limits import (
    RESERVED_LABELS as RESERVED_LABELS,
)
from verl_rl_insight.contract.wire_limits import (
    RESERVED_NAMES as RESERVED_NAMES,
)
from verl_rl_insight.contract.wire_limits import (
    RESERVED_PREFIX as RESERVED_PREFIX,
)
from verl_rl_insight.contract.wire_limits import (
    RESERVED_PREFIXES as RESERVED_PREFIXES,
)
from verl_rl_insight.contract.wire_profiles import (
    MAX_PROFILE_STEPS as MAX_PROFILE_STEPS,
)
from verl_rl_insight.contract.wire_profiles import (
    MAX_RANKS as MAX_RANKS,
)
from verl_rl_insight.contract.wire_profiles import (  # the profile requests' bodies, importable from here
    PROFILE_ROLES as PROFILE_ROLES,
)
from verl_rl_insight.contract.wire_profiles import (
    PROFILE_STATES as PROFILE_STATES,
)
from verl_rl_insight.contract.wire_profiles import (
    ProfileBody as ProfileBody,
)
from verl_rl_insight.contract.wire_profiles import (
    ProfileReportBody as ProfileReportBody,
)
from verl_rl_insight.contract.wire_profiles import (
    ProfileUpdate as ProfileUpdate,
)

LabelValue = Annotated[str, Meta(min_length=1, max_length=MAX_LABEL_VALUE, pattern=LABEL_VALUE_PATTERN)]
LabelName = Annotated[str, Meta(max_length=MAX_NAME, pattern=LABEL_NAME_PATTERN)]
SampleValue = float | Literal["NaN", "+Inf", "-Inf"]
Metrics = Annotated[
    dict[str, SampleValue],
    Meta(
        max_length=MAX_METRICS_PER_BATCH,
        description=f"metric name: value; a name the server makes itself (one starting with "
        f"{' or '.join(RESERVED_PREFIXES)}, one of the timeline's figures, or {STEP_TIME_METRIC}) is dropped, "
        "the rest applied, and the answer "
        f"names it; {GLOBAL_STEP_METRIC} (verl's training/global_step) is the step: it wins over `step`",
        extra_json_schema={"propertyNames": {"pattern": METRIC_NAME_PATTERN, "maxLength": MAX_NAME}},
    ),
]


Keys = Annotated[dict[str, LabelValue], Meta(max_length=MAX_METRICS_PER_BATCH)]  # name: the key as logged


class BatchBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One trainer log call: a stream's samples at one step."""

    project: LabelValue
    experiment_name: LabelValue
    metrics: Metrics
    step: Annotated[int, Meta(ge=0, le=MAX_STEP)] | None = None
    time: (
        Annotated[
            float,
            Meta(
                ge=0,
                le=MAX_TIME,
                description="the trainer's time, seconds since the epoch; at most max_future_s (300) ahead of "
                "the server's clock",
            ),
        ]
        | None
    ) = None
    labels: (
        Annotated[
            dict[LabelName, LabelValue],
            Meta(
                max_length=MAX_EXTRA_LABELS,
                description="extra labels; project, experiment_name, job and instance are reserved",
            ),
        ]
        | None
    ) = None
    keys: Keys | None = None


class PushBody(Struct, forbid_unknown_fields=True):
    """``POST /api/v1/push``."""

    batches: Annotated[list[BatchBody], Meta(max_length=MAX_BATCHES)]


class TargetBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/targets``: a scrape target, or the renewal of its TTL."""

    address: Annotated[str, Meta(pattern=ADDRESS_PATTERN, description="host:port, port 1 to 65535")]
    job: Annotated[str, Meta(pattern=JOB_PATTERN)]
    labels: Annotated[dict[LabelName, LabelValue], Meta(max_length=MAX_TARGET_LABELS)] = {}
    ttl_s: Annotated[float, Meta(ge=0, le=MAX_TTL_S, description="0: no expiry")] = 90.0


class SilenceBody(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST /api/v1/silences``: silence a run's alerts for a while."""

    project: Annotated[str, Meta(min_length=1, max_length=256, pattern=LABEL_VALUE_PATTERN)]
    experiment_name: Annotated[str, Meta(min_length=1, max_length=256, pattern=LABEL_VALUE_PATTERN)]
    duration_s: Annotated[float, Meta(ge=MIN_SILENCE_S, le=MAX_SILENCE_S)]
    alertname: (
        Annotated[
            str, Meta(pattern=ALERT_NAME_PATTERN, description="only this alert (default: every alert of the run)")
        ]
        | None
    ) = None
    comment: Annotated[str, Meta(min_length=1, max_length=500, pattern=LABEL_VALUE_PATTERN)] | None = None
    created_by: Annotated[str, Meta(min_length=1, max_length=100, pattern=LABEL_VALUE_PATTERN)] | None = None


class PushAnswer(Struct, omit_defaults=True):
    """The 200 answer to ``POST /api/v1/push``."""

    accepted: Annotated[int, Meta(description="batches applied")]
    duplicates: Annotated[int, Meta(description="batches the hub already held (a resent copy), skipped")]
    hub: Annotated[str, Meta(description="this hub instance: send it back in X-RL-Insight-Hub")]
    dropped_keys: (
        Annotated[
            dict[str, str],
            Meta(
                description="metric name: why it was dropped from its batches (the rest of each batch was applied); "
                f"at most {MAX_DROPPED_NAMED} names"
            ),
        ]
        | None
    ) = None
    step_disagreements: (
        Annotated[
            int,
            Meta(description=f"batches whose {GLOBAL_STEP_METRIC} (the step the trainer logged) differs from `step`"),
        ]
        | None
    ) = None


class ErrorBody(Struct):
    """Every 4xx and 5xx answer: what is wrong, naming the field."""

    error: str


@dataclasses.dataclass(slots=True)
class Batch:
    """One validated batch: the stream's labels (sorted pairs), step, trainer time, its samples."""

    labels: tuple[tuple[str, str], ...]
    step: int | None
    time: float
    timed: bool  # the trainer gave its own time (a resent copy can be recognised)
    metrics: dict[str, float]  # name: value, the global step included
    # what was left out of it, {name: why}, and whether its step key disagreed with its step field
    dropped: dict[str, str] | None = None
    step_disagrees: bool = False
    keys: dict[str, str] | None = None  # name: the key the trainer logged (only names that do not tell it)
    names: tuple[str, ...] = dataclasses.field(init=False)
    values: tuple[float, ...] = dataclasses.field(init=False)  # the decoded float objects: no copy, no boxing

    def __post_init__(self) -> None:
        self.names = tuple(self.metrics)
        self.values = tuple(self.metrics.values())

    def set_value(self, name: str, value: float) -> None:
        """``metrics[name] = value``, with ``names`` and ``values`` kept in step (extended by one for a
        new name, not made again from the dict: the hub stamps every step's attempt under its lock)."""
        known = name in self.metrics
        self.metrics[name] = value
        if known:
            self.values = tuple(self.metrics.values())
        else:
            self.names += (name,)
            self.values += (value,)


_METRIC_NAME = re.compile(METRIC_NAME_PATTERN)
_known_names: set[str] = set()
# A run logs a few hundred names; at most 200-character names this bounds the cache near 16 MiB.
_MAX_KNOWN_NAMES = 65_536
_push_decoder = msgspec.json.Decoder(PushBody)


def is_reserved(name: str) -> bool:
    """A name the server makes itself (the hub's, the detectors', the timeline's, the step time, the attempt)."""
    return name.startswith(RESERVED_PREFIXES) or name in RESERVED_NAMES


RESERVED_WHY = (
    "the server's own name (rl_insight_hub_*, rl_insight_health_*, the timeline's figures, the step time, the attempt)"
)
NOT_A_STEP_WHY = f"{GLOBAL_STEP_METRIC} is the step: it must be a whole number from 0 to {MAX_STEP}"


def check_metric_names(where: str, metrics: dict[str, Any], own: bool = False) -> dict[str, str]:
    """Every key a metric name (else PushError); returns {key: why} for the keys left out of the
    batch, the rest applied: a name the server keeps for itself (none when ``own``: the server's own
    series) and one over ``MAX_NAME`` characters (no key costs a step). Names seen cost a look-up."""
    if _known_names.issuperset(metrics):
        return {}
    left_out: dict[str, str] = {}
    for name in metrics:
        if name in _known_names:
            continue
        if _METRIC_NAME.search(name) is None:
            raise PushError(
                f"{where}.metrics: invalid metric name {_show(name, MAX_NAME)} "
                f"(must match [a-zA-Z_:][a-zA-Z0-9_:]*, at most {MAX_NAME} characters)"
            )
        if len(name) > MAX_NAME:
            left_out[name[:MAX_DROPPED_NAME]] = too_long_why(name)  # never cached either
            continue
        if is_reserved(name):
            if not own:
                left_out[name] = RESERVED_WHY  # never cached: it is looked at again each time
            continue
        if len(_known_names) < _MAX_KNOWN_NAMES:
            _known_names.add(sys.intern(name))
    return left_out


def _step_of(given: float | str) -> int | None:
    """The step a global-step key gives: a whole number in range, else None."""
    if isinstance(given, float) and given.is_integer() and 0 <= given < 2**63:
        return int(given)
    return None


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The values as floats: NaN, +Inf and -Inf travel as strings (JSON has no such numbers)."""
    try:
        sum(metrics.values())  # a loop in C over floats; a string in it raises
    except TypeError:
        return {name: SPECIAL_VALUES[v] if isinstance(v, str) else v for name, v in metrics.items()}
    return metrics


def _batch(i: int, body: BatchBody, now: float, max_future_s: float = MAX_FUTURE_S, own: bool = False) -> Batch:
    where = f"batches[{i}]"
    if body.time is not None and body.time > now + max_future_s:
        raise PushError(
            f"{where}.time: {body.time:.3f} is {body.time - now:.0f} s ahead of the server's clock, beyond the "
            f"{max_future_s:g} s allowed (max_future_s); check the trainer's clock (NTP)"
        )
    step, dropped, disagrees = body.step, None, False
    given = body.metrics.pop(GLOBAL_STEP_METRIC, None)  # verl's training/global_step: the step
    if given is not None:
        step_key = _step_of(given)
        if step_key is None:
            dropped = {GLOBAL_STEP_METRIC: NOT_A_STEP_WHY}
        else:
            disagrees = step is not None and step != step_key
            step = step_key
    left_out = check_metric_names(where, body.metrics, own)
    if left_out:
        dropped = dropped or {}
        for name in [n for n in body.metrics if n in left_out or len(n) > MAX_NAME]:
            del body.metrics[name]
        dropped.update(left_out)
    labels = [("experiment_name", body.experiment_name), ("project", body.project)]
    if body.labels:
        for name in body.labels:
            if name in RESERVED_LABELS:
                raise PushError(f"{where}.labels.{name}: label {name!r} is reserved")
        labels.extend(body.labels.items())
        labels.sort()
    metrics = _numbers(body.metrics)
    stamp = body.time if body.time is not None else now
    if step is not None:
        metrics[GLOBAL_STEP_METRIC] = float(step)
        metrics[STEP_TIME_METRIC] = float(stamp)
    keys = {n: k for n, k in body.keys.items() if n in metrics} if body.keys else None
    return Batch(tuple(labels), step, stamp, body.time is not None, metrics, dropped, disagrees, keys or None)


def decode_push(body: bytes, now: float, max_future_s: float = MAX_FUTURE_S, own: bool = False) -> list[Batch]:
    """The batches of a push body, every field checked; raises PushError naming the first bad one.
    A key the server keeps for itself is left out of its batch (``Batch.dropped``), unless ``own``
    (the server's own series: the detectors', the timeline's)."""
    try:
        push = _push_decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise _explain(exc, body, BatchBody.__struct_fields__, PushBody.__struct_fields__) from None
    except msgspec.DecodeError as exc:
        raise PushError(_explain_malformed(exc, body)) from None
    return [_batch(i, b, now, max_future_s, own) for i, b in enumerate(push.batches)]


def validate_push(payload: object, now: float, max_future_s: float = MAX_FUTURE_S, own: bool = False) -> list[Batch]:
    """``decode_push`` for a body already parsed (the Python API and the tests)."""
    try:
        body = json.dumps(payload, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise PushError(f"body is not JSON-serialisable: {exc}") from None
    return decode_push(body, now, max_future_s, own)
