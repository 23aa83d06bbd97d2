"""The one place where the package's errors become HTTP answers: status, headers, body."""

from verl_rl_insight.contract.errors import (
    BadInput,
    Busy,
    Conflict,
    Forbidden,
    NoSuchEndpoint,
    NotAllowed,
    NotFound,
    OverCapacity,
    RLInsightError,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedEncoding,
)

Header = tuple[bytes, bytes]

# most specific first: TooLarge and UnsupportedEncoding are BadInput too
_STATUS: tuple[tuple[type[RLInsightError], int], ...] = (
    (TooLarge, 413),
    (UnsupportedEncoding, 415),
    (BadInput, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (NotAllowed, 405),
    (Conflict, 409),
    (OverCapacity, 422),
    (Busy, 429),
    (Unavailable, 503),
)


def retry_headers(error: RLInsightError) -> list[Header]:
    """``Retry-After`` for an error that passes by itself (Busy, a server starting): the client keeps
    what it sent and retries."""
    wait = error.retry_after_s if isinstance(error, Busy | Unavailable) else None
    return [(b"retry-after", str(wait).encode())] if wait is not None else []


def headers(error: RLInsightError) -> list[Header]:
    """Every header the answer to ``error`` carries."""
    if isinstance(error, Unauthorized):
        return [(b"www-authenticate", f'Bearer realm="{error.realm}"'.encode())]
    if isinstance(error, NotAllowed):
        return [(b"allow", ", ".join(error.allowed).encode())]
    return retry_headers(error)


def body(error: RLInsightError) -> dict[str, str | list[str]]:
    """The JSON answer: ``{"error": ...}`` naming the field (and, for an unknown path, the known ones)."""
    answer: dict[str, str | list[str]] = {"error": str(error)}
    if isinstance(error, NoSuchEndpoint):
        answer["endpoints"] = error.endpoints
    return answer


def http_status(error: RLInsightError) -> int:
    """The status that answers ``error`` (500 for a kind the API should never see)."""
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500
