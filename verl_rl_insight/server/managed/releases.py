"""Pinned releases of the services the server runs, and what "compatible" means for each.

Pins (why these):
- Prometheus 2.53.4: the 2.53 long-term-support line; >= 2.30 for http_sd and the features
  the rules use; 2.x keeps the flags and API the Debian package (2.42) has, so both behave alike.
- Alertmanager 0.27.0: >= 0.25 (the Debian package of bookworm) for the v2 silences API and
  the flags the server passes; 0.27 is the line Prometheus 2.53 was released with.
- Tempo 2.6.1: the Tempo 2.x line the official RL-Insight installer uses, so archives people
  already mirror for it fit here too (same file names).
- Grafana 11.2.0 (OSS): Grafana >= 11 for the Tempo and Prometheus datasource features the
  dashboards use.

A checksum is only pinned here when it was read from two independent published sources, or
from one that builds from the archive. Where none is pinned (``None``), the installer reads the
checksum file the release itself publishes beside its archives (``checksums``: Prometheus'
``sha256sums.txt``, Tempo's goreleaser ``SHA256SUMS``, Grafana's ``<archive>.sha256``), over
HTTPS from the release, from ``--mirror``, or from the ``--local-archive`` folder; an explicit
``--sha256 NAME=HEX`` wins over both.
"""

import platform
import re
from collections.abc import Mapping
from typing import Any, TypedDict

from verl_rl_insight.contract.errors import ConfigError

RELEASES: dict[str, dict[str, Any]] = {
    "prometheus": {
        "version": "2.53.4",
        "file": "prometheus-{version}.linux-{arch}.tar.gz",
        "url": "https://github.com/prometheus/prometheus/releases/download/v{version}/{file}",
        "binary": "prometheus-{version}.linux-{arch}/prometheus",
        "checksums": "sha256sums.txt",
        "checksums_url": "https://github.com/prometheus/prometheus/releases/download/v{version}/{checksums}",
        "sha256": {
            "amd64": "b8b497c4610d1b93208252b60c8f20f6b2e78596ae8df43397a2e805aa53d475",
            "arm64": "ec7236ecea7154d0bfe142921708b1ae7b5e921e100e0ee85ab92b7c444357e0",
        },
        "minimum": "2.30.0",
        "version_args": ["--version"],
    },
    "alertmanager": {
        "version": "0.27.0",
        "file": "alertmanager-{version}.linux-{arch}.tar.gz",
        "url": "https://github.com/prometheus/alertmanager/releases/download/v{version}/{file}",
        "binary": "alertmanager-{version}.linux-{arch}/alertmanager",
        "checksums": "sha256sums.txt",
        "checksums_url": "https://github.com/prometheus/alertmanager/releases/download/v{version}/{checksums}",
        "sha256": {"amd64": None, "arm64": None},
        "minimum": "0.25.0",
        "version_args": ["--version"],
    },
    "tempo": {
        "version": "2.6.1",
        "file": "tempo_{version}_linux_{arch}.tar.gz",
        "url": "https://github.com/grafana/tempo/releases/download/v{version}/{file}",
        "binary": "tempo",
        "checksums": "SHA256SUMS",
        "checksums_url": "https://github.com/grafana/tempo/releases/download/v{version}/{checksums}",
        "sha256": {"amd64": None, "arm64": None},
        "minimum": "2.0.0",
        "version_args": ["--version"],
    },
    "grafana": {
        "version": "11.2.0",
        "file": "grafana-{version}.linux-{arch}.tar.gz",
        "url": "https://dl.grafana.com/oss/release/{file}",
        "binary": "grafana-v{version}/bin/grafana",
        "checksums": "{file}.sha256",
        "checksums_url": "https://dl.grafana.com/oss/release/{checksums}",
        "sha256": {
            "amd64": "a7e717b78c11e37b147994fc04655da5f434280e1f01ceb84e8f38ca7fdef050",
            "arm64": "a0bd569fd4b9130ad1e2507605c11d285de43758bb33cf22114f42bae0fe76ac",
        },
        "minimum": "11.0.0",
        "version_args": ["--version"],
    },
}

SERVICES = tuple(RELEASES)

# what the server does without each optional service (it runs, and says so, instead of failing)
OPTIONAL_SERVICES = {
    "grafana": "no dashboards; Prometheus has every series and rl-insight watch draws the run",
    "tempo": "the server keeps the spans itself (rl-insight timeline, the swimlane of rl-insight watch)",
}


class Release(TypedDict):
    """What ``server install`` fetches for one service and how it checks it."""

    name: str
    version: str
    arch: str
    file: str
    url: str
    binary: str  # the member of the archive that is the service's binary
    sha256: str | None
    sha256_source: str
    checksums: str
    checksums_url: str
    minimum: str
    version_args: list[str]


def machine_arch(machine: str | None = None) -> str:
    """amd64 or arm64 for this machine; anything else is not supported by the pinned releases."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        return "amd64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise ConfigError(f"no pinned release for machine type {machine!r} (amd64 and arm64 only)")


def release(name: str, arch: str | None = None, overrides: Mapping[str, Any] | None = None) -> Release:
    """The release of service ``name`` for ``arch``: version, file, url, binary member, sha256.

    ``overrides`` (from the server config's ``services.<name>``) may change version, url,
    file and sha256; a changed version without a sha256 has none (the installer then asks).
    """
    base = dict(RELEASES[name])
    overrides = dict(overrides or {})
    arch = arch or machine_arch()
    version = str(overrides.get("version") or base["version"])
    sha = base["sha256"].get(arch) if version == base["version"] else None
    sha_source = "the checksum pinned in rl-insight"
    if overrides.get("sha256"):
        sha = overrides["sha256"].get(arch) if isinstance(overrides["sha256"], dict) else overrides["sha256"]
        sha_source = f"services.{name}.sha256 of the server config"
    fields = {"version": version, "arch": arch}
    file = (overrides.get("file") or base["file"]).format(**fields)
    fields["file"] = file
    fields["checksums"] = (overrides.get("checksums") or base["checksums"]).format(**fields)
    return {
        "name": name,
        "version": version,
        "arch": arch,
        "file": file,
        "url": (overrides.get("url") or base["url"]).format(**fields),
        "binary": (overrides.get("binary_member") or base["binary"]).format(**fields),
        "sha256": sha.lower() if sha else None,
        "sha256_source": sha_source,
        "checksums": fields["checksums"],
        "checksums_url": (overrides.get("checksums_url") or base["checksums_url"]).format(**fields),
        "minimum": base["minimum"],
        "version_args": base["version_args"],
    }


_VERSION = re.compile(r"version\s+v?(\d+\.\d+\.\d+)|\bv?(\d+\.\d+\.\d+)")


def parse_version(text: str) -> str | None:
    """The first x.y.z in a ``--version`` output (preferring one after the word "version")."""
    match = _VERSION.search(text or "")
    if not match:
        return None
    return match.group(1) or match.group(2)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3])


def compatible(version: str | None, minimum: str) -> bool:
    return version is not None and version_tuple(version) >= version_tuple(minimum)
