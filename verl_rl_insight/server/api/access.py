"""Who may call a route of the API (the route table states it, the authenticator checks it)."""

import enum
from typing import Literal


class Access(enum.Enum):
    """Who may call a route when the server has a token (without one, anyone may)."""

    ANYONE = "anyone"
    TOKEN = "token"
    RUN_CREDENTIAL = "run_credential"  # the token, or a run credential of the run it names (``RunIn``: where)


# Where a RUN_CREDENTIAL route's request names its run, which its run gate checks (run_gate.py):
# the router before the handler runs for "query" (``?project=&experiment_name=``), "target" (the
# labels of the registered target that ``?job=&address=`` name), "body" (a small JSON body's project
# and experiment_name) and "body labels" (the target's labels); the handler's one parse of a body
# that may be MBs for "body batches" (each batch of a push) and "spans" (each span's resource).
# ``named_runs`` says which is which; an answer of success without the gate consulted is refused.
RunIn = Literal["query", "body batches", "body labels", "body", "spans", "target"]
