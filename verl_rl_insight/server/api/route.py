"""What a route of the API declares: method, path, handler, who may call it, when, how much body.

The table of every route is ``routes.ROUTES``; the router, the authenticator, the body reader and
the OpenAPI document all read it, so a route is declared once.
"""

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final, Literal

from verl_rl_insight.server.api.access import Access, RunIn
from verl_rl_insight.server.api.request import Request

if TYPE_CHECKING:  # the handlers' view of the API; context.py imports this module
    from verl_rl_insight.server.api.context import Context

Handler = Callable[["Context", Request], Awaitable[None]]
JsonSchema = dict[str, object]


CONFIGURED: Final = "max_body_bytes"  # a body limit: the server's max_body_mb setting
BodyLimit = int | Literal["max_body_bytes"]


@dataclasses.dataclass(frozen=True)
class Doc:
    """How the OpenAPI document describes a route (its security comes from the route's access)."""

    summary: str
    ok: Mapping[str, object] | None = None  # the 200 response; None: a JSON object
    parameters: tuple[JsonSchema, ...] = ()
    errors: tuple[int, ...] = ()
    body: JsonSchema | None = None  # the JSON request body's schema
    raw: Mapping[str, object] | None = None  # a request body that is not JSON: its "content"


@dataclasses.dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    access: Access
    doc: Doc
    needs_start: bool = False  # 503 with Retry-After until the server has finished starting
    body_limit: BodyLimit | None = None  # the largest body it reads (None: it reads none)
    prefix: bool = False  # the path and every path below it (pages, static files): not in the OpenAPI document
    run_in: RunIn | None = None  # RUN_CREDENTIAL routes: where the request names its run (access.RunIn)

    def __post_init__(self) -> None:
        if (self.access is Access.RUN_CREDENTIAL) != (self.run_in is not None):
            raise ValueError(
                f"{self.method} {self.path}: a run credential's route, and only one, says where its run is"
            )
