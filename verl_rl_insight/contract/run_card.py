"""The run's card: what a run was started with (verl's resolved config, versions, commit, command
line, nodes x GPUs, model), sent once by the trainer and kept by the server per run.

Shared by both sides: the trainer redacts before the card leaves its process, the server redacts
again before it keeps it (defence in depth), and the CLI flattens two cards to dotted keys and
prints where they differ. Redaction (``redaction.py``) is by key name and by shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import NamedTuple

from verl_rl_insight.contract.redaction import COLUMN_KEYS as COLUMN_KEYS
from verl_rl_insight.contract.redaction import MASK as MASK
from verl_rl_insight.contract.redaction import Json as Json
from verl_rl_insight.contract.redaction import redact as redact
from verl_rl_insight.contract.redaction import redact_argv as redact_argv
from verl_rl_insight.contract.redaction import redact_card as redact_card
from verl_rl_insight.contract.redaction import redact_text as redact_text
from verl_rl_insight.contract.redaction import secret_key as secret_key

MAX_CARD_BYTES = 256 * 1024  # one card, as JSON
MAX_DEPTH = 32  # nesting of the config (verl's own is 6 deep)
MAX_TEXT = 4096  # one string of the config
# rl_insight.health.validation_keys (the trainer's Hydra block; the server reads them from the card)
MAX_VALIDATION_KEYS = 32
MAX_VALIDATION_KEY_CHARS = 200
CARD_FIELDS = (
    "project",
    "experiment_name",
    "created",
    "versions",
    "git",
    "command",
    "nodes",
    "gpus_per_node",
    "model",
    "config",
    "derived",
    "notes",
)
# identity of a run and what is said about the card, not what the run was started with: not compared
IDENTITY_FIELDS = ("project", "experiment_name", "created", "derived", "notes")


def plain(value: object, notes: list[str], where: str = "config", depth: int = 0) -> Json:
    """``value`` as JSON can carry it: what cannot be is its ``repr`` (cut), with a note saying
    where; text is cut at ``MAX_TEXT``, blocks deeper than ``MAX_DEPTH`` are left out."""
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, str) and len(value) > MAX_TEXT:
            notes.append(f"{where}: text of {len(value)} characters cut to {MAX_TEXT}")
            return value[:MAX_TEXT]
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= MAX_DEPTH:
        notes.append(f"{where}: nested deeper than {MAX_DEPTH} levels, left out")
        return None
    if isinstance(value, Mapping):
        return {str(k): plain(v, notes, f"{where}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, notes, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    try:
        shown = repr(value)[:200]
    except Exception:  # a repr that raises: the type is all there is
        shown = f"<{type(value).__name__}>"
    notes.append(f"{where}: a {type(value).__name__}, sent as its repr")
    return shown


def depth_of(value: Json) -> int:
    """How deep ``value`` nests (a scalar is 0), without recursion."""
    deepest = 0
    todo: list[tuple[Json, int]] = [(value, 0)]
    while todo:
        item, level = todo.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            todo.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, level + 1) for v in item)
    return deepest


def flatten(value: Json, prefix: str = "") -> dict[str, Json]:
    """Nested blocks as dotted keys (``actor_rollout_ref.actor.optim.lr``); a list is one value,
    in full; an empty block is one value too."""
    if isinstance(value, dict) and (value or not prefix):
        out: dict[str, Json] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: value}


def card_keys(card: Mapping[str, Json], identity: bool = True) -> dict[str, Json]:
    """A card as dotted keys: its own fields (``versions.verl``, ``git.commit``, ``nodes``...), then
    the config's keys as verl names them (``actor_rollout_ref.actor.optim.lr``; ``config.`` in front
    only of a top-level key that a field of the card also has)."""
    out = flatten({k: v for k, v in card.items() if k != "config" and (identity or k not in IDENTITY_FIELDS)})
    config = card.get("config")
    if isinstance(config, dict):
        for key, value in flatten(config).items():
            out[f"config.{key}" if key.split(".", 1)[0] in CARD_FIELDS else key] = value
    return out


class Absent:
    """A key that one card has and the other has not (printed as ``(absent)``)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = Absent()


