"""Run cards: one per run (``PUT /api/v1/runs/card``, what the trainer sends with its first step),
read by ``rl-insight runs show`` and ``runs diff``.

A card is checked (an object, at most ``MAX_CARD_BYTES``, config nested at most ``MAX_DEPTH``),
redacted again here (the server's token, URL user info, secret-named keys: the trainer did it
first), and kept in ``<data>/run-cards/<sha256 of the run>.json`` (0600, written whole). Bounded:
at most ``MAX_RUNS`` cards and ``MAX_TOTAL_BYTES`` in all, the oldest written leaving first. Only
the index (run file -> size, time) is in memory; a card is read from its file when asked for.
Without a folder (tests, an API built bare) the cards are kept in memory, under the same bounds.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from verl_rl_insight.contract.errors import BadInput, NotFound, TooLarge
from verl_rl_insight.contract.naming import label_value_problem
from verl_rl_insight.contract.run_card import CARD_FIELDS, MAX_CARD_BYTES, MAX_DEPTH, Json, depth_of, redact_card
from verl_rl_insight.server.stores.files import private_folder, write_atomically

logger = logging.getLogger("verl_rl_insight.server")

MAX_RUNS = 10_000
MAX_TOTAL_BYTES = 512 * 1024 * 1024


class RunCardError(BadInput):
    """A card that breaks a rule; the message names the field."""


def _file_name(project: str, experiment: str) -> str:
    return hashlib.sha256(json.dumps([project, experiment]).encode()).hexdigest()[:40] + ".json"


def check_card(body: bytes, secrets: tuple[str, ...] = ()) -> dict[str, Json]:
    """The card a body carries, redacted; RunCardError / TooLarge naming the field otherwise."""
    if len(body) > MAX_CARD_BYTES:
        raise TooLarge(f"card: {len(body)} bytes is over the limit of {MAX_CARD_BYTES} bytes")
    try:
        card = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RunCardError(f"card: body is not JSON ({str(exc)[:200]})") from None
    if not isinstance(card, dict):
        raise RunCardError(f"card: must be an object with {', '.join(CARD_FIELDS)}, not {type(card).__name__}")
    unknown = sorted(set(card) - set(CARD_FIELDS))
    if unknown:
        raise RunCardError(f"unknown field {unknown[0][:40]!r} (known: {', '.join(CARD_FIELDS)})")
    for name in ("project", "experiment_name"):
        value = card.get(name)
        if not isinstance(value, str) or not value:
            raise RunCardError(f"{name}: must be non-empty text")
        problem = label_value_problem(value)
        if problem:
            raise RunCardError(f"{name} {problem}")
    config = card.get("config")
    if config is not None and not isinstance(config, dict):
        raise RunCardError(f"config: must be an object (verl's resolved config), not {type(config).__name__}")
    if depth_of(config) > MAX_DEPTH:
        raise RunCardError(f"config: nested deeper than {MAX_DEPTH} levels")
    for name in ("versions", "git"):
        if card.get(name) is not None and not isinstance(card[name], dict):
            raise RunCardError(f"{name}: must be an object or null")
    command = card.get("command")
    if command is not None and not (isinstance(command, list) and all(isinstance(a, str) for a in command)):
        raise RunCardError("command: must be a list of text (the arguments) or null")
    notes = card.get("notes")
    if notes is not None and not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        raise RunCardError("notes: must be a list of text or null")
    derived = card.get("derived")
    if derived is not None and not (isinstance(derived, dict) and all(isinstance(v, str) for v in derived.values())):
        raise RunCardError("derived: must be an object of key -> the key it copies, or null")
    for name in ("nodes", "gpus_per_node"):
        value = card.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise RunCardError(f"{name}: must be a whole number or null")
    if card.get("model") is not None and not isinstance(card["model"], str):
        raise RunCardError("model: must be text (the model's path) or null")
    created = card.get("created")
    if created is not None and (isinstance(created, bool) or not isinstance(created, (int, float))):
        raise RunCardError("created: must be a time in seconds or null")
    return redact_card(card, secrets)


# told of each card kept (project, experiment, card); what it answers is added to the PUT's answer
CardListener = Callable[[str, str, dict[str, Json]], dict[str, Json]]


class RunCardStore:
    def __init__(
        self,
        folder: Path | None = None,
        max_runs: int = MAX_RUNS,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        on_card: CardListener | None = None,
    ) -> None:
        self.folder = folder
        self.on_card = on_card  # the health walk takes the validation keys the run names
        self.max_runs = max_runs
        self.max_total_bytes = max_total_bytes
        self._lock = threading.Lock()
        self._index: collections.OrderedDict[str, int] = collections.OrderedDict()  # file -> size, oldest first
        self._memory: dict[str, bytes] = {}
        self._total = 0
        if folder is not None:
            private_folder(folder)
            found = []
            for entry in os.scandir(folder):
                if entry.is_file() and entry.name.endswith(".json") and len(entry.name) == 45:
                    stat = entry.stat()
                    found.append((stat.st_mtime, entry.name, stat.st_size))
            for _, name, size in sorted(found):
                self._index[name] = size
                self._total += size
            with self._lock:
                self._trim()  # bounds lowered since the last start

    def put(self, body: bytes, secrets: tuple[str, ...] = ()) -> dict[str, Json]:
        """Keep the card ``body`` carries (replacing the run's previous one; a run credential's run the
        router has checked). Returns what was kept, in short."""
        card = check_card(body, secrets)
        project, experiment = str(card["project"]), str(card["experiment_name"])
        kept = {"project": project, "experiment_name": experiment, "received": time.time(), "card": card}
        text = json.dumps(kept)
        name = _file_name(project, experiment)
        with self._lock:
            if self.folder is not None:
                write_atomically(self.folder / name, text)
            else:
                self._memory[name] = text.encode()
            self._total += len(text) - self._index.pop(name, 0)
            self._index[name] = len(text)
            self._trim()
        said = self.on_card(project, experiment, card) if self.on_card is not None else {}
        return {"project": project, "experiment_name": experiment, "bytes": len(text), **said}

    def get(self, project: str, experiment: str) -> dict[str, Json]:
        """The kept card of a run (with ``received``); NotFound when there is none."""
        name = _file_name(project, experiment)
        with self._lock:
            if name not in self._index:
                raise NotFound(
                    f"no card of {project[:100]!r} / {experiment[:100]!r} here (a run's card comes with its first step)"
                )
            try:
                raw = self._memory[name] if self.folder is None else (self.folder / name).read_bytes()
                kept = json.loads(raw)
            except (OSError, ValueError) as exc:
                logger.warning("run card %s is unreadable (%s)", name, exc)
                raise NotFound(f"the card of {project[:100]!r} / {experiment[:100]!r} is unreadable here") from None
        if not isinstance(kept, dict) or (kept.get("project"), kept.get("experiment_name")) != (project, experiment):
            raise NotFound(f"no card of {project[:100]!r} / {experiment[:100]!r} here")
        return kept

    def __len__(self) -> int:
        return len(self._index)

    def _trim(self) -> None:
        while len(self._index) > self.max_runs or (len(self._index) > 1 and self._total > self.max_total_bytes):
            oldest, size = self._index.popitem(last=False)
            self._total -= size
            self._memory.pop(oldest, None)
            if self.folder is not None:
                (self.folder / oldest).unlink(missing_ok=True)
