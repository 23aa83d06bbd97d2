"""A batch of scalar samples on its way from the trainer to the server, (names: contract.naming.metric_name).

A batch is built on the training thread from a private copy of verl's dict and converted
lazily (``samples()``), on the sender thread: the training thread pays for a dict copy only.
"""

from __future__ import annotations

import json
import math
import operator
import re
from typing import Any

from verl_rl_insight.contract.naming import format_special, label_value_problem, metric_name

# a key its name tells back (``actor/pg_loss`` -> ``actor_pg_loss``: the first ``_`` after a known
# group was the slash); any other (two slashes, ``@``, ``-``, ``.``) travels beside its name
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]+(/[A-Za-z0-9_]+)?")


def to_number(value: object) -> float | None:
    """A float for ints, floats, bools, numpy scalars and one-element tensors; None otherwise."""
    if isinstance(value, float):
        return value
    if isinstance(value, (int, bool)):
        return float(value)
    item = getattr(value, "item", None)
    if item is not None:
        try:
            value = item()
        except Exception:  # a tensor or array with more than one element
            return None
        if isinstance(value, (int, float, bool)):
            return float(value)
    return None


def encode_value(value: float) -> float | str:
    """JSON-safe form of a float: NaN and infinities travel as the strings Prometheus prints."""
    return value if math.isfinite(value) else format_special(value)


def without_keys(encoded: bytes) -> bytes:
    """An encoded batch without its ``keys`` (what a server older than that field refuses)."""
    if b'"keys":' not in encoded:
        return encoded
    body = json.loads(encoded)
    body.pop("keys", None)
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


class MetricBatch:
    """One ``Tracking.log`` call (or one sampler tick) for one run."""

    __slots__ = ("project", "experiment_name", "step", "timestamp", "raw", "prefix", "labels", "_converted", "_keys")

    def __init__(
        self,
        project: str,
        experiment_name: str,
        step: int | None,
        timestamp: float,
        raw: dict[str, Any],
        prefix: str = "",
        labels: dict[str, str] | None = None,
    ) -> None:
        self.project = project
        self.experiment_name = experiment_name
        self.step = step
        self.timestamp = timestamp
        self.raw: dict[str, Any] | None = raw
        self.prefix = prefix
        self.labels = labels or {}
        self._converted: tuple[dict[str, float], int] | None = None
        self._keys: dict[str, str] = {}

    def samples(self) -> tuple[dict[str, float], int]:
        """(metrics, skipped): {prometheus name: float} and the count of non-numeric values left out."""
        if self._converted is None:
            metrics: dict[str, float] = {}
            skipped = 0
            for key, value in (self.raw or {}).items():
                number = to_number(value)
                if number is None:
                    skipped += 1
                else:
                    name = metric_name(self.prefix, key)
                    metrics[name] = number
                    text = str(key)
                    if self.prefix and not _PLAIN_KEY.fullmatch(text) and label_value_problem(text) is None:
                        self._keys[name] = text  # (a key the server would refuse is not said: the value goes)
            self._converted = (metrics, skipped)
            self.raw = None  # verl's values (tensors, arrays) are not kept past the conversion
        return self._converted

    def to_json(self) -> dict[str, Any]:
        """The wire form the server's ``POST /api/v1/push`` accepts (one entry of ``batches``)."""
        metrics, _ = self.samples()
        body: dict[str, Any] = {
            "project": self.project,
            "experiment_name": self.experiment_name,
            "time": self.timestamp,
            "metrics": {name: encode_value(v) for name, v in metrics.items()},
        }
        if self.step is not None:
            body["step"] = self.step
        if self.labels:
            body["labels"] = self.labels
        if self._keys:
            body["keys"] = self._keys
        return body


def encode(batch: MetricBatch) -> bytes:
    """One batch as the JSON bytes the server's push takes; raises TypeError / ValueError when it
    cannot be encoded (a step that is not an integer, a label that is not text)."""
    body = batch.to_json()
    if "step" in body:
        body["step"] = operator.index(body["step"])  # numpy integers are integers too
    body["time"] = float(body["time"])
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
