"""Who may call a route of the API (the route table states it, the authenticator checks it)."""

import enum
from typing import Literal


class Access(enum.Enum):
    """Who may call a route when the server has a token (without one, anyone may)."""

    ANYONE = "anyone"
    TOKEN = "token"
    RUN_CREDENTIAL = "run_credential"  # the token, or a run credential of the run it names (``RunIn`` says where)


# Where a RUN_CREDENTIAL route's request names its run: "query" (``?project=&experiment_name=``: the
# router checks it before the handler runs), or a part of the body, which the store that reads the
# body checks as it decodes it ("body batches": each batch's labels; "body labels": the target's
# labels; "body": the body's project and experiment_name; "spans": each span's resource attributes; "target":
# the labels of the target that the query's job and address name).
RunIn = Literal["query", "body batches", "body labels", "body", "spans", "target"]
