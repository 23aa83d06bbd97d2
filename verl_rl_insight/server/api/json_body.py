"""A JSON request body, parsed or refused naming what is wrong (400)."""

import json

from verl_rl_insight.contract.run_card import Json
from verl_rl_insight.contract.wire import PushError


def parse_json(body: bytes) -> Json:
    try:
        parsed: Json = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PushError(f"body is not valid JSON: {str(exc)[:200]}") from None
    return parsed
