"""`rl-insight server install` against a loopback HTTP server (no internet here) serving
archives the test builds around the Debian prometheus binary, and with --local-archive."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import REPO, require_prometheus, write_server_config
from verl_rl_insight.commands.server import installer
from verl_rl_insight.server.managed.releases import machine_arch, release

VERSION = "2.53.4"
ARCH = machine_arch()
FILE = f"prometheus-{VERSION}.linux-{ARCH}.tar.gz"
TOP = f"prometheus-{VERSION}.linux-{ARCH}"


_built: dict[str, bytes] = {}  # the archives built, by their members: the 50 MB binary is packed once a module


def build_archive(path, members):
    """members: list of (name, bytes | ("symlink", target) | ("hardlink", target)). Written to
    ``path``; returns its sha256. gzip's fastest level: a .tar.gz all the same, packed in a second."""
    key = repr([(name, c if isinstance(c, tuple) else hashlib.sha256(c).hexdigest()) for name, c in members])
    if key not in _built:
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz", compresslevel=1) as tar:
            for name, content in members:
                info = tarfile.TarInfo(name)
                if isinstance(content, tuple):
                    info.type = tarfile.SYMTYPE if content[0] == "symlink" else tarfile.LNKTYPE
                    info.linkname = content[1]
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(content), 0o755
                    tar.addfile(info, io.BytesIO(content))
        _built[key] = packed.getvalue()
    Path(path).write_bytes(_built[key])
    return hashlib.sha256(_built[key]).hexdigest()


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
    return subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "server", "install", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def nothing_installed():
    root = installer.services_dir()
    leftovers = [p.name for p in root.iterdir()] if root.exists() else []
    return not leftovers, leftovers


