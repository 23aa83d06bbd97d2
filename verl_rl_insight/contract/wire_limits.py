"""The limits and patterns of the wire schema (contract/wire.py): the bounds every body is held to,
the names the server keeps for itself; the schema, its error messages and the OpenAPI document read
them from here."""

from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.contract.naming import STEP_TIME_METRIC, TIMELINE_SERIES

HUB_HEADER = "X-RL-Insight-Hub"  # the hub instance a sender expects; a restarted hub answers 409

MAX_NAME = 200
MAX_LABEL_VALUE = 256
MAX_BATCHES = 10_000
MAX_METRICS_PER_BATCH = 10_000
MAX_EXTRA_LABELS = 16
MAX_STEP = 2**63 - 1
MAX_TIME = 1e11  # seconds since the epoch (year 5138): timestamps fit in int64 ms
MAX_FUTURE_S = 300.0  # a batch stamped further than this beyond the server's clock is refused (max_future_s)
MAX_TARGET_LABELS = 16
MAX_TTL_S = 7 * 86400
MAX_SILENCE_S = 30 * 86400
MIN_SILENCE_S = 60

# Whole-string patterns (see contract/naming.py for the name rules and why they end in (?!\n)$)
HOST_PATTERN = r"^(?:[a-zA-Z0-9.\-]{1,253}|\[[0-9a-fA-F:]{2,39}\])(?!\n)$"
PORT_PATTERN = r"^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])(?!\n)$"
ADDRESS_PATTERN = HOST_PATTERN.removesuffix("(?!\\n)$") + ":" + PORT_PATTERN.removeprefix("^")
JOB_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_.\-]{0,63}(?!\n)$"
ALERT_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]{0,127}(?!\n)$"
RESERVED_LABELS = frozenset({"project", "experiment_name", "job", "instance"})
RESERVED_PREFIX = "rl_insight_hub_"  # the hub's own series
# every name the server makes itself: the hub's figures, the detectors' findings (server/health), the
# timeline's per-step figures (server/timeline: those names only; the trainer's span counters are
# rl_insight_timeline_* too), the step time; a client's key of such a name is dropped
RESERVED_PREFIXES = (RESERVED_PREFIX, "rl_insight_health_")
RESERVED_NAMES = frozenset({STEP_TIME_METRIC, ATTEMPT_METRIC, *TIMELINE_SERIES})
MAX_DROPPED_NAMED = 100  # the names a push's answer lists at most (it counts them all)
# how much of an over-long metric name a push's answer repeats (enough to find the key, the answer small)
MAX_DROPPED_NAME = 2 * MAX_NAME


def too_long_why(name: str) -> str:
    """Why a pushed key was left out of its batch: its name is over ``MAX_NAME`` characters."""
    return f"a metric name of {len(name)} characters, over the limit of {MAX_NAME}"
