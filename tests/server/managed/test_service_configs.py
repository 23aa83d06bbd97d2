"""What the server renders for Prometheus, Tempo and Grafana (Tempo and Grafana cannot run
here: their files are checked for what the real programs need)."""

import configparser
import re

import pytest
import yaml

from verl_rl_insight.dashboards import DASHBOARDS_DIR
from verl_rl_insight.server.managed import grafana, prometheus, tempo
from verl_rl_insight.server.settings.server import ServerSettings


@pytest.fixture
def settings(tmp_path):
    return ServerSettings(
        bind="127.0.0.1",
        port=18181,
        prometheus_port=19191,
        tempo_port=13200,
        otlp_http_port=14318,
        otlp_grpc_port=14317,
        grafana_port=13000,
        retention="2w",
        data_dir=str(tmp_path / "data"),
        grafana_admin_password="pw",
    )


def test_prometheus_scrapes_the_hub_and_the_registered_targets(settings):
    config = yaml.safe_load(prometheus.render_config(settings))
    hub, targets = config["scrape_configs"]
    assert hub["static_configs"] == [{"targets": ["127.0.0.1:18181"]}]
    assert hub["honor_labels"] is True and hub["honor_timestamps"] is True
    assert targets["http_sd_configs"][0]["url"] == "http://127.0.0.1:18181/api/v1/sd"
    assert config["global"]["scrape_interval"] == "5000ms"


def test_grafana_reads_spans_from_an_existing_tempo_when_one_is_named(settings):
    own = yaml.safe_load(grafana.render_datasources(settings))["datasources"][1]
    assert own["type"] == "tempo" and own["url"] == "http://127.0.0.1:13200"
    settings.tempo_query_url = "http://tempo-query.cluster:3200"
    shared = yaml.safe_load(grafana.render_datasources(settings))["datasources"][1]
    assert shared["url"] == "http://tempo-query.cluster:3200"


def test_tempo_receives_otlp_on_the_configured_ports_and_keeps_data_under_the_data_dir(settings):
    config = yaml.safe_load(tempo.render_config(settings))
    otlp = config["distributor"]["receivers"]["otlp"]["protocols"]
    assert otlp["http"]["endpoint"] == "127.0.0.1:14318"
    assert otlp["grpc"]["endpoint"] == "127.0.0.1:14317"
    assert config["server"]["http_listen_port"] == 13200
    assert config["storage"]["trace"]["backend"] == "local"
    assert config["storage"]["trace"]["local"]["path"].startswith(settings.data_dir)
    assert config["storage"]["trace"]["wal"]["path"].startswith(settings.data_dir)
    assert config["compactor"]["compaction"]["block_retention"] == "336h"
    with pytest.raises(ValueError, match="retention"):
        tempo.retention_hours("forever")


def test_grafana_ini_and_provisioning(settings):
    ini_path = grafana.write_files(settings)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ini_path)
    assert ini["server"]["http_port"] == "13000" and ini["server"]["http_addr"] == "127.0.0.1"
    assert ini["security"]["admin_password"] == "pw"
    assert ini["paths"]["provisioning"] == str(settings.data_path / "grafana" / "provisioning")
    assert ini["analytics"]["reporting_enabled"] == "false"
    assert oct(ini_path.stat().st_mode & 0o777) == "0o600"
    provisioning = settings.data_path / "grafana" / "provisioning"
    sources = yaml.safe_load((provisioning / "datasources" / "rl-insight.yaml").read_text())["datasources"]
    by_uid = {s["uid"]: s for s in sources}
    assert by_uid["rl-insight-prometheus"]["type"] == "prometheus"
    assert by_uid["rl-insight-prometheus"]["url"] == "http://127.0.0.1:19191"
    assert by_uid["rl-insight-tempo"]["type"] == "tempo"
    assert by_uid["rl-insight-tempo"]["url"] == "http://127.0.0.1:13200"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "rl-insight.yaml").read_text())["providers"]
    assert provider["folder"] == "RL-Insight" and provider["options"]["path"] == str(DASHBOARDS_DIR)


