"""The validation keys a run names in its config (``rl_insight.health.validation_keys``, or verl
0.9's ``trainer.rl_insight.health.validation_keys``; the top-level one wins), read from its card.

The card is the trainer's word, not the server's: anything but a list of at most
``MAX_VALIDATION_KEYS`` non-empty texts of at most ``MAX_VALIDATION_KEY_CHARS`` characters is
ignored whole, with the reason (the card is kept all the same).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from verl_rl_insight.contract.run_card import MAX_VALIDATION_KEY_CHARS, MAX_VALIDATION_KEYS, Json
from verl_rl_insight.server.health.live import HealthMonitor

logger = logging.getLogger("verl_rl_insight.server")

SETTING = "rl_insight.health.validation_keys"


def _named(config: Json) -> Json:
    """The setting's value in verl's resolved config (None where it is not set)."""
    for path in (("rl_insight",), ("trainer", "rl_insight")):
        node: Json = config
        for part in (*path, "health", "validation_keys"):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def validation_keys(card: Mapping[str, Json]) -> tuple[list[str], str | None]:
    """(the keys the run names, why they were ignored or None)."""
    value = _named(card.get("config"))
    if value is None:
        return [], None
    if not isinstance(value, list):
        return [], f"{SETTING}: must be a list of verl keys, not {type(value).__name__}; ignored"
    if len(value) > MAX_VALIDATION_KEYS:
        return [], f"{SETTING}: {len(value)} keys, at most {MAX_VALIDATION_KEYS} are taken; ignored"
    for key in value:
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_VALIDATION_KEY_CHARS:
            return [], (
                f"{SETTING}: {str(key)[:60]!r} is not a verl key "
                f"(non-empty text of at most {MAX_VALIDATION_KEY_CHARS} characters); ignored"
            )
    return [str(k) for k in value], None


class Taker:
    """Hands each card's keys to the run's health walk (a ``RunCardStore`` listener); what the store
    answers the trainer says which keys were taken, or why none were."""

    def __init__(self, health: HealthMonitor) -> None:
        self.health = health  # the one walk the alerts and the explorer read

    def __call__(self, project: str, experiment: str, card: Mapping[str, Json]) -> dict[str, Json]:
        keys, why = validation_keys(card)
        self.health.take_run_keys(project, experiment, keys)
        if why is not None:
            logger.warning("run %r / %r: %s", project[:100], experiment[:100], why)
            return {"validation_keys_ignored": why}
        return {"validation_keys": list(keys)} if keys else {}
