"""The ASGI 3 shapes the API reads and writes (HTTP only), after ``asgiref.typing``."""

from collections.abc import Awaitable, Callable
from typing import Literal, TypedDict

Header = tuple[bytes, bytes]


class Scope(TypedDict, total=False):
    """What the server says of a request before its body (the keys this API reads)."""

    type: str
    method: str
    path: str
    raw_path: bytes  # the path as sent, percent-escapes kept (``a%2Fb`` stays one segment)
    query_string: bytes
    headers: list[Header]


class Received(TypedDict, total=False):
    """A piece of the request body (``http.request``) or the client gone (``http.disconnect``)."""

    type: str
    body: bytes
    more_body: bool


class ResponseStart(TypedDict):
    type: Literal["http.response.start"]
    status: int
    headers: list[Header]


class ResponseBody(TypedDict):
    type: Literal["http.response.body"]
    body: bytes
    more_body: bool


Sent = ResponseStart | ResponseBody
Receive = Callable[[], Awaitable[Received]]
Send = Callable[[Sent], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]  # an ASGI application (HTTP only)
