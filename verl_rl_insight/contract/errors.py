"""Every error this package raises on purpose, in one hierarchy.

An error says what is wrong (naming the field or the setting) and, where it can, what to do.
It says nothing about HTTP: the server's API maps each kind to a status in one place
(``server/api/errors.py``), the CLI to one line and an exit code.
"""


class RLInsightError(Exception):
    """Base of every error of verl-rl-insight."""


class ConfigError(RLInsightError, ValueError):
    """A configuration the user must fix; the message says how."""


class BadInput(RLInsightError, ValueError):
    """Input that breaks a rule; the message names the field."""


class TooLarge(BadInput):
    """Input over a size or count limit."""


class UnsupportedEncoding(BadInput):
    """A body in an encoding or content type that is not taken."""


class Unauthorized(RLInsightError):
    """No credential, or a wrong one, where one is needed; the message says where to get it."""

    realm = "rl-insight"  # the realm the answer names (HTTP WWW-Authenticate: Bearer)


class Forbidden(RLInsightError):
    """A credential that may not do this (a run credential writing to another run)."""


class NotAllowed(RLInsightError):
    """A known endpoint asked with a method it does not take; ``allowed`` lists the ones it does."""

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.allowed = allowed


class Conflict(RLInsightError):
    """The request expects a state the server is no longer in (a hub restarted since); send again."""


class NotFound(RLInsightError, LookupError):
    """What the request names does not exist here."""


class NoSuchEndpoint(NotFound):
    """A path the API does not serve; ``endpoints`` lists the paths it does."""

    def __init__(self, message: str, endpoints: list[str]) -> None:
        super().__init__(message)
        self.endpoints = endpoints


class OverCapacity(RLInsightError):
    """The server already holds as much as it may (series, memory); the message says which limit."""


class Busy(RLInsightError):
    """Too many at once (scrapers, renders, a run's whole share of memory); retry later."""

    retry_after_s = 1  # what the answer tells the client to wait (HTTP Retry-After)


class Unavailable(RLInsightError):
    """A service this one depends on does not answer, or the server cannot take this now."""

    retry_after_s: int | None = None  # when set, what the answer tells the client to wait


class Starting(Unavailable):
    """The server is still starting (what the request needs is not open yet); retry shortly."""

    retry_after_s = 1
