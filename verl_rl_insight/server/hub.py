"""MetricHub: holds what trainers push and renders it for Prometheus.

Semantics a user can rely on:
- every stream (project, experiment_name, extra labels) exposes the latest value of each of
  its series, without a timestamp, so it stays queryable however long a step takes;
- a push is applied whole under one lock, so a scrape never sees a global-step gauge from one
  step beside values from another;
- batches that arrive faster than Prometheus scrapes (a replay after an outage, steps shorter
  than the scrape interval) are not folded away: each scraper gets the intermediate steps as
  timestamped samples (the trainer's own time where it fits), in order, before the live one.
"""

import collections
import math
import threading
import time

from ..metric_batch import GLOBAL_STEP_METRIC, LABEL_NAME_RE, METRIC_NAME_RE, decode_value

RESERVED_LABELS = {"project", "experiment_name", "job", "instance"}
MAX_LABEL_VALUE = 256
MAX_NAME = 200
MAX_BATCHES = 10_000
MAX_METRICS_PER_BATCH = 10_000
MAX_EXTRA_LABELS = 16


class PushError(ValueError):
    """Bad push input; ``status`` is the HTTP status to answer with."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


Snapshot = collections.namedtuple("Snapshot", "received trainer_time step metrics")


class Stream:
    __slots__ = ("labels", "latest", "step", "updated", "history", "history_keys")

    def __init__(self, labels, history_len):
        self.labels = labels
        self.latest = {}
        self.step = None
        self.updated = 0.0
        self.history = collections.deque(maxlen=history_len)
        self.history_keys = set()  # (step, trainer time) of what history holds: drops resent copies

    def add(self, snapshot):
        """Keep a snapshot; False when it is a copy of one already held."""
        key = (snapshot.step, snapshot.trainer_time)
        if key in self.history_keys:
            return False
        if len(self.history) == self.history.maxlen:
            old = self.history[0]
            self.history_keys.discard((old.step, old.trainer_time))
        self.history.append(snapshot)
        self.history_keys.add(key)
        return True


def _check_label_value(what, value):
    if not isinstance(value, str) or not value:
        raise PushError(f"{what} must be a non-empty string")
    if len(value) > MAX_LABEL_VALUE:
        raise PushError(f"{what} is longer than {MAX_LABEL_VALUE} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise PushError(f"{what} contains control characters")
    return value


def _validated_batch(i, batch, now):
    where = f"batches[{i}]"
    if not isinstance(batch, dict):
        raise PushError(f"{where} must be an object")
    labels = [("project", _check_label_value(f"{where}.project", batch.get("project"))),
              ("experiment_name", _check_label_value(f"{where}.experiment_name", batch.get("experiment_name")))]
    extra = batch.get("labels") or {}
    if not isinstance(extra, dict) or len(extra) > MAX_EXTRA_LABELS:
        raise PushError(f"{where}.labels must be an object with at most {MAX_EXTRA_LABELS} labels")
    for name, value in extra.items():
        if not isinstance(name, str) or not LABEL_NAME_RE.match(name) or name.startswith("__"):
            raise PushError(f"{where}.labels: invalid label name {name!r}")
        if name in RESERVED_LABELS:
            raise PushError(f"{where}.labels: label {name!r} is reserved")
        labels.append((name, _check_label_value(f"{where}.labels.{name}", value)))
    step = batch.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise PushError(f"{where}.step must be a non-negative integer")
    trainer_time = batch.get("time", now)
    if isinstance(trainer_time, bool) or not isinstance(trainer_time, (int, float)) or not math.isfinite(trainer_time):
        raise PushError(f"{where}.time must be a number (seconds since the epoch)")
    metrics = batch.get("metrics")
    if not isinstance(metrics, dict):
        raise PushError(f"{where}.metrics must be an object of name: value")
    if len(metrics) > MAX_METRICS_PER_BATCH:
        raise PushError(f"{where}.metrics has more than {MAX_METRICS_PER_BATCH} entries", 413)
    decoded = {}
    for name, value in metrics.items():
        if len(name) > MAX_NAME or not METRIC_NAME_RE.match(name):
            raise PushError(f"{where}.metrics: invalid metric name {name[:MAX_NAME]!r} "
                            f"(must match [a-zA-Z_:][a-zA-Z0-9_:]*, at most {MAX_NAME} characters)")
        try:
            decoded[name] = decode_value(value)
        except ValueError as exc:
            raise PushError(f"{where}.metrics.{name}: {exc}") from None
    if step is not None:
        decoded[GLOBAL_STEP_METRIC] = float(step)
    return tuple(sorted(labels)), step, float(trainer_time), decoded


def format_value(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def escape_label_value(value):
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricHub:
    def __init__(self, max_series=500_000, history_len=2_000, new_scraper_history_s=600.0, stream_ttl_s=86_400.0,
                 clock=time.time):
        self.max_series = max_series
        self.history_len = history_len
        self.new_scraper_history_s = new_scraper_history_s
        self.stream_ttl_s = stream_ttl_s
        self.clock = clock
        self.started_at = clock()
        self.stats = collections.Counter()
        self._lock = threading.Lock()
        self._streams = {}
        self._series = 0
        self._cursors = collections.OrderedDict()

    def push(self, payload):
        """Validate a whole push body and apply it atomically; returns the number of batches.

        Raises PushError (nothing applied) when any part of it is invalid.
        """
        if not isinstance(payload, dict) or not isinstance(payload.get("batches"), list):
            raise PushError('body must be a JSON object {"batches": [...]}')
        batches = payload["batches"]
        if len(batches) > MAX_BATCHES:
            raise PushError(f"at most {MAX_BATCHES} batches per push", 413)
        now = self.clock()
        validated = [_validated_batch(i, b, now) for i, b in enumerate(batches)]
        with self._lock:
            new_series = 0
            for labels, _, _, metrics in validated:
                stream = self._streams.get(labels)
                known = stream.latest if stream is not None else {}
                new_series += sum(1 for name in metrics if name not in known)
            if self._series + new_series > self.max_series:
                self.stats["rejected_series_limit"] += 1
                raise PushError(f"series limit reached ({self.max_series}); raise the hub's max_series", 422)
            for labels, step, trainer_time, metrics in validated:
                stream = self._streams.get(labels)
                if stream is None:
                    stream = self._streams[labels] = Stream(labels, self.history_len)
                if not stream.add(Snapshot(now, trainer_time, step, metrics)):
                    self.stats["duplicates"] += 1
                    continue
                self._series -= len(stream.latest)
                stream.latest.update(metrics)
                self._series += len(stream.latest)
                if step is not None:
                    stream.step = step
                stream.updated = now
            self.stats["batches"] += len(validated)
            self.stats["pushes"] += 1
        return len(validated)

    def render(self, scraper=None):
        """The Prometheus text exposition for one scrape by ``scraper`` (any hashable id)."""
        now = self.clock()
        families = collections.defaultdict(list)
        with self._lock:
            floor = self._cursors.pop(scraper, None) if scraper is not None else now
            if floor is None:
                floor = max(self.started_at, now - self.new_scraper_history_s)
            if scraper is not None:
                self._cursors[scraper] = now
                while len(self._cursors) > 64:
                    self._cursors.popitem(last=False)
            for key in [k for k, s in self._streams.items() if now - s.updated > self.stream_ttl_s]:
                self._series -= len(self._streams.pop(key).latest)
            for stream in self._streams.values():
                base = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in stream.labels)
                previous_ms = int(floor * 1000)   # in whole ms, as Prometheus stores them
                latest_ms = int(now * 1000) - 50  # before the scrape's own timestamp
                # Every snapshot received since this scraper's last visit, but the newest,
                # which the live values below stand for.
                for snap in [s for s in stream.history if s.received > floor][:-1]:
                    ts_ms = max(int(snap.trainer_time * 1000), previous_ms + 1)
                    if ts_ms > latest_ms:
                        ts_ms = previous_ms + 1
                    previous_ms = ts_ms
                    stamp = f" {ts_ms}"
                    for name, value in snap.metrics.items():
                        families[name].append(f"{name}{{{base}}} {format_value(value)}{stamp}")
                for name, value in stream.latest.items():
                    families[name].append(f"{name}{{{base}}} {format_value(value)}")
            series = self._series
            streams = len(self._streams)
        lines = []
        for name in sorted(families):
            lines.append(f"# TYPE {name} gauge")
            lines.extend(families[name])
        lines.append("# TYPE rl_insight_hub_streams gauge")
        lines.append(f"rl_insight_hub_streams {streams}")
        lines.append("# TYPE rl_insight_hub_series gauge")
        lines.append(f"rl_insight_hub_series {series}")
        lines.append("# TYPE rl_insight_hub_batches_total counter")
        lines.append(f"rl_insight_hub_batches_total {self.stats['batches']}")
        lines.append("# TYPE rl_insight_hub_rejected_pushes_total counter")
        lines.append(f"rl_insight_hub_rejected_pushes_total {self.stats['rejected']}")
        return "\n".join(lines) + "\n"

    def streams(self):
        """A summary per stream: labels, last step, series count, seconds since the last push."""
        now = self.clock()
        with self._lock:
            return [{"labels": dict(s.labels), "step": s.step, "series": len(s.latest),
                     "batches_kept": len(s.history), "idle_s": round(now - s.updated, 3)}
                    for s in self._streams.values()]
