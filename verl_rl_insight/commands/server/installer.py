"""``rl-insight server install``: pinned, verified, atomic installs of Prometheus, Alertmanager,
Tempo, Grafana.

Order of preference per service: an explicit binary in the server config, an earlier install
under ``~/.rl-insight/services``, a compatible binary already on the machine (PATH, the Debian
``prometheus`` and ``prometheus-alertmanager`` packages, ``/usr/share/grafana``), then a download
(or ``--local-archive DIR``).
Nothing is extracted before its sha256 matches; nothing counts as installed before the
manifest ``services/<name>.json`` is written, the last step.
"""

import hashlib
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn, TextIO

from verl_rl_insight.contract.errors import RLInsightError
from verl_rl_insight.server.managed.binaries import (
    installed,
    services_dir,
    system_binary,
)
from verl_rl_insight.server.managed.releases import release
from verl_rl_insight.server.stores.files import write_atomically


class InstallError(RLInsightError):
    """An install that did not happen; the message says why and what to do."""


def _progress(out: TextIO | None, name: str, done: int, total: int, started: float) -> None:
    if out is None:
        return
    rate = done / max(time.monotonic() - started, 1e-6) / 2**20
    if total:
        filled = int(30 * done / total)
        text = (
            f"\r  {name:<11} [{'#' * filled}{' ' * (30 - filled)}] {100 * done / total:5.1f}% "
            f"{done / 2**20:7.1f}/{total / 2**20:.1f} MiB {rate:6.1f} MiB/s"
        )
    else:
        text = f"\r  {name:<11} {done / 2**20:7.1f} MiB {rate:6.1f} MiB/s"
    out.write(text)
    out.flush()


