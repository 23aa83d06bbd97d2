"""The one place where the package's errors become HTTP status codes."""

from verl_rl_insight.contract.errors import (
    BadInput,
    Busy,
    Forbidden,
    NotFound,
    OverCapacity,
    RLInsightError,
    TooLarge,
    Unavailable,
    UnsupportedEncoding,
)

# most specific first: TooLarge and UnsupportedEncoding are BadInput too
_STATUS: tuple[tuple[type[RLInsightError], int], ...] = (
    (TooLarge, 413),
    (UnsupportedEncoding, 415),
    (BadInput, 400),
    (Forbidden, 403),
    (NotFound, 404),
    (OverCapacity, 422),
    (Busy, 429),
    (Unavailable, 503),
)


def retry_headers(error: RLInsightError) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for an error that passes by itself (Busy): the client keeps what it sent and retries."""
    return [(b"retry-after", str(error.retry_after_s).encode())] if isinstance(error, Busy) else []


def http_status(error: RLInsightError) -> int:
    """The status that answers ``error`` (500 for a kind the API should never see)."""
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500
