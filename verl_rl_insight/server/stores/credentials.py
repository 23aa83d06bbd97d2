"""The server's secrets: the write token, Grafana's admin password, and the logins of the
server's Prometheus and Alertmanager.

Secure by default: a hub always requires a token for writes, on loopback too (every local user
reaches loopback); when none is configured one is generated at the first start. The one exception,
``--local-trust`` on the command line (``local_trust``), is for a machine of one user: no token,
writes open on loopback, and ``rl-insight server status`` says so. Grafana always gets a password that is not ``admin``:
generated when none is configured. Both are kept in files of mode 0600 under
``<data_dir>/secrets`` (the same value on every start), are read by the services from files,
never from a command line, and are shown only by ``rl-insight server start`` (the export line)
and ``rl-insight server status --secrets``.

Prometheus and Alertmanager listen on loopback, where every local user reaches them: each takes
basic auth (user ``rl-insight``) with a password generated on the first start. The password is
kept in ``secrets/<service>-password`` (0600), which the server, Grafana's datasource and the CLI
read; the service itself gets only a bcrypt hash of it, in ``<service>-web.yml`` (0600, its
``--web.config.file``), so neither is on a command line.
"""

import ipaddress
import os
import secrets
from pathlib import Path

import bcrypt
import yaml

from verl_rl_insight.contract.errors import ConfigError
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores.files import write_atomically

TOKEN_FILE = "hub-token"
GRAFANA_PASSWORD_FILE = "grafana-admin-password"
SERVICE_USER = "rl-insight"  # the user of the Prometheus and Alertmanager logins
LOGIN_SERVICES = ("prometheus", "alertmanager")
BCRYPT_ROUNDS = 10  # each service caches a checked login: the cost is paid once per password


class CredentialError(ConfigError):
    """A credential setting that cannot be used (a token file others can read, say)."""


def is_loopback(bind: str) -> bool:
    if bind in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def secrets_dir(data_path: Path) -> Path:
    path = Path(data_path) / "secrets"
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def read_secret(data_path: Path, name: str) -> str | None:
    try:
        return (Path(data_path) / "secrets" / name).read_text().strip() or None
    except OSError:
        return None


def _kept_or_new(data_path: Path, name: str, configured: str) -> str:
    """``configured`` if given, else the value kept from an earlier start, else a new one; written
    to its 0600 file either way (services and the CLI read it there)."""
    path = secrets_dir(data_path) / name
    value = configured or read_secret(data_path, name) or secrets.token_urlsafe(24)
    if read_secret(data_path, name) != value:
        write_atomically(path, value, mode=0o600)  # 0600 from its first byte
    os.chmod(path, 0o600)
    return value


def resolve(settings: ServerSettings) -> ServerSettings:
    """Fill in the token and Grafana password of ``settings`` (in place) and return it."""
    data = settings.data_path
    if settings.local_trust:
        if not is_loopback(settings.bind) or settings.token:
            raise CredentialError(
                "--local-trust (no token) is for a server on loopback without a token: bind 127.0.0.1 "
                f"(not {settings.bind}) and give no token, or leave --local-trust out"
            )
    else:
        settings.token = _kept_or_new(data, TOKEN_FILE, settings.token)
    if settings.grafana_admin_password == "admin":
        raise CredentialError(
            "grafana_admin_password is Grafana's well-known default; set another one, or leave "
            "it empty and the server generates one (rl-insight server status --secrets)"
        )
    settings.grafana_admin_password = _kept_or_new(data, GRAFANA_PASSWORD_FILE, settings.grafana_admin_password)
    return settings


def password_file(data_path: Path, service: str) -> Path:
    """Where the plain password of ``service``'s login is kept (0600)."""
    return Path(data_path) / "secrets" / f"{service}-password"


def web_config_file(data_path: Path, service: str) -> Path:
    """``service``'s ``--web.config.file``: its login, the password as a bcrypt hash (0600)."""
    return Path(data_path) / f"{service}-web.yml"


def service_login(data_path: Path, service: str) -> tuple[str, str] | None:
    """(user, password) of ``service``'s login, for whoever may read the server's files; None for
    another user, or before the first start."""
    password = read_secret(data_path, password_file(data_path, service).name)
    return (SERVICE_USER, password) if password else None


def write_service_logins(data_path: Path) -> dict[str, tuple[str, str]]:
    """Each login service's password (kept from an earlier start, else new) and its web config
    with the hash; returns service -> (user, password)."""
    logins = {}
    for service in LOGIN_SERVICES:
        password = _kept_or_new(data_path, password_file(data_path, service).name, "")
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()
        config = yaml.safe_dump({"basic_auth_users": {SERVICE_USER: hashed}})
        write_atomically(web_config_file(data_path, service), config, mode=0o600)
        logins[service] = (SERVICE_USER, password)
    return logins
