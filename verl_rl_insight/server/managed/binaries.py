"""Where each managed service's binary is: the server's config, an install under
``~/.rl-insight/services`` (its manifest), or a compatible binary already on the machine."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TypedDict, cast

from verl_rl_insight.server.managed.releases import RELEASES, compatible, parse_version
from verl_rl_insight.server.settings.server import default_home

SYSTEM_CANDIDATES = {
    "prometheus": ["prometheus"],
    "alertmanager": ["alertmanager", "prometheus-alertmanager"],  # Debian: prometheus-alertmanager
    "tempo": ["tempo"],
    "grafana": ["/usr/share/grafana/bin/grafana", "grafana", "grafana-server"],
}


class Found(TypedDict):
    """Where a service's binary is: ``source`` is config, install (under services/) or system."""

    binary: str
    version: str | None
    source: str


def services_dir() -> Path:
    return default_home() / "services"


def binary_version(path: str | Path, name: str) -> str | None:
    try:
        result = subprocess.run(
            [str(path), *RELEASES[name]["version_args"]], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(result.stdout + "\n" + result.stderr)


def system_binary(name: str) -> tuple[str, str | None] | None:
    """(path, version) of a compatible binary already on this machine, else None."""
    for candidate in SYSTEM_CANDIDATES[name]:
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            version = binary_version(path, name)
            if compatible(version, RELEASES[name]["minimum"]):
                return path, version
    return None


def installed(name: str) -> Found | None:
    """The manifest of an install under services/, if its binary is still there."""
    try:
        record = json.loads((services_dir() / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not os.access(str(record.get("binary", "")), os.X_OK):
        return None
    return cast(Found, record)


def resolve(name: str, configured_binary: str | None = None) -> Found | None:
    """Where to run service ``name`` from: {"binary", "version", "source"} or None."""
    if configured_binary:
        if not os.access(configured_binary, os.X_OK):
            return None
        return {"binary": configured_binary, "version": binary_version(configured_binary, name), "source": "config"}
    record = installed(name)
    if record:
        return record
    found = system_binary(name)
    if found:
        return {"binary": found[0], "version": found[1], "source": "system"}
    return None
