"""Who may call a route of the API (the route table states it, the authenticator checks it)."""

import enum
from typing import Literal


class Access(enum.Enum):
    """Who may call a route when the server has a token (without one, anyone may)."""

    ANYONE = "anyone"
    TOKEN = "token"
    RUN_CREDENTIAL = "run_credential"  # the token, or a run credential of the run it names (``RunIn`` says where)


# Where a RUN_CREDENTIAL route's request names its run. The router checks these before the handler
# runs: "query" (``?project=&experiment_name=``), "body" (the JSON body's project and experiment_name)
# and "body labels" (the target's labels), the body decoded once for it (``body_runs``). The handler
# still checks the rest as it decodes the body, parsed once where it may be MBs: "body batches" (each
# batch's labels, while the push is validated), "spans" (each span's resource attributes), "target"
# (the labels of the registered target that the query's job and address name).
RunIn = Literal["query", "body batches", "body labels", "body", "spans", "target"]
