"""Shared test helpers: loopback ports, HTTP, a real Prometheus, and processes we own."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


_HANDED_OUT: set[int] = set()


def free_port():
    """A loopback port nobody listens on now, and one this test process has not handed out before:
    two calls in a row can otherwise get the same port back (the first socket is closed already), and
    `server start --port P --prometheus-port P` is refused (a CI run failed on exactly that)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def http(method, url, body=None, headers=None, timeout=10):
    """(status, body bytes) for any answer, also 4xx/5xx; (None, b"") when nothing answers. A
    ``user:password@`` URL (the stack's Prometheus, see stack_prometheus) logs in with basic auth."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None:
        import base64

        login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password)}"
        headers = {"Authorization": "Basic " + base64.b64encode(login.encode()).decode(), **(headers or {})}
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError):
        return None, b""


def range_query(prometheus, promql, start, end, step_s=2):
    """Prometheus' range query (what a Grafana panel draws over [start, end]) at ``prometheus`` (a URL,
    its login in it): the series, each with its (time, value) points."""
    params = {"query": promql, "start": str(start), "end": str(end), "step": f"{step_s}s"}
    status, body = http("GET", prometheus + "/api/v1/query_range?" + urllib.parse.urlencode(params))
    assert status == 200, body[:500]
    return json.loads(body)["data"]["result"]


def grafana_legend(legend_format, labels):
    """A series' name in a Grafana panel's legend: each ``{{label}}`` of the panel's legendFormat is the
    series' label, an absent one the empty string (Grafana's renderLegendFormat), the ends trimmed."""
    import re

    return re.sub(r"\{\{\s*(.+?)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend_format).strip()


def push(url, payload, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return http("POST", url + "/api/v1/push", body, headers)


def wait_for(predicate, timeout=30.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def require_prometheus():
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary: install the Debian package `prometheus` (.ci/run does)")
    return binary


class Prometheus:
    """A real Prometheus scraping the given targets every second, in its own process group, as the
    named scraper ``test-prometheus`` (what a Prometheus of your own does: see README)."""

    def __init__(self, tmp_path, targets, rule_files=(), out_of_order_s=None):
        binary = require_prometheus()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "prometheus-test.yml"
        storage = {"storage": {"tsdb": {"out_of_order_time_window": f"{out_of_order_s}s"}}} if out_of_order_s else {}
        config.write_text(
            json.dumps(
                {  # JSON is YAML
                    **storage,
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {
                            "job_name": "hub",
                            "honor_labels": True,
                            "params": {"scraper": ["test-prometheus"]},
                            "static_configs": [{"targets": list(targets)}],
                        }
                    ],
                    "rule_files": [str(p) for p in rule_files],
                }
            )
        )
        self.log = open(tmp_path / "prometheus-test.log", "wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: http("GET", self.url + "/-/ready")[0] == 200, 30, what="prometheus ready")

    def query(self, promql, at=None):
        params = {"query": promql}
        if at is not None:
            params["time"] = str(at)
        status, body = http("GET", self.url + "/api/v1/query?" + urllib.parse.urlencode(params))
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    def query_range(self, promql, start, end, step="1s"):
        params = {"query": promql, "start": str(start), "end": str(end), "step": step}
        status, body = http("GET", self.url + "/api/v1/query_range?" + urllib.parse.urlencode(params))
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    def raw_samples(self, selector, window_s):
        """Every stored sample (value, timestamp) of ``selector`` in the last ``window_s`` seconds."""
        result = self.query(f"{selector}[{int(window_s)}s]")
        return {tuple(sorted(r["metric"].items())): [(float(v), float(t)) for t, v in r["values"]] for r in result}

    def alerts(self):
        status, body = http("GET", self.url + "/api/v1/alerts")
        assert status == 200, body
        return json.loads(body)["data"]["alerts"]

    def stop(self):
        stop_group(self.process)
        self.log.close()


def stop_group(process, timeout=10):
    """End a process we started with start_new_session=True, and its whole group."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
    except ProcessLookupError:
        pass


