"""RL_INSIGHT_SERVER_URL as trainers get it: ``http://rl-insight:<token>@host:18080`` carries the
write token, so one variable is all a training node needs. Nothing logs the token: every URL
that reaches a log line goes through ``redact``."""

from __future__ import annotations

import urllib.parse

TOKEN_USER = "rl-insight"


def with_token(url: str, token: str | None) -> str:
    """``url`` with ``token`` as its password (unchanged when ``token`` is empty)."""
    if not token:
        return url
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{TOKEN_USER}:{urllib.parse.quote(token, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def split(url: str) -> tuple[str, str | None]:
    """(url without credentials, token or None): the token is the URL's password."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    bare = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    token = urllib.parse.unquote(parts.password) if parts.password else None
    return bare, token


def user_and_password(url: str) -> tuple[str, tuple[str, str] | None]:
    """(url without credentials, (user, password) or None): what a ``user:password@`` URL of
    Prometheus or Alertmanager (``rl-insight server url --prometheus``) logs in with."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    user, password = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
    return split(url)[0], (user, password)


def with_user(url: str, user: str, password: str) -> str:
    """``url`` with ``user:password@`` (both quoted)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    login = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
    netloc = f"{login}@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def without_credentials(url: str) -> str:
    """``url`` with any user:password@ taken out, for status and logs."""
    return split(url)[0]


def redact(url: object) -> str:
    """``url`` with any password replaced by ``***``: what log lines and reports show. A URL whose
    credentials a parser does not see (no scheme: ``rl-insight:<token>@host:18080``) shows nothing
    before its last ``@``."""
    text = str(url)
    try:
        bare, token = split(text)
    except ValueError:
        return "<unparsable URL>"
    if token is None:
        return f"***@{bare.rpartition('@')[2]}" if "@" in bare else bare
    scheme, _, rest = bare.partition("://")
    return f"{scheme}://{TOKEN_USER}:***@{rest}"