def test_download_verify_extract_and_the_binary_runs(release_server, prometheus_binary):
    root, url, _ = release_server
    sha = build_archive(root / FILE, [(f"{TOP}/prometheus", prometheus_binary), (f"{TOP}/LICENSE", b"Apache")])
    result = run_install("prometheus", "--force", "--mirror", url, "--sha256", f"prometheus={sha}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%" in result.stderr  # the progress bar
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


@pytest.mark.parametrize(
    "evil",
    [
        [(f"{TOP}/prometheus", b"x"), ("../../escaped", b"x")],
        [(f"{TOP}/prometheus", b"x"), ("/tmp/absolute-escape", b"x")],
        [(f"{TOP}/prometheus", b"x"), (f"{TOP}/link", ("symlink", "../../../etc/passwd"))],
        [(f"{TOP}/prometheus", b"x"), (f"{TOP}/abs-link", ("symlink", "/etc/passwd"))],
    ],
    ids=["dot-dot", "absolute", "relative-link-out", "absolute-link"],
)
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
    assert installer.installed("prometheus") == good  # the earlier install is intact
    assert sorted(p.name for p in installer.services_dir().iterdir()) == [f"prometheus-{VERSION}", "prometheus.json"]


def test_local_archive_happy_path_and_missing_file_message(tmp_path, prometheus_binary):
    archives = tmp_path / "archives"
    archives.mkdir()
    missing = run_install(
        "prometheus", "--force", "--local-archive", str(archives), "--sha256", "prometheus=" + "a" * 64
    )
    assert missing.returncode == 1
    assert f"{archives / FILE} not found" in missing.stdout and "expects the release file" in missing.stdout
    sha = build_archive(archives / FILE, [(f"{TOP}/prometheus", prometheus_binary)])
    result = run_install("prometheus", "--force", "--local-archive", str(archives), "--sha256", f"prometheus={sha}")
    assert result.returncode == 0, result.stdout
    assert installer.installed("prometheus")["source"] == "local-archive"


def test_compatible_binary_on_the_machine_is_used_instead_of_downloading():
    require_prometheus()
    result = run_install("prometheus", "--mirror", "http://127.0.0.1:9")  # nothing listens there
    assert result.returncode == 0, result.stdout
    assert "already on this machine" in result.stdout
    record = json.loads((installer.services_dir() / "prometheus.json").read_text())
    assert record["source"] == "system" and record["binary"] == shutil.which("prometheus")


STAND_IN = (REPO / "tests" / "standins" / "stand-in-service").read_bytes()
TEMPO = release("tempo")
GRAFANA = release("grafana")


def tempo_release(folder, sums=None):
    """Tempo's release layout: the archive (a STAND-IN binary inside) and SHA256SUMS beside it."""
    sha = build_archive(folder / TEMPO["file"], [("tempo", STAND_IN), ("LICENSE", b"AGPL")])
    (folder / "SHA256SUMS").write_text(
        sums
        if sums is not None
        else f"{'1' * 64}  tempo_{TEMPO['version']}_linux_other.tar.gz\n{sha}  {TEMPO['file']}\n"
    )
    return sha


def test_tempo_installs_against_the_checksum_file_of_its_release(release_server):
    root, url, _ = release_server
    sha = tempo_release(root)
    result = run_install("tempo", "--mirror", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"sha256 {sha} verified against {url}/SHA256SUMS" in result.stdout
    record = installer.installed("tempo")
    assert record["sha256"] == sha and record["checksum_source"] == f"{url}/SHA256SUMS"


@pytest.mark.parametrize(
    "sums, message",
    [
        (f"{'0' * 64}  {TEMPO['file']}\n", "checksum mismatch"),
        (f"{'0' * 64}  tempo_other.tar.gz\n", f"has no sha256 for {TEMPO['file']}"),
        (None, "cannot read"),
    ],
    ids=["tampered", "no-entry", "missing"],
)
def test_a_tampered_or_missing_checksum_file_refuses_and_installs_nothing(release_server, sums, message):
    root, url, _ = release_server
    tempo_release(root, sums=sums or "")
    if sums is None:
        (root / "SHA256SUMS").unlink()
    result = run_install("tempo", "--mirror", url)
    assert result.returncode == 1
    assert message in result.stdout and "SHA256SUMS" in result.stdout and "nothing was installed" in result.stdout
    assert nothing_installed()[0], nothing_installed()[1]


def test_local_archive_takes_the_checksum_file_from_the_same_folder(tmp_path):
    archives = tmp_path / "archives"
    archives.mkdir()
    tempo_release(archives)
    (archives / "SHA256SUMS").rename(archives / "elsewhere")
    missing = run_install("tempo", "--local-archive", str(archives))
    assert missing.returncode == 1 and f"{archives / 'SHA256SUMS'}" in missing.stdout
    (archives / "elsewhere").rename(archives / "SHA256SUMS")
    result = run_install("tempo", "--local-archive", str(archives))
    assert result.returncode == 0, result.stdout
    assert installer.installed("tempo")["checksum_source"] == str(archives / "SHA256SUMS")


def test_grafana_checksum_file_of_one_line_is_read_too(release_server):
    root, url, _ = release_server
    sha = build_archive(root / GRAFANA["file"], [(GRAFANA["binary"], STAND_IN)])
    (root / f"{GRAFANA['file']}.sha256").write_text(sha + "\n")
    result = run_install("grafana", "--force", "--mirror", url, "--config", "/dev/null")
    assert result.returncode == 1 and f"expected {GRAFANA['sha256']}" in result.stdout  # the pin comes first
    assert installer.checksum_for(sha + "\n", GRAFANA["file"]) == sha
    assert installer.checksum_for(f"{sha}  *{GRAFANA['file']}\n", GRAFANA["file"]) == sha


def test_the_readme_quickstart_installs_and_starts(release_server, tmp_path):
    """`rl-insight server install && rl-insight server start --detach`, as the README has it, with
    the release files on a loopback mirror (RL_INSIGHT_MIRROR; no internet here) and STAND-INs for
    the Tempo and Grafana binaries inside their real archive layouts; Prometheus is the machine's."""
    require_prometheus()
    root, url, _ = release_server
    tempo_release(root)
    sha = build_archive(root / GRAFANA["file"], [(GRAFANA["binary"], STAND_IN)])
    (root / f"{GRAFANA['file']}.sha256").write_text(sha + "\n")
    # the config only names the STAND-IN Grafana archive's checksum (the pinned one is the real release's)
    config, _ = write_server_config(tmp_path, services={"grafana": {"sha256": sha}})
    install = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "server", "install", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, RL_INSIGHT_MIRROR=url),
    )
    assert install.returncode == 0, install.stdout + install.stderr
    assert "already on this machine" in install.stdout  # Prometheus: the Debian package
    assert f"verified against {url}/SHA256SUMS" in install.stdout  # Tempo: its release's checksum file
    assert "verified against services.grafana.sha256 of the server config" in install.stdout
    start = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "server", "start", "--detach", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        assert "NOT RUNNING" not in start.stdout and "export RL_INSIGHT_SERVER_URL=" in start.stdout
    finally:
        subprocess.run([sys.executable, "-m", "verl_rl_insight", "server", "stop"], capture_output=True, timeout=60)


