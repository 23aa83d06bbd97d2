"""`rl-insight demo` end to end (shortened): the server with a real Prometheus, the SIMULATED run
through verl's real run_ppo and the real patches, then every PromQL query of the dashboards,
with its variables filled, returns data from that Prometheus."""

import datetime
import json
import re
import urllib.parse

import pytest

from tests.helpers import http, require_prometheus, rl_insight, write_server_config
from verl_rl_insight.grafana import generate
from verl_rl_insight.grafana.build import build

EXPERIMENT = "demo-test"


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def demo_run(request, tmp_path_factory):
    engine = request.param
    require_prometheus()
    tmp = tmp_path_factory.mktemp("demo")
    path, config = write_server_config(tmp, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}})
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}   # the demo's hardware stays on
    result = rl_insight("demo", "--steps", "8", "--step-seconds", "1", "--config", str(path), "--experiment",
                        EXPERIMENT, "--engine", engine, *(["--no-transfer-queue"] if engine == "sglang" else []),
                        env=env, timeout=600)
    try:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        yield result.stdout, f"http://127.0.0.1:{config['prometheus_port']}", engine
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def test_demo_says_it_is_a_simulation_and_where_to_look(demo_run):
    out, prom, engine = demo_run
    assert f"2 simulated {engine} replicas" in out
    assert "SIMULATED verl run" in out and "This was a SIMULATION" in out
    assert f"{prom}/graph?g0.expr=rl_insight_monitor_critic_score_mean" in out
    assert "SIMULATED step 8/8 [##############################]" in out


def fill(expr):
    for name, value in (("$project", "rl-insight-demo"), ("$experiment_name", EXPERIMENT), ("$replica", ".*"),
                        ("$node", ".*"), ("$gpu", ".*"), ("$__rate_interval", "20s")):
        expr = expr.replace(name, value)
    return expr


def query(prom, promql, at):
    status, body = http("GET", prom + "/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": at}))
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def test_every_dashboard_query_returns_data_after_the_demo(demo_run):
    out, prom, engine = demo_run
    # the demo lingers 3 s after its last step with its replicas still registered: look 2 s in
    last = re.findall(r"SIMULATED step \d+/\d+ \[#+\] (\d\d:\d\d:\d\d)", out)[-1]
    at = datetime.datetime.combine(datetime.date.today(), datetime.time.fromisoformat(last)).timestamp() + 2
    empty = []
    checked = 0
    # each run covers its engine's dashboard and the hardware one; the TransferQueue row is
    # checked in the vLLM run (the SGLang run skips TransferQueue to keep CI short)
    other = "vllm" if engine == "sglang" else "sglang"
    for file, dashboard in build().items():
        if other in file:
            continue
        for kind, text in generate.queries(dashboard):
            if kind == "traceql":
                continue    # no Tempo here: the check (test_dashboards) covers what they constrain
            if kind == "variable":   # label_values(metric{...}, label)
                metric, label = re.fullmatch(r"label_values\((.*), (\w+)\)", text).groups()
                text = f"count by ({label}) ({metric})"
            if engine == "sglang" and "tq_controller" in text:
                continue
            checked += 1
            if not query(prom, fill(text), at):
                empty.append(f"{file}: {text}")
    assert checked > 60
    transfer_queue = [line for line in out.splitlines() if "TransferQueue" in line]
    assert empty == [], transfer_queue
