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


def query_range(prom, promql, start, end):
    params = {"query": promql, "start": start, "end": end, "step": "2s"}
    status, body = http("GET", prom + "/api/v1/query_range?" + urllib.parse.urlencode(params))
    assert status == 200, body
    return [float(v) for series in json.loads(body)["data"]["result"] for _, v in series["values"]]


def demo_window(out):
    """(start, end) of the run: the first and the last step's clock time, plus the linger."""
    stamps = re.findall(r"SIMULATED step \d+/\d+ \[[#.]+\] (\d\d:\d\d:\d\d)", out)
    day = datetime.date.today()
    first, last = (datetime.datetime.combine(day, datetime.time.fromisoformat(t)).timestamp() for t in
                   (stamps[0], stamps[-1]))
    return first - 2, last + 2


def panels_to_check(engine):
    """(file, panel) of every panel the demo must fill: rows logged only in some runs are left out
    (their condition is in the row's title), and the TransferQueue row in the SGLang run (skipped
    there to keep CI short); each run covers its engine's dashboard and the hardware one."""
    conditional = {}
    dashboards = build(conditional)
    other = "vllm" if engine == "sglang" else "sglang"
    for file, dashboard in dashboards.items():
        if other in file:
            continue
        skip = False
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                skip = panel["title"] in conditional or (engine == "sglang" and "TransferQueue" in panel["title"])
                for inner in panel.get("panels", ()):
                    if not skip:
                        yield file, inner
                continue
            if not skip:
                yield file, panel


def test_every_dashboard_query_returns_data_after_the_demo(demo_run):
    out, prom, engine = demo_run
    # the demo lingers 3 s after its last step with its replicas still registered: look 2 s in
    at = demo_window(out)[1]
    empty = []
    checked = 0
    for file, panel in panels_to_check(engine):
        for t in panel.get("targets", []):
            if "expr" not in t:
                continue    # TraceQL: no Tempo here; test_dashboards covers what they constrain
            checked += 1
            if not query(prom, fill(t["expr"]), at):
                empty.append(f"{file}: {panel['title']}: {t['expr']}")
    for variable in build()["verl_trainer_v1_with_vllm_engine.json"]["templating"]["list"]:
        if variable["type"] == "query" and (engine == "vllm" or "vllm" not in variable["query"]["query"]):
            metric, label = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"]["query"]).groups()
            if "vllm" in metric and engine == "sglang":
                continue
            checked += 1
            if not query(prom, fill(f"count by ({label}) ({metric})"), at):
                empty.append(f"variable {variable['name']}")
    assert checked > 120
    assert empty == [], "\n".join(empty)


def test_percent_panels_stay_within_0_and_100_percent_over_the_whole_demo(demo_run):
    """Every value a percent panel shows stays in range, and so does what a clamp() would hide:
    a clamped query is checked without its clamp."""
    out, prom, engine = demo_run
    start, end = demo_window(out)
    checked = 0
    for file, panel in panels_to_check(engine):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit not in ("percentunit", "percent"):
            continue
        top = 1.0 if unit == "percentunit" else 100.0
        for t in panel["targets"]:
            expr = fill(t["expr"])
            clamp = re.fullmatch(r"clamp\((.*), 0, \d+\)", " ".join(expr.split()))
            values = query_range(prom, clamp.group(1) if clamp else expr, start, end)
            checked += 1
            assert values, f"{panel['title']}: no data for {expr}"
            assert all(-1e-9 <= v <= top + 1e-9 for v in values if v == v), (
                f"{panel['title']}: {min(values)} .. {max(values)} for {expr}")
    assert checked >= 10


def test_every_key_the_run_logged_and_every_transfer_queue_family_is_on_a_panel(demo_run):
    out, prom, engine = demo_run
    names = json.loads(http("GET", prom + "/api/v1/label/__name__/values")[1])["data"]
    logged = [n for n in names if n.startswith("rl_insight_monitor_") and
              query(prom, f'count({n}{{experiment_name="{EXPERIMENT}"}})', demo_window(out)[1])]
    served = [n for n in names if n.startswith("tq_") and not n.endswith("_created")] if engine == "vllm" else []
    assert len(logged) > 80 and (engine == "sglang" or len(served) > 15)
    dashboard = build()[f"verl_trainer_v1_with_{engine}_engine.json"]
    missing = [n for n in logged + served if not dashboard_shows(dashboard, n)]
    assert missing == []


def dashboard_shows(dashboard, name):
    """Whether a panel other than the catch-all for keys without a panel shows metric ``name``."""
    from verl_rl_insight.grafana.panels import every_panel

    family = re.sub(r"_(bucket|sum|count)$", "", name)
    for panel in every_panel(dashboard):
        if panel.get("title") == "Every other key the trainer logs":
            continue
        for t in panel.get("targets", []):
            text = t.get("expr", "")
            if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) or \
                    re.search(rf"(?<![\w:]){re.escape(family)}_(bucket|sum|count)(?![\w:])", text):
                return True
            if any(op == "=~" and re.fullmatch(regex, name) for op, regex in generate.NAME_MATCHER.findall(text)):
                return True
    return False
