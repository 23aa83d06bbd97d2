"""The server's secrets: the write token and Grafana's admin password.

Secure by default: a hub that listens beyond loopback always requires a token for writes; when
none is configured one is generated. Grafana always gets a password that is not ``admin``:
generated when none is configured. Both are kept in files of mode 0600 under
``<data_dir>/secrets`` (the same value on every start), are read by the services from files,
never from a command line, and are shown only by ``rl-insight server start`` (the export line)
and ``rl-insight server status --secrets``.
"""

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.server.settings import ServerSettings
from verl_rl_insight.server.stores.files import write_atomically

TOKEN_FILE = "hub-token"
GRAFANA_PASSWORD_FILE = "grafana-admin-password"


class CredentialError(ConfigError):
    """A credential setting that cannot be used (a token file others can read, say)."""


def is_loopback(bind: str) -> Any:
    if bind in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def secrets_dir(data_path: Any) -> Any:
    path = Path(data_path) / "secrets"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def read_secret(data_path: Any, name: str) -> Any:
    try:
        return (Path(data_path) / "secrets" / name).read_text().strip() or None
    except OSError:
        return None


def _kept_or_new(data_path: Any, name: str, configured: Any) -> Any:
    """``configured`` if given, else the value kept from an earlier start, else a new one; written
    to its 0600 file either way (services and the CLI read it there)."""
    path = secrets_dir(data_path) / name
    value = configured or read_secret(data_path, name) or secrets.token_urlsafe(24)
    if read_secret(data_path, name) != value:
        write_atomically(path, value, mode=0o600)  # 0600 from its first byte
    os.chmod(path, 0o600)
    return value


def resolve(settings: ServerSettings) -> Any:
    """Fill in the token and Grafana password of ``settings`` (in place) and return it."""
    data = settings.data_path
    if settings.token or not is_loopback(settings.bind):
        settings.token = _kept_or_new(data, TOKEN_FILE, settings.token)
    if settings.grafana_admin_password == "admin":
        raise CredentialError(
            "grafana_admin_password is Grafana's well-known default; set another one, or leave "
            "it empty and the server generates one (rl-insight server status --secrets)"
        )
    settings.grafana_admin_password = _kept_or_new(data, GRAFANA_PASSWORD_FILE, settings.grafana_admin_password)
    return settings
