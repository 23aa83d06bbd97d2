"""The command line as a new user meets it: every mistake is one line (two with the fix), with a
documented exit code, never a traceback; plain output for people, --json for scripts."""

import json

import pytest

from tests.helpers import free_port, rl_insight, write_server_config


def run(*args, env=None):
    result = rl_insight(*args, env=env, timeout=120)
    return result.returncode, result.stdout + result.stderr


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.yaml").write_text("bind: [127.0.0.1\nport: 18080\n")
    (tmp_path / "huge-port.yaml").write_text("port: 99999999\n")
    (tmp_path / "a-file").write_text("not a folder")
    return tmp_path


CASES = [
    # (what, arguments, environment, exit code, what the message must say)
    (
        "config that is not YAML",
        ["server", "start", "--config", "{tmp}/bad.yaml"],
        {},
        2,
        "is not valid YAML (line 2, column 5)",
    ),
    ("config that does not exist", ["server", "start", "--config", "{tmp}/none.yaml"], {}, 2, "does not exist"),
    (
        "config with a port out of range",
        ["server", "start", "--config", "{tmp}/huge-port.yaml"],
        {},
        2,
        "port must be a port number",
    ),
    (
        "bind that is not an address",
        ["server", "start", "--bind", "not-an-ip"],
        {},
        2,
        "'not-an-ip' is not an IP address",
    ),
    ("scrape interval 0", ["server", "start", "--scrape-interval", "0"], {}, 2, "must be a number of seconds above 0"),
    (
        "scrape interval -5",
        ["server", "start", "--scrape-interval", "-5"],
        {},
        2,
        "must be a number of seconds above 0",
    ),
    ("port 0", ["server", "start", "--port", "0"], {}, 2, "port 0 is out of range"),
    ("a data dir that cannot be made", ["server", "start", "--data-dir", "{tmp}/a-file/data"], {}, 2, "cannot create"),
    ("an unknown service", ["server", "install", "tempo", "nginx"], {}, 2, "unknown service 'nginx'"),
    (
        "a checksum that is not one",
        ["server", "install", "tempo", "--sha256", "tempo=abc"],
        {},
        2,
        "--sha256 takes NAME=<64 hex digits>",
    ),
    ("--server that is not a URL", ["targets", "--server", "not-a-url", "list"], {}, 2, "--server is not a server URL"),
    (
        "--server after the subcommand",
        ["targets", "list", "--server", "ftp://x"],
        {},
        2,
        "--server is not a server URL",
    ),
    (
        "RL_INSIGHT_SERVER_URL that is not a URL",
        ["targets", "list"],
        {"RL_INSIGHT_SERVER_URL": "127.0.0.1"},
        2,
        "RL_INSIGHT_SERVER_URL is not a server URL",
    ),
    (
        "doctor with a port out of range",
        ["doctor"],
        {"RL_INSIGHT_SERVER_URL": "http://127.0.0.1:99999"},
        2,
        "RL_INSIGHT_SERVER_URL is not a server URL",
    ),
    (
        "a target port out of range",
        ["targets", "add", "127.0.0.1:99999", "--job", "node"],
        {},
        2,
        "port 99999 is out of range",
    ),
    (
        "a label without =",
        ["targets", "add", "127.0.0.1:9100", "--job", "node", "--label", "x"],
        {},
        2,
        "--label takes KEY=VALUE",
    ),
    ("dashboards onto a file", ["dashboards", "export", "{tmp}/a-file"], {}, 2, "is a file, not a folder"),
    ("dashboards where no folder can be made", ["dashboards", "export", "{tmp}/a-file/sub"], {}, 2, "cannot create"),
    ("demo with -1 seconds a step", ["demo", "--step-seconds", "-1"], {}, 2, "must be a number of seconds above 0"),
    ("demo with 0 steps", ["demo", "--steps", "0"], {}, 2, "must be a whole number above 0"),
    ("demo with -1 steps", ["demo", "--steps", "-1"], {}, 2, "must be a whole number above 0"),
    ("a command without its subcommand", ["server"], {}, 2, "the following arguments are required: COMMAND"),
    ("run without a command", ["run"], {}, 2, "give a command to run"),
    (
        "a trainer config file that is not YAML",
        ["config"],
        {"RL_INSIGHT_CONFIG_FILE": "{tmp}/bad.yaml"},
        2,
        "is not valid YAML (while parsing a flow sequence",
    ),
    (
        "a trainer config file that is not there",
        ["plugins"],
        {"RL_INSIGHT_CONFIG_FILE": "{tmp}/none.yaml"},
        2,
        "none.yaml does not exist (from RL_INSIGHT_CONFIG_FILE); fix the path or unset RL_INSIGHT_CONFIG_FILE",
    ),
    (
        "VERL_RL_INSIGHT_CONFIG that is not JSON",
        ["config"],
        {"VERL_RL_INSIGHT_CONFIG": "{plugins: 1"},
        2,
        "VERL_RL_INSIGHT_CONFIG is not valid JSON",
    ),
    (
        "a plugin nobody provides",
        ["plugins"],
        {"VERL_RL_INSIGHT_CONFIG": '{"plugins": {"gpu_stats": {"enabled": true}}}'},
        2,
        "unknown rl-insight plugin(s) in config: gpu_stats; known plugins: agent_loop,",
    ),
]


@pytest.mark.parametrize("what, args, env, code, message", CASES, ids=[c[0] for c in CASES])
def test_every_mistake_is_one_line_with_its_exit_code_and_no_traceback(files, what, args, env, code, message):
    got, out = run(
        *[a.format(tmp=files) for a in args], env={k: v.replace("{tmp}", str(files)) for k, v in env.items()}
    )
    assert got == code, f"{what}: exit {got}\n{out}"
    assert "unexpected error" not in out
    assert message in out, f"{what}:\n{out}"
    assert "Traceback" not in out and "server_cmd" not in out and "targets_cmd" not in out
    assert len(out.strip().splitlines()) <= 2, f"{what}: more than two lines\n{out}"


def test_version_and_help_name_commands_plainly():
    code, out = run("--version")
    assert code == 0 and out.startswith("rl-insight ")
    code, out = run("--help")
    assert code == 0 and "COMMAND" in out and "server" in out


def test_dashboards_export_refuses_to_overwrite_unless_forced(tmp_path):
    assert run("dashboards", "export", str(tmp_path))[0] == 0
    code, out = run("dashboards", "export", str(tmp_path))
    assert code == 2 and "exists" in out and "--force" in out
    assert run("dashboards", "export", str(tmp_path), "--force")[0] == 0


def test_targets_are_listed_with_a_header_and_changed_with_plain_sentences(tmp_path):
    path, config = write_server_config(
        tmp_path, services={name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")}
    )
    assert run("server", "start", "--detach", "--config", str(path))[0] == 0
    try:
        code, out = run("targets", "list")
        assert code == 0 and out.strip() == "no targets (rl-insight targets add HOST:PORT --job NAME adds one)"
        code, out = run("targets", "add", "127.0.0.1:9100", "--job", "node-exporter", "--label", "node=n1")
        assert code == 0 and out.startswith("added node-exporter 127.0.0.1:9100 (kept until removed)")
        code, out = run("targets", "list")
        lines = out.strip().splitlines()
        assert lines[0].split() == ["JOB", "ADDRESS", "LABELS", "EXPIRES"]
        assert lines[1].split() == ["node-exporter", "127.0.0.1:9100", "node=n1", "never"]
        code, out = run("targets", "list", "--json", "--server", f"http://127.0.0.1:{config['port']}")
        assert code == 0 and json.loads(out)[0]["labels"] == {"node": "n1"}
        code, out = run("targets", "remove", "127.0.0.1:9100", "--job", "node-exporter")
        assert code == 0 and out.strip() == "removed node-exporter 127.0.0.1:9100"
        code, out = run("targets", "remove", "127.0.0.1:9100", "--job", "node-exporter")
        assert code == 1 and "the server refused (404)" in out and "Traceback" not in out
    finally:
        run("server", "stop")
    code, out = run("targets", "list", "--server", f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "cannot reach the server" in out and len(out.strip().splitlines()) == 1


def test_a_failed_start_shows_this_attempts_lines_only(tmp_path):
    path, config = write_server_config(
        tmp_path,
        grafana_admin_password="admin",
        services={name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")},
    )
    first = run("server", "start", "--detach", "--config", str(path))
    second = run("server", "start", "--detach", "--config", str(path))
    for code, out in (first, second):
        assert code == 2 and "failed to start" in out and "server.log" in out
        assert out.count("well-known default") == 1, out
        assert "Traceback" not in out


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    from verl_rl_insight import commands as cli

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli.job, "config", broken)
    assert cli.main(["config"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rl-insight: unexpected error: RuntimeError: a bug") and "--debug" in err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "config"])


def test_a_reader_that_stops_early_is_no_error():
    """`rl-insight config | head -3`: the reader goes away; no BrokenPipeError, eight times out of eight."""
    import subprocess
    import sys

    for _ in range(8):
        result = subprocess.run(
            f"{sys.executable} -m verl_rl_insight config | head -3", shell=True, capture_output=True, text=True
        )
        assert result.stderr == "" and len(result.stdout.splitlines()) == 3


def test_an_output_path_in_a_missing_folder_is_one_line(tmp_path):
    from tests.helpers import http, start_hub_process, stop_group
    from tests.server.stores.test_timeline_store import PROTOBUF, STEP_SPANS, TOKEN, otlp

    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN)
    try:
        hub = f"http://127.0.0.1:{port}"
        assert http("POST", hub + "/v1/traces", otlp(STEP_SPANS).SerializeToString(), PROTOBUF)[0] == 200
        code, text = run(
            "timeline", "export", "--server", hub, "--project", "p", "--experiment", "e",
            "-o", str(tmp_path / "none" / "t.json"), env={"RL_INSIGHT_TOKEN": TOKEN},
        )  # fmt: skip
        assert code == 2 and "cannot use" in text and "No such file or directory" in text
        assert "Traceback" not in text and "unexpected error" not in text
    finally:
        stop_group(process)
