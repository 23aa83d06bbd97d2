"""The run explorer's pages: one HTML shell for the runs list (``/``, ``/runs``), a run page
(``/runs/<project>/<experiment>``) and a step page (``/runs/<project>/<experiment>/steps/<n>``), and
the files it loads from ``/static/explorer/<file>`` (vendored in the package: no CDN). Every answer
carries a strict Content-Security-Policy: scripts and styles from this server only, requests to
this server only (``connect-src 'self'``), no inline script, no frames.

``entry(method, path)`` gives the API's route entry (handler, needs-the-token) of a page or a file,
or None (not a page: the API's 404).
"""

import json
import re
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Protocol

from verl_rl_insight.contract import paths
from verl_rl_insight.server.api.asgi_types import Sent


class Answerable(Protocol):
    """A request the API answers (api/request.Request): its ``send`` is the ASGI send."""

    async def send(self, message: Sent) -> None: ...


Handler = Callable[[Answerable], Awaitable[None]]

STATIC_PREFIX = paths.EXPLORER_STATIC
SHELL = "explorer.html"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# a name in the static folder: letters, digits, dots, dashes; no slash, no "..", no leading dot
FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")
PAGE = re.compile(re.escape(paths.PAGE_RUNS) + r"/[^/]+/[^/]+(/steps/[0-9]{1,12})?/?")


def entry(method: str, path: str) -> tuple[Handler, bool] | None:
    """The API's route entry (handler, False: no token needed) of ``method path`` when it is a page
    or a static file, else None."""
    if method != "GET":
        return None
    if path in ("/", paths.PAGE_RUNS, paths.PAGE_RUNS + "/") or PAGE.fullmatch(path):
        return (lambda request: _serve(request, SHELL)), False
    if path.startswith(STATIC_PREFIX):
        name = path[len(STATIC_PREFIX) :]
        return (lambda request: _serve(request, name)), False
    return None


async def serve(request: Answerable, path: str) -> None:
    """Answer a GET of ``path`` (``/``, ``/runs/...``, ``/static/explorer/...``): for a route table that
    routes those paths here (prefix routes) rather than asking ``entry``; 404 when it is no page."""
    found = entry("GET", path)
    await (found[0](request) if found is not None else _serve(request, None))


def asset(name: str) -> bytes | None:
    """The bytes of a static file of the explorer, or None when there is no such file (or the name
    reaches outside the folder: ``..``, a slash, a hidden file)."""
    suffix = name[name.rfind(".") :] if "." in name else ""
    if not FILE_NAME.fullmatch(name) or ".." in name or suffix not in CONTENT_TYPES:
        return None
    entry = resources.files("verl_rl_insight.server.explorer").joinpath("static").joinpath(name)
    return entry.read_bytes() if entry.is_file() else None  # small files, read each time: an upgrade shows at once


async def _serve(request: Answerable, name: str | None) -> None:
    body = asset(name) if name is not None else None
    if name is None or body is None:
        status, content_type = 404, "application/json"
        what = f"no such file of the explorer: {name[:80]!r}" if name is not None else "no such page of the explorer"
        body = json.dumps({"error": what}).encode()
    else:
        status, content_type = 200, CONTENT_TYPES[name[name.rfind(".") :]]
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"content-security-policy", CSP.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-cache"),
    ]
    await request.send({"type": "http.response.start", "status": status, "headers": headers})
    await request.send({"type": "http.response.body", "body": body, "more_body": False})
