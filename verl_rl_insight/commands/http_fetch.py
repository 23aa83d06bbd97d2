"""The commands' one way over HTTP (to the rl-insight server, its Prometheus, Tempo): the package's
client (contract/http_client.py: kept-alive sessions, timeouts, the token in a header) and one error,
``NoAnswer``, for every way of not getting a usable answer. ``api.call`` builds the server API's
one-line errors on it."""

import functools
from collections.abc import Mapping
from typing import Any

from verl_rl_insight.commands.printable import printable
from verl_rl_insight.contract import server_url
from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.contract.http_client import HttpClient, Reply, Unreachable


class NoAnswer(RLInsightError):
    """No answer the caller can use from an address: none at all (``status`` None), a status that is
    not 2xx (the server's own words), or a body that is not JSON. The message names the address
    without its query or credentials."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@functools.lru_cache(maxsize=16)
def _client(token: str | None) -> HttpClient:
    """One kept-alive client per token (the commands talk to one server, its Prometheus, its Tempo)."""
    return HttpClient(token)


def address(url: str) -> str:
    """What a message names of ``url``: no credentials, no query."""
    return server_url.redact(url).split("?")[0]


def fetch(
    method: str,
    url: str,
    *,
    token: str | None = None,
    body: bytes | str | None = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Reply:
    """The answer to one request, whatever its status; raises NoAnswer (status None) when none came.
    Every HTTP call of the commands goes through here (``fetch_ok``, ``fetch_json``, ``call``)."""
    try:
        return _client(token).request(method, url, params=params, data=body, headers=headers, timeout_s=timeout_s)
    except Unreachable as exc:
        raise NoAnswer(str(exc)) from None


def fetch_ok(
    url: str, *, token: str | None = None, params: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> Reply:
    """A 2xx answer to ``GET url``; raises NoAnswer with the status and the server's words for any other."""
    reply = fetch("GET", url, token=token, params=params, timeout_s=timeout_s)
    if not reply.ok:
        raise NoAnswer(f"{address(url)} answered {reply.status}: {printable(reply.error())}", reply.status)
    return reply


def fetch_json(
    url: str,
    *,
    token: str | None = None,
    params: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Any:
    """``GET`` a JSON document (made printable); raises NoAnswer when the answer is not 2xx JSON. The
    document is as json.loads gives it: the caller reads the fields it knows."""
    reply = fetch_ok(url, token=token, params=params, timeout_s=timeout_s)
    try:
        return printable(reply.json())
    except ValueError:
        raise NoAnswer(f"{address(url)} did not answer with JSON", reply.status) from None