def test_grafana_command_for_a_release_tree_and_for_debian(tmp_path, settings):
    home = tmp_path / "grafana-v11.2.0"
    (home / "bin").mkdir(parents=True)
    (home / "conf").mkdir()
    (home / "conf" / "defaults.ini").write_text("")
    (home / "bin" / "grafana").write_text("")
    argv = grafana.command(str(home / "bin" / "grafana"), settings, "/x/grafana.ini")
    assert argv[1:] == ["server", f"--homepath={home}", "--config=/x/grafana.ini"]
    assert grafana.command("/usr/sbin/grafana-server", settings, "/x/g.ini")[1] == "--homepath=/usr/share/grafana"


def test_server_settings_reject_bad_files(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("port: 18080\ngrafana_prot: 3000\n")
    with pytest.raises(ValueError, match="unknown setting"):
        ServerSettings.load(str(bad))
    with pytest.raises(ValueError, match="both 3000"):
        ServerSettings(grafana_port=3000, prometheus_port=3000)
    with pytest.raises(ValueError, match="unknown service"):
        ServerSettings(services={"jaeger": {}})


def test_grafana_and_prometheus_log_in_to_the_servers_prometheus_and_alertmanager(settings):
    """Prometheus and Alertmanager take a login: Grafana's datasource carries it (its provisioning
    file is 0600), and prometheus.yml reads the passwords from their 0600 files for the alerts it
    sends to Alertmanager and for its own remote-write figures; no password in prometheus.yml."""
    import os
    import stat

    from verl_rl_insight.server.stores import credentials

    logins = credentials.write_service_logins(settings.data_path)
    settings.remote_write = [{"url": "http://127.0.0.1:1/write"}]
    config = yaml.safe_load(
        prometheus.render_config(settings, alertmanager=f"http://127.0.0.1:{settings.alertmanager_port}")
    )
    [alertmanagers] = config["alerting"]["alertmanagers"]
    password_file = alertmanagers["basic_auth"]["password_file"]
    assert alertmanagers["basic_auth"]["username"] == "rl-insight"
    with open(password_file) as f:
        assert f.read().strip() == logins["alertmanager"][1]
    assert stat.S_IMODE(os.stat(password_file).st_mode) == 0o600
    [own] = [job for job in config["scrape_configs"] if job["job_name"] == "rl_insight_prometheus"]
    assert own["basic_auth"]["password_file"].endswith("secrets/prometheus-password")
    text = prometheus.render_config(settings, alertmanager=f"http://127.0.0.1:{settings.alertmanager_port}")
    assert logins["prometheus"][1] not in text and logins["alertmanager"][1] not in text
    datasource = yaml.safe_load(grafana.render_datasources(settings))["datasources"][0]
    assert datasource["basicAuth"] is True and datasource["basicAuthUser"] == "rl-insight"
    assert datasource["secureJsonData"] == {"basicAuthPassword": logins["prometheus"][1]}
    grafana.write_files(settings)
    provisioned = settings.data_path / "grafana" / "provisioning" / "datasources" / "rl-insight.yaml"
    assert stat.S_IMODE(provisioned.stat().st_mode) == 0o600


def test_tempo_listens_on_loopback_whatever_the_bind(settings):
    """Tempo has no login and its spans hold prompts: loopback only, also when the hub listens
    on every interface; Grafana reads it there."""
    settings.bind = "0.0.0.0"  # rendered only: a bind_address nothing listens on here
    server = yaml.safe_load(tempo.render_config(settings))["server"]
    assert server["http_listen_address"] == "127.0.0.1" and server["grpc_listen_address"] == "127.0.0.1"
    tempo_source = yaml.safe_load(grafana.render_datasources(settings))["datasources"][1]
    assert tempo_source["url"] == f"http://127.0.0.1:{settings.tempo_port}"


def test_every_service_the_settings_name_is_run_through_one_shape_with_its_secrets_in_0600_files(settings):
    """services.py: each of SERVICE_NAMES writes its config and gives a command line; a config that
    holds a secret (Prometheus' remote_write, Alertmanager's receivers, Grafana's password) is
    0600, and no secret is on any command line (others read /proc/<pid>/cmdline)."""
    from verl_rl_insight.server.managed.services import SERVICES
    from verl_rl_insight.server.settings.server import SERVICE_NAMES
    from verl_rl_insight.server.stores import credentials

    credentials.resolve(settings)
    assert sorted(SERVICES) == sorted(SERVICE_NAMES)
    links = {"grafana": "http://127.0.0.1:13000", "prometheus": "http://127.0.0.1:19191"}
    for name, service in SERVICES.items():
        path = service.write_config(settings, links)
        assert path.is_file() and path.is_relative_to(settings.data_path), name
        if name != "tempo":  # tempo.yaml holds ports and paths only
            assert path.stat().st_mode & 0o077 == 0, f"{name}'s {path.name} is readable by others"
        argv = service.command("/usr/bin/" + name, settings, path)
        assert argv[0] == "/usr/bin/" + name
        assert settings.grafana_admin_password not in " ".join(argv), name
        assert service.ready_url(settings).startswith("http://127.0.0.1:"), name


def test_the_settings_checks_name_the_key_as_config_errors(tmp_path):
    """One error kind for a setting the user must fix (contract.errors.ConfigError), whichever
    section is wrong: the server's own keys, alerts: (a detector setting that is not a number, or
    not a whole number of steps, too), alertmanager:."""
    from verl_rl_insight.contract.errors import ConfigError

    for values, named in (
        ({"max_series": -1}, "max_series"),
        ({"alerts": {"no_such_threshold": 1}}, "no_such_threshold"),
        ({"alerts": {"entropy_collapse_share": "0.15x"}}, "entropy_collapse_share"),
        ({"alerts": {"trend_far": 60.5}}, "trend_far"),
        ({"alerts": {"kl_mads": True}}, "kl_mads"),
        ({"alerts": {"probs_diff_critical": "high"}}, "probs_diff_critical"),  # the rules' own, typed too
        ({"alerts": {"stalled_for": 900}}, "stalled_for"),  # a duration: 15m
        ({"alerts": {"timeline_min_steps": 0}}, "timeline_min_steps"),
        ({"alerts": ["probs_diff_critical"]}, "alerts must be a mapping"),
        ({"alertmanager": {"receivers": [{"name": ""}]}}, "alertmanager.receivers[0]"),
        ({"port": 9090}, "prometheus_port"),
    ):
        with pytest.raises(ConfigError, match=re.escape(named)):
            ServerSettings(data_dir=str(tmp_path), **values)


def test_the_settings_reach_the_server_process_as_they_were_read(tmp_path):
    """``server start --detach`` hands the server process its settings as JSON (``as_mapping``): the
    typed alerts: section goes as the keys a config file writes and comes back the same object."""
    import json

    config = tmp_path / "server.yaml"
    config.write_text(
        f"data_dir: {tmp_path / 'data'}\nmemory_limit_mb: 256\n"
        "alerts: {probs_diff_critical: 0.02, stalled_for: 30m, kl_mads: 7, trend_far: 80}\n"
    )
    read = ServerSettings.load(str(config))
    handed = json.loads(json.dumps(read.as_mapping()))
    assert handed["alerts"] == {"probs_diff_critical": 0.02, "stalled_for": "30m", "kl_mads": 7.0, "trend_far": 80}
    again = ServerSettings(**handed)
    assert again == read and again.alerts.detectors.stall_s == 1800.0
    assert again.memory_shares.bound == 256 * 2**20