def test_link_chains_and_hard_links_out_of_the_folder_are_refused_and_nothing_is_written_outside(
    release_server, tmp_path
):
    """The archives that defeated the old pre-scan: a symlink chain (a -> ., a/b -> ..) whose
    second link resolves outside, then a file or a hard link written through it."""
    root, url, _ = release_server
    victim = installer.services_dir().parent / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("untouched")
    chains = {
        "symlink-chain-then-file": [
            (f"{TOP}/prometheus", b"x"),
            (f"{TOP}/a", ("symlink", ".")),
            (f"{TOP}/a/b", ("symlink", "..")),
            (f"{TOP}/a/b/b/escaped", b"x"),
        ],
        "symlink-chain-then-hardlink": [
            (f"{TOP}/prometheus", b"x"),
            (f"{TOP}/a", ("symlink", ".")),
            (f"{TOP}/a/b", ("symlink", "..")),
            (f"{TOP}/h", ("hardlink", f"{TOP}/a/b/b/b/b/victim.txt")),
        ],
        "link-through-a-link": [
            (f"{TOP}/prometheus", b"x"),
            (f"{TOP}/s", ("symlink", ".")),
            (f"{TOP}/up", ("symlink", "s/../..")),
            (f"{TOP}/up/escaped", b"x"),
        ],
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
    sha = build_archive(
        root / FILE,
        [
            (f"{TOP}/prometheus", prometheus_binary),
            (f"{TOP}/lib/a.so.1.2", b"so"),
            (f"{TOP}/lib/a.so.1", ("symlink", "a.so.1.2")),
            (f"{TOP}/lib/a.so", ("symlink", "a.so.1")),
            (f"{TOP}/LICENSE.copy", ("hardlink", f"{TOP}/lib/a.so.1.2")),
        ],
    )
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


def test_the_readme_own_job_lines_without_internet_leave_a_server_and_doctors_fix_works_pasted(tmp_path):
    """The README's own-job line run as written, on a machine where nothing answers downloads
    (RL_INSIGHT_MIRROR: a loopback port where nothing listens): Prometheus and Alertmanager are the
    machine's, Tempo and Grafana cannot be had. A server must run, install and status exit 0 and
    say what it runs without; then doctor's fix for the unset URL, pasted into a shell, makes a
    push succeed."""
    import socket

    require_prometheus()
    for port in (18080, 9090, 9093):  # the README line uses the default ports
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is taken: the README line needs it"
    line = next(
        x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("rl-insight server install &&")
    )
    command = line.split("#")[0].strip()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"
    env = dict(os.environ, RL_INSIGHT_MIRROR=dead, RL_INSIGHT_HOME=str(tmp_path / "home"))
    env.pop("RL_INSIGHT_SERVER_URL", None)

    def shell(script):
        return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)

    ran = shell(command)
    try:
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "The server runs without Tempo and Grafana" in ran.stdout and "--local-archive DIR" in ran.stdout
        assert "cannot download from " + dead in ran.stdout  # the network is named, not the checksum
        assert "tempo        not installed: the server keeps the spans itself" in ran.stdout
        status = shell("rl-insight server status")
        assert status.returncode == 0, status.stdout
        assert "grafana      -        absent" in status.stdout and "prometheus" in status.stdout

        doctor = shell("rl-insight doctor")
        problems = [x for x in doctor.stdout.splitlines() if x.startswith("PROBLEM")]
        assert [x.split(":")[0] for x in problems] == ["PROBLEM  RL_INSIGHT_SERVER_URL"], doctor.stdout
        assert "skipped  service grafana: not installed" in doctor.stdout
        fix = doctor.stdout.split("PROBLEM  RL_INSIGHT_SERVER_URL", 1)[1].split("fix: ", 1)[1].splitlines()[0]
        token = (tmp_path / "home" / "data" / "secrets" / "hub-token").read_text().strip()
        assert token not in doctor.stdout
        pushed = shell(
            fix
            + " && python3 -c \"import verl_rl_insight as v, time; v.init('readme', 'pasted'); "
            + "v.log({'actor/entropy': 0.5}, step=1); v.finish()\" && rl-insight runs list --project readme"
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert "pasted" in pushed.stdout and "401" not in pushed.stdout + pushed.stderr
    finally:
        shell("rl-insight server stop")
