"""What every trainer-side call to the rl-insight server shares: one HTTP session per caller
and the JSON + bearer-token headers."""

import http.client


def _closed_while_idle(exc) -> bool:
    """True when a request failed because the server had closed the kept-alive connection it was
    sent on (the server's idle timeout racing the next request): nothing reached the server."""
    seen, todo = set(), [exc]
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


class ServerClient:
    def __init__(self, token=None) -> None:
        self.token = token
        self._session = None

    def request(self, method, url, body=None, params=None, timeout: float = 5.0, headers=None):
        """``requests`` response (imported here: keeps ``import verl_rl_insight`` light); raises
        what requests raises when the server cannot be reached. ``url`` carries no credentials:
        the token goes in the Authorization header. A request on a kept-alive connection the server
        had just closed is sent once more on a new one, so an idle timeout is not an outage."""
        import requests

        if self._session is None:
            self._session = requests.Session()
        all_headers = {"Content-Type": "application/json"}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        all_headers.update(headers or {})

        def send():
            return self._session.request(method, url, data=body, params=params, headers=all_headers, timeout=timeout)

        try:
            return send()
        except requests.ConnectionError as exc:
            if not _closed_while_idle(exc):
                raise
        return send()
