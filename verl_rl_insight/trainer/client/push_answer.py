"""What a push's answer tells the sender (sender.py): the keys the server left out, the steps whose
``training/global_step`` disagreed, the server's clock; and the words of its warnings."""

from __future__ import annotations

import email.utils

DROPPED_KEY = (
    "rl-insight: the server leaves metric %s out of every step that logs it (%s); the rest of each step is delivered"
)
STEP_DISAGREEMENT = (
    "rl-insight: a logged training/global_step differs from the step it was logged at; "
    "the server files the step under training/global_step (rl_insight_hub_step_disagreements_total)"
)
CLOCK_WARNING = (
    "rl-insight: this host's clock is %+.0f s from the server's; steps are stamped with this "
    "host's time (a batch more than the server's max_future_s ahead is refused); sync the clock (NTP)"
)


def left_out(answer: dict[str, object]) -> tuple[dict[str, str], int]:
    """({dropped key: why}, count of step disagreements) from a 2xx answer, bounded for the log."""
    dropped = answer.get("dropped_keys")
    named = {str(k)[:200]: str(v)[:200] for k, v in dropped.items()} if isinstance(dropped, dict) else {}
    disagreements = answer.get("step_disagreements")
    return named, disagreements if isinstance(disagreements, int) and disagreements > 0 else 0


def clock_offset(date: str | None, now: float) -> float | None:
    """This host's clock minus the server's (its HTTP ``Date``), or None when it sent none we read."""
    try:
        return now - email.utils.parsedate_to_datetime(date).timestamp() if date else None
    except (TypeError, ValueError):
        return None


def outage_warning(url: str, status: int | None, message: str, spool_batches: int) -> tuple[object, ...]:
    """The warning (format and arguments) said once when pushes start failing."""
    if status in (401, 403):  # it answered: no outage to wait out, a credential to fix
        return (
            "rl-insight: the server at %s refused the %s (HTTP %s: %s); training continues, but no "
            "metric reaches the server until it accepts the credential: export the RL_INSIGHT_SERVER_URL "
            "line that `rl-insight server url` prints on the server",
            url,
            "token" if status == 401 else "credential",
            status,
            message,
        )
    return (
        "rl-insight: %s %s (%s); training continues, metrics are kept (up to %d batches) and "
        "replayed when it takes them",
        "the monitoring server asks to retry later:" if status == 429 else "cannot reach the monitoring server at",
        url,
        message,
        spool_batches,
    )
