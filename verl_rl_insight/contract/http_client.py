"""One HTTP client for every call the package makes over the network: trainers to the rl-insight
server, the CLI (doctor, watch, timeline, runs, alerts, targets) to the server, Prometheus and
Tempo, the server to its Alertmanager and Prometheus.

On ``requests``: one kept-alive session per client, a timeout on every call, the bearer token in
a header (never in a URL), basic auth for Prometheus and Alertmanager (``basic_auth``, or a
``user:password@`` URL, taken out of the URL before it is sent or named in an error), and every
way of not getting an answer (refused, reset, DNS, timeout) raised as one ``Unreachable`` naming
the address without its query. Any HTTP status is an answer: the caller decides what a 4xx means.
A request sent on a kept-alive connection that the server had just closed while idle is sent once
more on a new one, so an idle timeout is not an outage.
``requests`` is imported on first use: the trainer side's ``import verl_rl_insight`` stays light.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verl_rl_insight.contract import server_url
from verl_rl_insight.contract.errors import Unavailable

if TYPE_CHECKING:
    import requests

Timeout = float | tuple[float, float]  # seconds, or (connect, read)


class Unreachable(Unavailable):
    """No answer from the address (refused, reset, name not found, timed out)."""


class TimedOut(Unreachable):
    """The address took the connection (or did not take it in time) and did not answer in time: a
    slow server, unlike one that refused the connection."""


class Oversized(Unreachable):
    """An answer longer than the caller takes (``max_bytes``): not read further, not an answer."""


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer, whatever its status."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; raises ValueError when it is not."""
        return json.loads(self.body)

    def error(self) -> str:
        """What the server said is wrong: its ``{"error": ...}`` when it sent one, else the body's start."""
        try:
            said = self.json()
        except ValueError:
            said = None
        if isinstance(said, dict) and isinstance(said.get("error"), str):
            return str(said["error"])[:300]
        return self.text.strip()[:300] or f"HTTP {self.status}"


def _closed_while_idle(exc: BaseException) -> bool:
    """True when a request failed because the server had closed the kept-alive connection it was
    sent on (the server's idle timeout racing the next request): nothing reached the server."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
            return True
        todo.extend(arg for arg in getattr(error, "args", ()) if isinstance(arg, BaseException))
        todo.extend(e for e in (error.__cause__, error.__context__) if e is not None)
    return False


class HttpClient:
    """A session to one or more servers; thread-safe (one session per thread that uses it)."""

    def __init__(
        self, token: str | None = None, timeout_s: Timeout = 10.0, basic_auth: tuple[str, str] | None = None
    ) -> None:
        self.token = token
        self.basic_auth = basic_auth  # (user, password): the server's Prometheus and Alertmanager
        self.timeout_s = timeout_s
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = self._local.session = requests.Session()
        return session

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | str | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: Timeout | None = None,
        max_bytes: int | None = None,
    ) -> Reply:
        """The answer to one request; raises Unreachable when there is none, and Oversized when its
        body (decompressed) is longer than ``max_bytes``: what a caller that must not trust the
        server takes, read no further than that."""
        import requests

        all_headers = {"Content-Type": "application/json"} if data is not None or json_body is not None else {}
        try:
            url, login = server_url.user_and_password(url)
        except ValueError:  # not a URL requests takes either: it says so below, as Unreachable
            login = None
        login = self.basic_auth or login
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
            login = None
        all_headers.update(headers or {})
        if json_body is not None:
            data = json.dumps(json_body).encode()
        session = self._session()

        def send() -> requests.Response:
            return session.request(
                method,
                url,
                params=params,
                data=data,
                headers=all_headers,
                auth=login,
                timeout=timeout_s if timeout_s is not None else self.timeout_s,
                stream=max_bytes is not None,
            )

        try:
            try:
                response = send()
            except requests.ConnectionError as exc:
                if not _closed_while_idle(exc):
                    raise
                response = send()
            if max_bytes is None:
                return Reply(response.status_code, response.headers, response.content)
            with response:
                return Reply(response.status_code, response.headers, _at_most(response, max_bytes, url))
        except requests.Timeout as exc:
            raise TimedOut(f"{url.split('?')[0]} does not answer ({_reason(exc)})") from None
        except requests.RequestException as exc:
            raise Unreachable(f"{url.split('?')[0]} does not answer ({_reason(exc)})") from None

    def get_json(self, url: str, params: Mapping[str, str] | None = None, timeout_s: Timeout | None = None) -> Any:
        """GET a JSON document; a status other than 2xx or a body that is not JSON is Unreachable
        too, with the server's own words."""
        reply = self.request("GET", url, params=params, timeout_s=timeout_s)
        url = server_url.redact(url)
        if not reply.ok:
            raise Refused(reply.status, f"{url.split('?')[0]} answered {reply.status}: {reply.error()}")
        try:
            return reply.json()
        except ValueError:
            raise Unreachable(f"{url.split('?')[0]} did not answer with JSON") from None


class Refused(Unreachable):
    """The address answered, with a status that is not 2xx."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _at_most(response: requests.Response, max_bytes: int, url: str) -> bytes:
    """The body of a streamed response, read no further than ``max_bytes`` (decompressed)."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=min(max_bytes + 1, 65536)):
        size += len(chunk)
        if size > max_bytes:
            raise Oversized(f"{url.split('?')[0]} answered more than {max_bytes:,} bytes (not read further)")
        chunks.append(chunk)
    return b"".join(chunks)


def _reason(exc: BaseException) -> str:
    """The innermost cause, in a few words (``Connection refused``, ``timed out``)."""
    text = str(exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "Connection reset"):
        if marker in text:
            return marker
    return type(exc).__name__