def kill_session(sid, timeout=15):
    """End every process of the session ``sid`` (a session we created with setsid)."""

    def members():
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == sid:
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    try:
        os.killpg(sid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while members() and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in members():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_python(code, env=None, pythonpath=None, timeout=120, cwd=None):
    """Run ``python -c code`` in a fresh interpreter (site and .pth files included)."""
    full_env = {k: v for k, v in os.environ.items()}
    full_env.update(env or {})
    if pythonpath:
        full_env["PYTHONPATH"] = os.pathsep.join(
            [str(pythonpath)] + ([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else [])
        )
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd or "/"
    )


def old_verl(version):
    """verl==version installed with --no-deps into a cache folder (tracking.py only needs what 0.9 needs)."""
    root = Path(os.environ.get("RL_INSIGHT_TEST_CACHE", Path.home() / ".cache" / "rl-insight-tests"))
    target = root / f"verl-{version}"
    if not (target / "verl" / "utils" / "tracking.py").exists():
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), f"verl=={version}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            pytest.fail(f"could not install verl=={version} for the version matrix: {result.stderr[-2000:]}")
    return target


def rl_insight(*args, env=None, timeout=300):
    """``python -m verl_rl_insight ARGS`` in a subprocess. ``env`` is added to this process's
    environment; a None value removes that variable. Past ``timeout`` its whole process group is
    killed (a demo's Ray driver and the workers it started, not only the command) and
    TimeoutExpired raised."""
    full = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    command = [sys.executable, "-m", "verl_rl_insight", *args]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, start_new_session=True
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise subprocess.TimeoutExpired(command, timeout, out, err) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


SERVER_PORTS = (
    "port",
    "prometheus_port",
    "tempo_port",
    "tempo_grpc_port",
    "otlp_http_port",
    "otlp_grpc_port",
    "grafana_port",
    "alertmanager_port",
)


def write_server_config(folder, **settings):
    """A server config on loopback, a free port for every service, scraping every second:
    ``folder/server.yaml``; returns (path, config)."""
    import yaml

    ports = set()
    while len(ports) < len(SERVER_PORTS):
        ports.add(free_port())
    config = {
        "bind": "127.0.0.1",
        **dict(zip(SERVER_PORTS, ports, strict=True)),
        "scrape_interval_s": 1,
        "data_dir": str(folder / "data"),
        **settings,
    }
    path = folder / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, config


def start_hub_process(port, tmp_path, open_files=None, log=None, **settings):
    """The real server process with the hub alone (no Prometheus, Tempo, Grafana), on loopback;
    its settings go through stdin, as ``rl-insight server start --detach`` sends them.
    ``open_files``: its descriptor limit (soft and hard). ``log``: a path its stdout and stderr
    (its log) go to, kept for the test to read (default: thrown away)."""
    import resource

    settings = {
        "bind": "127.0.0.1",
        "port": port,
        "data_dir": str(tmp_path / "data"),
        "services": {name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")},
        # tests that do not test the token: named, as `rl-insight server start --local-trust` names it
        **({} if settings.get("token") else {"local_trust": True}),
        **settings,
    }
    limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))) if open_files else None
    out = open(log, "ab") if log else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "verl_rl_insight.server.app"],
        stdin=subprocess.PIPE,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=limit,
    )
    if log:
        out.close()  # the server holds its own copy
    process.stdin.write(json.dumps(settings).encode())
    process.stdin.close()

    def ready():
        if process.poll() is not None:
            raise AssertionError(f"the hub exited with {process.returncode}")
        return http("GET", f"http://127.0.0.1:{port}/-/ready")[0] == 200

    wait_for(ready, 20, what="hub ready")
    return process


@contextlib.contextmanager
def hub_process(tmp_path, **settings):
    """``start_hub_process`` on a free loopback port for a with-block: its URL; stopped after."""
    port = free_port()
    process = start_hub_process(port, tmp_path, **settings)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(process)


def process_figures(pid):
    """(threads, resident memory in bytes) of a process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) * 1024


def cpu_seconds(pid):
    """User + system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stack_login(data_dir, service="prometheus"):
    """The login of the running stack's Prometheus (or Alertmanager) started with ``data_dir``:
    (user, password), as the server keeps it in its 0600 file."""
    return "rl-insight", (Path(data_dir) / "secrets" / f"{service}-password").read_text().strip()


def stack_prometheus(data_dir, port, service="prometheus"):
    """The running stack's Prometheus (or Alertmanager) URL with its login, as
    ``rl-insight server url --prometheus`` prints it: ``http://rl-insight:<password>@127.0.0.1:<port>``."""
    user, password = stack_login(data_dir, service)
    return f"http://{user}:{urllib.parse.quote(password, safe='')}@127.0.0.1:{port}"