def download(url: str, dest: Path, name: str, out: TextIO | None = None, timeout_s: int = 60) -> str:
    """Stream ``url`` into ``dest`` (a .part file first); returns the sha256. Leaves nothing on failure."""
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    done = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, open(part, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0)
            started = time.monotonic()
            last = 0.0
            while True:
                chunk = response.read(1 << 16)
                if not chunk:
                    break
                f.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if time.monotonic() - last > 0.2:
                    _progress(out, name, done, total, started)
                    last = time.monotonic()
            _progress(out, name, done, total, started)
            if out is not None:
                out.write("\n")
            if total and done != total:
                raise InstallError(
                    f"download of {url} was cut off after {done} of {total} bytes; "
                    "nothing was installed, run the command again"
                )
        part.replace(dest)
    except InstallError:
        part.unlink(missing_ok=True)
        raise
    except Exception as exc:
        part.unlink(missing_ok=True)
        raise InstallError(
            f"download of {url} failed after {done} bytes ({type(exc).__name__}: {exc}); "
            "nothing was installed. Offline? Use --local-archive DIR"
        ) from None
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a .tar.gz into ``dest`` (an empty staging folder), or refuse it (InstallError).

    Refused before anything is written: a member that is absolute, has a ``..`` part, is not a
    file, folder or link, or whose path goes through a symlink of the archive (``a -> .`` then
    ``a/b -> ..``: the chains that defeat path checks); a symlink whose target leaves the folder
    or passes through another symlink; a hard link to anything but a regular file before it.
    Then tarfile's ``data`` filter extracts (refused outright where this Python lacks it), and
    afterwards every extracted path is resolved and must lie inside ``dest``.
    """
    if not hasattr(tarfile, "data_filter"):
        raise InstallError(
            f"{archive.name}: this Python ({platform.python_version()}) has no safe tar extraction "
            "(tarfile's data filter: Python 3.10.12, 3.11.4, 3.12 or newer); upgrade Python, "
            "or install the service yourself and set services.<name>.binary"
        )
    dest = Path(dest).resolve()
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            _check_members(archive, members)
            tar.extractall(dest, filter="data")
    except tarfile.TarError as exc:
        raise InstallError(f"{archive.name}: {exc}; archive refused") from None
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = os.path.join(root, name)
            if not _inside(Path(os.path.realpath(path)), dest):
                raise InstallError(
                    f"{archive.name}: {os.path.relpath(path, dest)} resolves outside the install "
                    "folder; archive refused"
                )


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _parts(name: str) -> list[str]:
    return [p for p in PurePosixPath(name).parts if p != "."]


def _check_members(archive: Path, members: list[tarfile.TarInfo]) -> None:
    def refuse(member: tarfile.TarInfo, why: str) -> NoReturn:
        raise InstallError(f"{archive.name}: member {member.name!r} {why}; archive refused")

    links, files = set(), set()
    for member in members:
        parts = _parts(member.name)
        if member.name.startswith("/") or ".." in parts or not parts:
            refuse(member, "would be written outside the install folder")
        if member.issym():
            links.add("/".join(parts))
        elif member.islnk():
            if "/".join(_parts(member.linkname)) not in files:
                refuse(member, f"is a hard link to {member.linkname!r}, not to a file of the archive before it")
        elif member.isfile():
            files.add("/".join(parts))
        elif not member.isdir():
            refuse(member, "is not a file, folder or link")
    for member in members:
        parts = _parts(member.name)
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in links:
                refuse(member, f"goes through the link {'/'.join(parts[:i])!r}")
        if member.issym():
            if member.linkname.startswith("/"):
                refuse(member, f"links to the absolute path {member.linkname!r}")
            place = parts[:-1]
            target = _parts(member.linkname)
            for i, part in enumerate(target):
                if part == "..":
                    if not place:
                        refuse(member, f"links outside the install folder ({member.linkname!r})")
                    place.pop()
                else:
                    place.append(part)
                    if i < len(target) - 1 and "/".join(place) in links:  # a link to a link is fine
                        refuse(member, f"links through the link {'/'.join(place)!r}")


def install_one(
    name: str,
    local_archive: str | Path | None = None,
    mirror: str | None = None,
    force: bool = False,
    sha256: str | None = None,
    overrides: dict[str, Any] | None = None,
    out: TextIO = sys.stderr,
) -> dict[str, str | None]:
    """Install service ``name``; returns the manifest. Raises InstallError, leaving any earlier install intact."""
    if not force:
        kept = installed(name)
        if kept:
            manifest = {k: None if v is None else str(v) for k, v in kept.items()}  # all of it: sha256, file, ...
            return {**manifest, "note": "already installed"}
        found = system_binary(name)
        if found:
            record: dict[str, str | None] = {"binary": found[0], "version": found[1], "source": "system"}
            _write_manifest(name, record)
            return dict(record, note=f"uses the compatible {name} {found[1]} already on this machine")
    rel = release(name, overrides=overrides)
    expected, checksum_source = expected_sha256(name, rel, sha256, local_archive, mirror)
    root = services_dir()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{name}-", dir=root))
    try:
        archive, actual = fetch_archive(name, rel, staging, local_archive, mirror, out)
        if actual != expected:
            raise InstallError(
                f"{name}: checksum mismatch for {rel['file']}: expected {expected} ({checksum_source}), "
                f"the archive has {actual}; nothing was installed"
            )
        final, old = put_in_place(name, rel, staging, archive, root)
        record = {
            "binary": str(final / rel["binary"]),
            "version": rel["version"],
            "source": "download" if not local_archive else "local-archive",
            "sha256": actual,
            "file": rel["file"],
            "checksum_source": checksum_source,
        }
        _write_manifest(name, record)  # the commit point
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_archive(
    name: str, rel: Mapping[str, Any], staging: Path, local_archive: str | Path | None, mirror: str | None, out: TextIO
) -> tuple[Path, str]:
    """(the release archive, its sha256): from the ``--local-archive`` folder, else downloaded into
    ``staging`` from the mirror or the release URL."""
    if local_archive:
        archive = Path(local_archive) / rel["file"]
        if not archive.is_file():
            raise InstallError(
                f"{name}: {archive} not found; --local-archive expects the release file "
                f"{rel['file']} (download it from {rel['url']})"
            )
        return archive, file_sha256(archive)
    url = f"{mirror.rstrip('/')}/{rel['file']}" if mirror else rel["url"]
    archive = staging / rel["file"]
    return archive, download(url, archive, name, out=out)


def put_in_place(
    name: str, rel: Mapping[str, Any], staging: Path, archive: Path, root: Path
) -> tuple[Path, Path | None]:
    """(the install folder, the earlier install moved aside or None): the archive extracted in
    ``staging``, its binary checked, then renamed into place (nothing changes before that)."""
    tree = staging / "tree"
    tree.mkdir()
    safe_extract(archive, tree)
    binary = tree / rel["binary"]
    if not binary.is_file():
        raise InstallError(f"{name}: {rel['file']} has no {rel['binary']}; nothing was installed")
    binary.chmod(binary.stat().st_mode | 0o755)
    final = root / f"{name}-{rel['version']}"
    old = None
    if final.exists():
        old = root / f".old-{name}-{os.getpid()}-{int(time.time())}"
        final.rename(old)
    tree.rename(final)
    return final, old


def expected_sha256(
    name: str,
    rel: Mapping[str, Any],
    explicit: str | None = None,
    local_archive: str | Path | None = None,
    mirror: str | None = None,
) -> tuple[str, str]:
    """(sha256 the archive must have, where it comes from): ``--sha256``, else the checksum pinned
    in this package, else the checksum file the release publishes (from the ``--local-archive``
    folder, the mirror, or the release over HTTPS). Raises InstallError naming what it read."""
    if explicit:
        return explicit.lower(), "--sha256"
    if rel["sha256"]:
        return rel["sha256"], rel["sha256_source"]
    where = (
        f"{Path(local_archive) / rel['checksums']}"
        if local_archive
        else f"{mirror.rstrip('/')}/{rel['checksums']}"
        if mirror
        else rel["checksums_url"]
    )
    instead = f"or pass --sha256 {name}=HEX from the release page; nothing was installed"
    try:
        if local_archive:
            text = Path(where).read_text(errors="replace")[: 1 << 20]
        else:
            with urllib.request.urlopen(where, timeout=30) as response:
                text = response.read(1 << 20).decode(errors="replace")
    except urllib.error.HTTPError:
        raise InstallError(
            f"{name}: no checksum for {rel['file']}: cannot read {where} (not there); the release "
            f"publishes {rel['checksums']} beside the archive: put it there, {instead}"
        ) from None
    except urllib.error.URLError as exc:  # the network, not the checksum: say so, and the offline path
        raise InstallError(
            f"{name}: cannot download from {where.rsplit('/', 1)[0]} ({exc.reason}); nothing was installed. "
            f"Offline? Put {rel['file']} and {rel['checksums']} in a folder and use --local-archive DIR"
        ) from None
    except (OSError, ValueError) as exc:
        raise InstallError(
            f"{name}: no checksum for {rel['file']}: cannot read {where} ({exc}); the release "
            f"publishes {rel['checksums']} beside the archive: put it there, {instead}"
        ) from None
    digest = checksum_for(text, rel["file"])
    if digest is None:
        raise InstallError(f"{name}: {where} has no sha256 for {rel['file']}; {instead}")
    return digest, where


def checksum_for(text: str, file_name: str) -> str | None:
    """The sha256 of ``file_name`` in a checksum file: ``<hex>  <name>`` lines (sha256sum's output,
    goreleaser's SHA256SUMS), or a file holding the hex alone (Grafana's ``<archive>.sha256``)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    for parts in lines:
        if len(parts) >= 2 and os.path.basename(parts[-1].lstrip("*")) == file_name and _is_sha256(parts[0]):
            return parts[0].lower()
    if len(lines) == 1 and len(lines[0]) == 1 and _is_sha256(lines[0][0]):
        return lines[0][0].lower()
    return None


def _is_sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


def _write_manifest(name: str, record: Mapping[str, str | None]) -> None:
    path = services_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(record, indent=2))
