"""`rl-insight server install` against a loopback HTTP server (no internet here) serving
archives the test builds around the Debian prometheus binary, and with --local-archive."""

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import require_prometheus
from verl_rl_insight.server import installer
from verl_rl_insight.server.releases import machine_arch, release

VERSION = "2.53.4"
ARCH = machine_arch()
FILE = f"prometheus-{VERSION}.linux-{ARCH}.tar.gz"
TOP = f"prometheus-{VERSION}.linux-{ARCH}"


def build_archive(path, members):
    """members: list of (name, bytes | ("symlink", target) | ("hardlink", target))."""
    with tarfile.open(path, "w:gz") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def prometheus_binary():
    return Path(require_prometheus()).read_bytes()


@pytest.fixture
def release_server(tmp_path):
    """Serves tmp_path/www over loopback; ``cut`` file names are sent half and the connection dropped."""
    root = tmp_path / "www"
    root.mkdir()
    cut = set()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = root / self.path.lstrip("/")
            if not path.is_file():
                self.send_response(404)
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2] if path.name in cut else data)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}", cut
    server.shutdown()
    server.server_close()


def run_install(*args):
    return subprocess.run([sys.executable, "-m", "verl_rl_insight", "server", "install", *args],
                          capture_output=True, text=True, timeout=300)


def nothing_installed():
    root = installer.services_dir()
    leftovers = [p.name for p in root.iterdir()] if root.exists() else []
    return not leftovers, leftovers


def test_download_verify_extract_and_the_binary_runs(release_server, prometheus_binary):
    root, url, _ = release_server
    sha = build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary), (f"{TOP}/LICENSE", b"Apache")])
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%" in result.stderr                                  # the progress bar
    record = installer.installed("prometheus")
    assert record["version"] == VERSION and record["sha256"] == sha and record["source"] == "download"
    version = subprocess.run([record["binary"], "--version"], capture_output=True, text=True)
    assert "prometheus, version" in version.stdout + version.stderr
    assert sorted(p.name for p in installer.services_dir().iterdir()) == [f"prometheus-{VERSION}", "prometheus.json"]


def test_checksum_mismatch_is_refused_and_nothing_is_installed(release_server, prometheus_binary):
    root, url, _ = release_server
    build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary)])
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", "prometheus=" + "0" * 64)
    assert result.returncode == 1
    assert "checksum mismatch" in result.stdout and "nothing was installed" in result.stdout
    assert nothing_installed()[0], nothing_installed()[1]


def test_pinned_checksum_is_used_by_default(release_server, prometheus_binary):
    root, url, _ = release_server
    build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary)])  # not the real release file
    result = run_install("prometheus", "--force", "--mirror", url)
    assert result.returncode == 1
    assert f"expected {release('prometheus')['sha256']}" in result.stdout
    assert nothing_installed()[0]


@pytest.mark.parametrize("evil", [
    [(f"{TOP}/prometheus", b"x"), ("../../escaped", b"x")],
    [(f"{TOP}/prometheus", b"x"), ("/tmp/absolute-escape", b"x")],
    [(f"{TOP}/prometheus", b"x"), (f"{TOP}/link", ("symlink", "../../../etc/passwd"))],
    [(f"{TOP}/prometheus", b"x"), (f"{TOP}/abs-link", ("symlink", "/etc/passwd"))],
], ids=["dot-dot", "absolute", "relative-link-out", "absolute-link"])
def test_archives_writing_or_linking_outside_are_refused(release_server, tmp_path, evil):
    root, url, _ = release_server
    sha = build_archive(root / FILE, evil)
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
    assert result.returncode == 1
    assert "archive refused" in result.stdout
    assert nothing_installed()[0]
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/absolute-escape").exists()


def test_interrupted_download_leaves_no_half_install_and_keeps_the_old_one(release_server, prometheus_binary):
    root, url, cut = release_server
    sha = build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary)])
    assert run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}").returncode == 0
    good = installer.installed("prometheus")
    cut.add(FILE)
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
    assert result.returncode == 1
    assert "nothing was installed" in result.stdout
    assert installer.installed("prometheus") == good                  # the earlier install is intact
    assert sorted(p.name for p in installer.services_dir().iterdir()) == [f"prometheus-{VERSION}", "prometheus.json"]


