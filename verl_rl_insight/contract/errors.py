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


class Forbidden(RLInsightError):
    """A credential that may not do this (a run credential writing to another run)."""


class NotFound(RLInsightError, LookupError):
    """What the request names does not exist here."""


class OverCapacity(RLInsightError):
    """The server already holds as much as it may (series, memory); the message says which limit."""


class Busy(RLInsightError):
    """Too many at once (scrapers, renders, a run's whole share of memory); retry later."""

    retry_after_s = 1  # what the answer tells the client to wait (HTTP Retry-After)


class Unavailable(RLInsightError):
    """A service this one depends on does not answer."""
