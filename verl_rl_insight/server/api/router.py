"""Finds the route of a request: by method (HEAD as GET) and path; 404 naming the known paths, 405
naming the methods a known path takes."""

from collections.abc import Sequence

from verl_rl_insight.contract.errors import NoSuchEndpoint, NotAllowed
from verl_rl_insight.server.api.route import Route


class Router:
    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes: dict[tuple[str, str], Route] = {}  # exact paths: the API the document describes
        self.prefixes: dict[tuple[str, str], Route] = {}  # a path and all below it, longest first
        for route in routes:
            table = self.prefixes if route.prefix else self.routes
            key = (route.method, route.path)
            if key in table:
                raise ValueError(f"the route table has {route.method} {route.path} twice")
            table[key] = route
        self.prefixes = dict(sorted(self.prefixes.items(), key=lambda item: -len(item[0][1])))
        self.paths = sorted({path for _, path in self.routes})

    def _under(self, path: str) -> list[Route]:
        return [r for r in self.prefixes.values() if path == r.path or path.startswith(r.path.rstrip("/") + "/")]

    def find(self, method: str, path: str) -> Route:
        asked = "GET" if method == "HEAD" else method
        route = self.routes.get((asked, path))
        if route is not None:
            return route
        under = self._under(path) if path not in self.paths else []
        for candidate in under:
            if candidate.method == asked:
                return candidate
        if path in self.paths or under:
            allowed = sorted({m for m, p in self.routes if p == path} | {r.method for r in under})
            raise NotAllowed(f"method {method} not allowed on {path} (allowed: {', '.join(allowed)})", allowed)
        raise NoSuchEndpoint(f"no such endpoint {path[:100]!r}", self.paths)
