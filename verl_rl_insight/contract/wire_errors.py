"""What a bad body is told: msgspec's validation and decode errors turned into one line that names
the field (``batches[3].metrics.loss: ...``) and the rule it broke (contract/wire.py decodes)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec

from verl_rl_insight.contract.errors import BadInput, TooLarge
from verl_rl_insight.contract.naming import LABEL_VALUE_PATTERN, SPECIAL_VALUES
from verl_rl_insight.contract.wire_limits import ADDRESS_PATTERN, ALERT_NAME_PATTERN, JOB_PATTERN, MAX_NAME


class PushError(BadInput):
    """Bad push input; the message names the field."""


class PushTooLarge(PushError, TooLarge):
    """A push over a count limit."""


def _show(text: object, limit: int = 60) -> str:
    """A bounded, printable rendering of what the client sent, for error messages."""
    return repr(text[:limit] if isinstance(text, str) else text)[: limit + 2]


_AT = re.compile(r"^(?P<message>.*?)(?: - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`)?$", re.S)
_KEY_MESSAGES = {
    "metrics": f"invalid metric name (must match [a-zA-Z_:][a-zA-Z0-9_:]*, at most {MAX_NAME} characters)",
    "labels": "invalid label name (must match [a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
}


def _explain(
    exc: msgspec.ValidationError, body: bytes, batch_fields: tuple[str, ...], push_fields: tuple[str, ...]
) -> PushError:
    """msgspec's message in this API's words: ``batches[3].metrics.loss: what is wrong`` (the fields:
    BatchBody's and PushBody's, named when a field is unknown)."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any text
    message, path = match["message"], (match["path"] or "").lstrip(".")
    unknown = re.match(r"Object contains unknown field `(.*)`", message)
    if unknown:
        known = ", ".join(sorted(batch_fields if path else push_fields))
        return PushError(f"{path + ': ' if path else ''}unknown field {_show(unknown[1], 40)} (known: {known})")
    if not path:
        return PushError(f'body must be a JSON object {{"batches": [...]}}: {message}')
    if match["key"]:
        return PushError(f"{path}: {_KEY_MESSAGES.get(path.rpartition('.')[2], message)}")
    if path.endswith(".metrics[...]"):
        where = _name_dict_key(path, body) or path
        if message.startswith("Number out of range"):
            return PushError(f"{where} is too large for a 64-bit float")
        return PushError(f"{where} must be a number or one of NaN, +Inf, -Inf ({message})")
    if "[...]" in path:
        path = _name_dict_key(path, body) or path
    if repr(LABEL_VALUE_PATTERN) in message:
        return PushError(f"{path} contains control characters")
    if message.startswith("Expected `str` of length >= 1"):
        return PushError(f"{path} must be a non-empty string")
    if message.startswith(("Expected `array` of length <=", "Expected `object` of length <=")):
        return PushTooLarge(f"{path}: {message}")
    return PushError(f"{path}: {message}")


def _name_dict_key(path: str, body: bytes) -> str | None:
    """For ``batches[3].metrics[...]``: the key whose value broke the rule (read on the error path only)."""
    head = path.partition("[...]")[0]
    try:
        node: Any = json.loads(body)  # JSON of any shape, walked by the error's path
        for part in re.findall(r"[^.\[\]]+|\[\d+\]", head):
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        items = list(node.items())
    except (ValueError, KeyError, IndexError, TypeError, RecursionError, AttributeError):
        return None
    for key, value in items:
        if isinstance(value, str):
            bad = value not in SPECIAL_VALUES and not re.match(LABEL_VALUE_PATTERN, value)
            bad = bad or head.endswith("metrics") and value not in SPECIAL_VALUES
        else:
            try:
                bad = isinstance(value, bool) or not math.isfinite(float(value))
            except (TypeError, ValueError, OverflowError):
                bad = True
        if bad:
            return f"{head}.{key}"
    return None


def field_problem(exc: msgspec.ValidationError, what: str) -> str:
    """A msgspec refusal of a small body (target, silence) as ``field must be ...``."""
    match = _AT.match(str(exc))
    assert match is not None
    message, path = match["message"], (match["path"] or "").lstrip(".")
    unknown = re.match(r"Object contains unknown field `(.*)`", message)
    if unknown:
        return f"unknown field {_show(unknown[1], 40)} (the fields of {what})"
    missing = re.match(r"Object missing required field `(.*)`", message)
    if missing:
        return f"{missing[1]} must be given"
    if not path:
        return f"body must be an object: {what}"
    if match["key"]:
        return f"{path}: {_KEY_MESSAGES['labels']}"
    for pattern, rule in _PATTERN_RULES.items():
        if repr(pattern) in message:
            return f"{path} {rule}"
    return f"{path} must be {message.removeprefix('Expected ')}"


_PATTERN_RULES = {
    LABEL_VALUE_PATTERN: "must be printable text (no control characters)",
    ADDRESS_PATTERN: "must be host:port (no scheme or path), the port not out of range 1-65535",
    JOB_PATTERN: "must match [a-zA-Z_][a-zA-Z0-9_.-]{0,63}",
    ALERT_NAME_PATTERN: "must be an alert's name (letters, digits, _)",
}


def _explain_malformed(exc: msgspec.DecodeError, body: bytes) -> str:
    """Malformed JSON; where Python's parser reads it, name the string msgspec refused (a lone surrogate)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return f"body is not valid JSON: {str(exc)[:200]}"
    found = _find_bad_text(parsed, "")
    return f"{found}: not valid Unicode text (lone surrogate)" if found else f"body is not valid JSON: {str(exc)[:200]}"


def _find_bad_text(node: object, path: str, depth: int = 0) -> str | None:
    if depth > 8:
        return None
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        for text in ((key,) if isinstance(key, str) else ()) + ((value,) if isinstance(value, str) else ()):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return where
        found = _find_bad_text(value, where, depth + 1)
        if found:
            return found
    return None