def test_local_archive_happy_path_and_missing_file_message(tmp_path, prometheus_binary):
    archives = tmp_path / "archives"
    archives.mkdir()
    missing = run_install("prometheus", "--force", "--local-archive", str(archives), "--sha256", "prometheus=" + "a" * 64)
    assert missing.returncode == 1
    assert f"{archives / FILE} not found" in missing.stdout and "expects the release file" in missing.stdout
    sha = build_archive(archives / FILE, [(f"{TOP}/prometheus", prometheus_binary)])
    result = run_install("prometheus", "--force", "--local-archive", str(archives), "--sha256", f"prometheus={sha}")
    assert result.returncode == 0, result.stdout
    assert installer.installed("prometheus")["source"] == "local-archive"


def test_compatible_binary_on_the_machine_is_used_instead_of_downloading():
    require_prometheus()
    result = run_install("prometheus", "--mirror", "http://127.0.0.1:9")   # nothing listens there
    assert result.returncode == 0, result.stdout
    assert "already on this machine" in result.stdout
    record = json.loads((installer.services_dir() / "prometheus.json").read_text())
    assert record["source"] == "system" and record["binary"] == shutil.which("prometheus")


def test_tempo_without_a_pinned_checksum_asks_for_one(tmp_path):
    result = run_install("tempo", "--local-archive", str(tmp_path))
    assert result.returncode == 1
    assert "no verified sha256" in result.stdout and "--sha256 tempo=" in result.stdout


def test_link_chains_and_hard_links_out_of_the_folder_are_refused_and_nothing_is_written_outside(
        release_server, tmp_path):
    """The archives that defeated the old pre-scan: a symlink chain (a -> ., a/b -> ..) whose
    second link resolves outside, then a file or a hard link written through it."""
    root, url, _ = release_server
    victim = installer.services_dir().parent / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("untouched")
    chains = {
        "symlink-chain-then-file": [(f"{TOP}/prometheus", b"x"), (f"{TOP}/a", ("symlink", ".")),
                                    (f"{TOP}/a/b", ("symlink", "..")), (f"{TOP}/a/b/b/escaped", b"x")],
        "symlink-chain-then-hardlink": [(f"{TOP}/prometheus", b"x"), (f"{TOP}/a", ("symlink", ".")),
                                        (f"{TOP}/a/b", ("symlink", "..")),
                                        (f"{TOP}/h", ("hardlink", f"{TOP}/a/b/b/b/b/victim.txt"))],
        "link-through-a-link": [(f"{TOP}/prometheus", b"x"), (f"{TOP}/s", ("symlink", ".")),
                                (f"{TOP}/up", ("symlink", "s/../..")), (f"{TOP}/up/escaped", b"x")],
        "hardlink-to-outside": [(f"{TOP}/prometheus", b"x"), (f"{TOP}/h", ("hardlink", "../../victim.txt"))],
    }
    for what, members in chains.items():
        sha = build_archive(root / FILE, members)
        result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
        assert result.returncode == 1, what
        assert "archive refused" in result.stdout, (what, result.stdout)
        assert nothing_installed()[0], (what, nothing_installed()[1])
        assert victim.read_text() == "untouched", what
        assert not list(tmp_path.rglob("escaped")), what


def test_a_link_to_a_link_inside_the_folder_is_fine(release_server, prometheus_binary):
    root, url, _ = release_server
    sha = build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary), (f"{TOP}/lib/a.so.1.2", b"so"),
                                      (f"{TOP}/lib/a.so.1", ("symlink", "a.so.1.2")),
                                      (f"{TOP}/lib/a.so", ("symlink", "a.so.1")),
                                      (f"{TOP}/LICENSE.copy", ("hardlink", f"{TOP}/lib/a.so.1.2"))])
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
    assert result.returncode == 0, result.stdout + result.stderr
    installed = Path(installer.installed("prometheus")["binary"]).parent
    assert (installed / "lib" / "a.so").read_bytes() == b"so"


def test_a_python_without_the_data_filter_refuses_to_extract(tmp_path, monkeypatch):
    archive = tmp_path / FILE
    build_archive(archive, [(f"{TOP}/prometheus", b"x")])
    monkeypatch.delattr(tarfile, "data_filter")
    with pytest.raises(installer.InstallError, match="no safe tar extraction"):
        installer.safe_extract(archive, tmp_path / "tree")
    assert not (tmp_path / "tree").exists()
