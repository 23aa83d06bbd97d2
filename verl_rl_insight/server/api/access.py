"""Who may call a route of the API (the route table states it, the authenticator checks it)."""

import enum


class Access(enum.Enum):
    """Who may call a route when the server has a token (without one, anyone may)."""

    ANYONE = "anyone"
    TOKEN = "token"
    RUN_CREDENTIAL = "run_credential"  # the token, or a run credential of the run it names (the handler checks)
