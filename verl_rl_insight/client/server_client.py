"""What every trainer-side call to the rl-insight server shares: one HTTP session per caller
and the JSON + bearer-token headers."""


class ServerClient:
    def __init__(self, token=None):
        self.token = token
        self._session = None

    def request(self, method, url, body=None, params=None, timeout=5.0, headers=None):
        """``requests`` response (imported here: keeps ``import verl_rl_insight`` light); raises
        what requests raises when the server cannot be reached. ``url`` carries no credentials:
        the token goes in the Authorization header."""
        import requests

        if self._session is None:
            self._session = requests.Session()
        all_headers = {"Content-Type": "application/json"}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        all_headers.update(headers or {})
        return self._session.request(method, url, data=body, params=params, headers=all_headers, timeout=timeout)