class Difference(NamedTuple):
    """A card key whose values differ between two runs' cards."""

    key: str
    first: Json | Absent  # the first run's value (ABSENT: its card lacks the key)
    second: Json | Absent


def _named(value: Json, names: Mapping[str, str]) -> str:
    """``value`` as JSON text with one run's names put in place of the other's."""
    text = json.dumps(value, sort_keys=True)
    for old, new in sorted(names.items(), key=lambda item: len(item[0]), reverse=True):
        text = text.replace(old, new)
    return text


def _derived(card: Mapping[str, Json]) -> dict[str, str]:
    """The card's {config key: the key it copies}, as the card's dotted keys."""
    given = card.get("derived")
    if not isinstance(given, dict):
        return {}
    top = set(CARD_FIELDS)

    def dotted(key: str) -> str:
        return f"config.{key}" if key.split(".", 1)[0] in top else key

    return {dotted(k): dotted(v) for k, v in given.items() if isinstance(v, str)}


def _same(a: Json, b: Json) -> bool:
    return type(a) is type(b) and a == b


def differences(first: Mapping[str, Json], second: Mapping[str, Json]) -> tuple[list[Difference], list[str]]:
    """(the keys whose values differ, sorted; the keys that differ only by nature, set apart).

    The identity fields (project, experiment_name, created, notes) are not compared: two runs are
    two names by nature. A value that is the same once the first run's project and experiment name
    are read as the second's (``trainer.experiment_name``, ``trainer.default_local_dir``, a command
    line that names the experiment) is identity too; and so is a key that verl's own config makes
    a copy of another (``actor_rollout_ref.actor.rollout_n: ${actor_rollout_ref.rollout.n}``, the
    card's ``derived``) while it holds that key's value in both runs; and the command line when it
    differs only by the runs' names and the overrides of keys the diff shows. Those are set apart,
    not listed as differences: what they follow is."""
    a, b = card_keys(first, identity=False), card_keys(second, identity=False)
    names = {
        str(first.get(k)): str(second.get(k))
        for k in ("experiment_name", "project")
        if isinstance(first.get(k), str) and len(str(first.get(k))) >= 3 and first.get(k) != second.get(k)
    }
    derived = {**_derived(second), **_derived(first)}
    found: list[Difference] = []
    by_name: list[str] = []
    for key in sorted(set(a) | set(b)):
        if key in a and key in b:
            left, right = a[key], b[key]
            if type(left) is type(right) and left == right:
                continue
            if names and _named(left, names) == json.dumps(right, sort_keys=True):
                by_name.append(key)
                continue
            source = derived.get(key)
            if source in a and source in b and _same(a[source], left) and _same(b[source], right):
                by_name.append(key)
                continue
            found.append(Difference(key, left, right))
        else:
            found.append(Difference(key, a[key] if key in a else ABSENT, b[key] if key in b else ABSENT))
    told = {d.key for d in found} | set(by_name)
    for item in [d for d in found if d.key == "command"]:
        if _overrides_of(item.first, item.second, told, names):
            found.remove(item)
            by_name.append("command")
    return found, by_name


def _overrides_of(left: Json | Absent, right: Json | Absent, keys: set[str], names: Mapping[str, str]) -> bool:
    """True when two command lines differ only in Hydra overrides (``a.b=v``) of ``keys`` (the keys
    the diff shows already) and in the runs' names: the command adds nothing to the diff then."""
    if not (isinstance(left, list) and isinstance(right, list)) or len(left) != len(right):
        return False
    for one, other in zip(left, right):
        if one == other or (names and _named(one, names) == json.dumps(other, sort_keys=True)):
            continue
        if not (isinstance(one, str) and isinstance(other, str)):
            return False
        key, eq, _ = one.partition("=")
        if not eq or other.partition("=")[0] != key or key.lstrip("+~") not in keys:
            return False
    return True
