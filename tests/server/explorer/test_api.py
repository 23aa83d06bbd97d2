"""The run explorer's JSON API (issue 33) and `rl-insight report`, against the real server with a
real Prometheus: the demo's run (verl's real run_ppo, its step dicts, spans and samples) through the
real path, and a real public verl run (tests/data/real_runs) pushed beside it. Each endpoint answers
what the stores hold: curves with a point per step, in step order, with the values logged (what
`runs export` reads back from Prometheus); the step pages name the slowest replica `timeline summary`
names; the findings are `diagnose`'s; samples need the token; hostile parameters get a 4xx naming
the field; the report is one private file holding the data and the page's assets."""

import csv
import html.parser
import json
import math
import os
import stat
import time
import urllib.parse

import pytest

from tests.helpers import http, require_prometheus, rl_insight, stack_prometheus, wait_for, write_server_config
from tests.server.stores.test_marks import REAL_RUN, wired
from verl_rl_insight.commands import report
from verl_rl_insight.contract import server_url
from verl_rl_insight.server.health import detectors

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

PROJECT = "rl-insight-demo"
EXPERIMENT = "explorer-test"
STEPS = 8
API = "/api/v1/explorer/"
TOKEN = "the-explorer-tests-token"
SERVER_CONFIG = {}  # the demo's server config file (the restart test starts the server again from it)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(hub URL, token, env): the demo's run, done, its server still up; and steps 0-209 of a real run."""
    require_prometheus()
    tmp = tmp_path_factory.mktemp("explorer")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}
    try:  # the stack is stopped also when the demo fails or runs past its time
        result = rl_insight(
            "demo", "--steps", str(STEPS), "--step-seconds", "1", "--config", str(path), "--experiment", EXPERIMENT,
            "--engine", "vllm", env=env, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        url = rl_insight("server", "url", "--local", env=env)
        assert url.returncode == 0, url.stderr
        base, token = server_url.split(url.stdout.strip())
        real_run_pushed(base, token, stack_prometheus(config["data_dir"], config["prometheus_port"]))
        assert token == TOKEN
        SERVER_CONFIG.update(path=str(path), data_dir=config["data_dir"], prometheus_port=config["prometheus_port"])
        yield base, token, {**env, "RL_INSIGHT_SERVER_URL": url.stdout.strip()}
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def real_run_pushed(base, token, prom):
    """A real verl run's steps 0-209 (its own logged dicts), 10 s apart by the trainer's clock, then finished."""
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
    start = time.time() - 10 * len(rows) - 60
    for i in range(0, len(rows), 30):
        batches = [
            {
                "project": PROJECT,
                "experiment_name": "real",
                "step": row["step"],
                "time": start + 10 * row["step"],
                "metrics": {detectors.series_name(k): v for k, v in row["data"].items() if wired(k, v)},
            }
            for row in rows[i : i + 30]
        ]
        status, body = http("POST", base + "/api/v1/push", json.dumps({"batches": batches}).encode(), auth(token))
        assert status == 200, body
    last = {
        "project": PROJECT,
        "experiment_name": "real",
        "time": time.time() - 30,
        "metrics": {"rl_insight_run_finished": 1},
    }
    assert http("POST", base + "/api/v1/push", json.dumps({"batches": [last]}).encode(), auth(token))[0] == 200

    def stored():
        query = urllib.parse.urlencode({"query": 'rl_insight_monitor_training_global_step{experiment_name="real"}'})
        status, body = http("GET", f"{prom}/api/v1/query?{query}")
        found = json.loads(body)["data"]["result"] if status == 200 else []
        return found and int(float(found[0]["value"][1])) == rows[-1]["step"]

    wait_for(stored, 60, what="the real run in Prometheus")


def auth(token):
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"} if token else {}


def get(base, what, token=None, **query):
    status, body = http("GET", base + API + what + "?" + urllib.parse.urlencode(query), headers=auth(token))
    return status, json.loads(body)


def test_the_runs_list_has_both_runs_newest_first_with_their_steps_and_state(demo):
    base, _, _ = demo
    status, answer = get(base, "runs")
    assert status == 200, answer
    rows = {(r["project"], r["experiment"]): r for r in answer["runs"]}
    assert rows[(PROJECT, EXPERIMENT)]["step"] == STEPS and rows[(PROJECT, "real")]["step"] == 210
    assert rows[(PROJECT, "real")]["state"] == "finished"
    assert rows[(PROJECT, EXPERIMENT)]["sparkline"]["key"] == "critic/score/mean"
    assert len(rows[(PROJECT, "real")]["sparkline"]["values"]) <= 100
    times = [r["last_step_time"] for r in answer["runs"] if r["last_step_time"] is not None]
    assert times == sorted(times, reverse=True)


def exported(demo, experiment, tmp_path):
    base, _, env = demo
    out = tmp_path / f"{experiment}.csv"
    result = rl_insight("runs", "export", "--project", PROJECT, "--experiment", experiment, "-o", str(out), env=env)
    assert result.returncode == 0, result.stderr
    return list(csv.DictReader(out.open()))


def curves_of(base, experiment):
    status, page = get(base, "run", project=PROJECT, experiment_name=experiment)
    assert status == 200, page
    drawn = [key for panel in page["panels"] for key in panel["keys"]][:64]
    assert {"critic/score/mean", "actor/entropy", "response_length/mean"} <= set(drawn)
    assert any(key.startswith("val-core/") for key in drawn)  # validation, logged every test_freq steps
    status, curves = get(base, "curves", project=PROJECT, experiment_name=experiment, keys=",".join(drawn))
    assert status == 200, curves
    assert curves["steps"] == sorted(set(curves["steps"]))
    return drawn, curves


def as_json(value):
    """A logged value as JSON carries it: NaN (and infinities) as null."""
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def test_curves_of_the_real_run_have_a_point_per_step_with_the_values_it_logged(demo):
    base, _, _ = demo
    drawn, curves = curves_of(base, "real")
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
    assert curves["steps"] == [row["step"] for row in rows]
    by_series = {detectors.series_name(k): k for row in rows for k in row["data"]}
    for key in drawn:
        logged = by_series[detectors.series_name(key)]
        assert curves["series"][key] == [as_json(row["data"].get(logged)) for row in rows], key


def test_curves_of_the_demo_run_have_a_point_per_step_with_the_values_prometheus_holds(demo, tmp_path):
    """Against `runs export` (read back from Prometheus): every step, and each value at its step. (A
    key logged at some steps only, validation, has there the value of its step: Prometheus also holds
    the hub's live copy of it at a scrape between two steps, which export gives the later step.)"""
    base, _, _ = demo
    drawn, curves = curves_of(base, EXPERIMENT)
    table = exported(demo, EXPERIMENT, tmp_path)
    assert curves["steps"] == [int(r["step"]) for r in table] == list(range(1, STEPS + 1))
    for key in drawn:
        column = detectors.series_name(key).removeprefix(detectors.PREFIX)
        logged = [float(r[column]) if r.get(column) else None for r in table]
        mine = curves["series"][key]
        if key.startswith("val-"):
            assert [x for x in mine if x is not None] and all(x is None or x == logged[i] for i, x in enumerate(mine))
        else:
            assert mine == logged, key


def test_the_run_pages_findings_are_diagnoses_and_the_card_needs_the_token(demo):
    base, token, env = demo
    for experiment in (EXPERIMENT, "real"):
        said = rl_insight("diagnose", "--project", PROJECT, "--experiment", experiment, "--json", env=env)
        assert said.returncode in (0, 1), said.stderr
        expected = [
            (f["detector"], f["severity"], f["first_step"], f["last_step"]) for f in json.loads(said.stdout)["findings"]
        ]
        status, page = get(base, "run", project=PROJECT, experiment_name=experiment)
        assert [(f["detector"], f["severity"], f["first_step"], f["last_step"]) for f in page["findings"]] == expected
    assert expected, "the real run has findings to compare"
    assert page["card"] is None and page["card_needs_token"] is True
    status, page = get(base, "run", token, project=PROJECT, experiment_name=EXPERIMENT)
    assert status == 200 and page["card_needs_token"] is False and page["card"]["experiment_name"] == EXPERIMENT
    assert page["others"] == ["real"]


def test_a_step_page_names_the_slowest_replica_timeline_summary_names(demo):
    base, _, env = demo
    said = rl_insight("timeline", "summary", "--project", PROJECT, "--experiment", EXPERIMENT, "--json", env=env)
    assert said.returncode == 0, said.stderr
    rows = {r["step"]: r for r in json.loads(said.stdout)["steps"]}
    assert len(rows) >= STEPS - 1
    throttled = []
    for step, row in rows.items():
        status, page = get(base, "step", project=PROJECT, experiment_name=EXPERIMENT, step=step)
        assert status == 200, page
        slowest = page["slowest_replica"]["lane"] if page["slowest_replica"] else None
        assert slowest == row["slowest_replica"], step
        replicas = [lane for lane in page["lanes"] if lane["kind"] == "replica"]
        assert len(replicas) == 2 and all(lane["spans"] for lane in replicas)  # the demo's 2 replicas' calls
        assert page["lanes"][0]["lane"] == "trainer" and page["start"] < page["end"]
        assert page["long_tail_s"] == pytest.approx(row["tail_wait_s"])
        assert page["finished"] and page["profile_command"] is None  # the demo finished: no coming step
        nodes = {lane["node"] for lane in page["lanes"] if lane["node"]}
        assert nodes and {gpu["node"] for gpu in page["hardware"]} <= nodes  # named as the swimlane names it
        throttled += [(gpu["throttle"], gpu["throttle_reasons"]) for gpu in page["hardware"]]
    # the demo's simulated GPUs report clock throttle reason 4 (NVML's, as DCGM names it), sampled every
    # second: nvidia-smi's "SW Power Cap"
    reason = ({"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4.0}, ["SW Power Cap"])
    assert throttled and all(t == reason for t in throttled), throttled


def test_samples_need_the_token_and_with_it_are_the_steps_samples(demo):
    base, token, env = demo
    status, answer = get(base, "samples", project=PROJECT, experiment_name=EXPERIMENT, step=STEPS)
    assert status == 401 and "token" in answer["error"]
    status, answer = get(base, "samples", token, project=PROJECT, experiment_name=EXPERIMENT, step=STEPS)
    assert status == 200, answer
    said = rl_insight(
        "samples", "--project", PROJECT, "--experiment", EXPERIMENT, "--step", str(STEPS), "--json", env=env
    )
    assert said.returncode == 0, said.stderr
    expected = [(r["kind"], r["rank"], r["prompt"], r["response"]) for r in json.loads(said.stdout)["samples"]]
    assert expected and [(r["kind"], r["rank"], r["prompt"], r["response"]) for r in answer["samples"]] == expected


@pytest.mark.parametrize(
    ("what", "query", "field"),
    [
        ("run", {"project": PROJECT}, "experiment_name"),
        ("run", {"project": "p\x00", "experiment_name": "e"}, "project"),
        ("run", {"project": "x" * 300, "experiment_name": "e"}, "project"),
        ("curves", {"project": PROJECT, "experiment_name": EXPERIMENT}, "keys"),
        ("curves", {"project": PROJECT, "experiment_name": EXPERIMENT, "keys": ",".join(["k"] * 65)}, "keys"),
        ("curves", {"project": PROJECT, "experiment_name": EXPERIMENT, "keys": "a\nb"}, "keys"),
        ("curves", {"project": PROJECT, "experiment_name": EXPERIMENT, "keys": "a", "steps": "9:1"}, "steps"),
        ("curves", {"project": PROJECT, "experiment_name": EXPERIMENT, "keys": "a", "steps": "x"}, "steps"),
        ("step", {"project": PROJECT, "experiment_name": EXPERIMENT, "step": "-1"}, "step"),
        ("step", {"project": PROJECT, "experiment_name": EXPERIMENT, "step": "1e99"}, "step"),
        ("step", {"project": PROJECT, "experiment_name": EXPERIMENT, "step": "99999"}, "step"),
        ("step", {"project": PROJECT, "experiment_name": "no-such-run", "step": "1"}, "step"),
        ("run", {"project": PROJECT, "experiment_name": "no-such-run"}, "experiment_name"),
    ],
)
def test_hostile_parameters_get_a_4xx_naming_the_field(demo, what, query, field):
    base, token, _ = demo
    status, answer = get(base, what, token, **query)
    assert 400 <= status < 500 and answer["error"].startswith(field + ":"), (status, answer)


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources, self.scripts = [], []

    def handle_starttag(self, tag, attrs):
        """What a browser would load: scripts, styles, images, frames (a link to follow is no load)."""
        if tag in ("script", "link", "img", "iframe", "source"):
            self.sources += [value for name, value in attrs if name in ("src", "href") and value]

    def handle_data(self, data):
        if self.lasttag == "script":
            self.scripts.append(data)


def test_report_writes_one_private_file_with_the_data_and_the_pages_assets(demo, tmp_path):
    base, token, env = demo
    out = tmp_path / "run.html"
    result = rl_insight(
        "report", "--project", PROJECT, "--experiment", "real", "--compare", EXPERIMENT, "-o", str(out), env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1 and "211 steps" in result.stdout and str(out) in result.stdout
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    text = out.read_text()
    page = Page()
    page.feed(text)
    assert all(s.startswith("data:") for s in page.sources), "the report loads nothing: every script, style inside"
    [data] = [s for s in page.scripts if s.startswith("window.RL_INSIGHT_REPORT = ")]
    data = json.loads(data.removeprefix("window.RL_INSIGHT_REPORT = ").removesuffix(";"))
    status, score = get(base, "curves", project=PROJECT, experiment_name="real", keys="critic/score/mean")
    assert (
        data["curves"]["steps"] == score["steps"]
        and data["curves"]["series"]["critic/score/mean"] == score["series"]["critic/score/mean"]
    )
    findings = data["run"]["findings"]
    assert findings and {str(f["first_step"]) for f in findings} <= set(data["steps"])
    assert "samples" not in data and EXPERIMENT in data["compare"]
    for name in report.asset_names():
        if name.endswith((".js", ".css")):
            assert report.asset(name).strip()[:200].replace("</script", "<\\/script") in text, name


def test_report_steps_and_samples_only_when_asked(demo, tmp_path):
    base, token, env = demo
    out = tmp_path / "steps.html"
    wanted = ("--project", PROJECT, "--experiment", EXPERIMENT, "--steps", "3:6", "--samples", "-o", str(out))
    result = rl_insight("report", *wanted, env=env)
    assert result.returncode == 0, result.stderr
    page = Page()
    page.feed(out.read_text())
    [data] = [s for s in page.scripts if s.startswith("window.RL_INSIGHT_REPORT = ")]
    data = json.loads(data.removeprefix("window.RL_INSIGHT_REPORT = ").removesuffix(";"))
    assert data["curves"]["steps"] == [3, 4, 5, 6]
    assert set(data["samples"]) == set(data["steps"]) and all(3 <= int(step) <= 6 for step in data["steps"])
    for step, answer in data["samples"].items():
        assert answer == get(base, "samples", token, project=PROJECT, experiment_name=EXPERIMENT, step=step)[1]


def test_the_pages_assets_are_in_the_package_for_the_report_to_inline():
    names = report.asset_names()
    assert "explorer.html" in names, "the page's assets are missing from verl_rl_insight/server/explorer/static/"
    assert any(n.endswith(".js") for n in names) and any(n.endswith(".css") for n in names), names
    page = report.html({"runs": {"runs": []}})
    assert "/static/explorer/" not in page and "window.RL_INSIGHT_REPORT = " in page


def test_report_escapes_a_response_that_closes_the_script():
    data = {"samples": {"1": {"samples": [{"response": "</script><script>alert(1)</script><!--"}]}}}
    text = report.data_json(data)
    assert "</script" not in text and "<!--" not in text and json.loads(text) == data


def test_a_page_of_a_run_nobody_logged_costs_prometheus_one_request_not_a_range_query_per_window(demo):
    """Anyone may ask for any name: the explorer asks its Prometheus whether it holds the run (its
    index), and only then reads it back window by window (35 days in windows of 2 h: 420 queries)."""
    from verl_rl_insight.server.explorer.prometheus import PrometheusReader

    parts = urllib.parse.urlsplit(stack_prometheus(SERVER_CONFIG["data_dir"], SERVER_CONFIG["prometheus_port"]))
    login = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password))
    reader = PrometheusReader(f"http://127.0.0.1:{parts.port}", login)
    queries = []
    samples = reader.samples
    reader.samples = lambda promql: (queries.append(promql), samples(promql))[1]
    assert reader.run_steps(PROJECT, "nobody-logged-this", time.time()) == ([], None)
    assert queries == []
    steps, finished = reader.run_steps(PROJECT, "real", time.time())  # a run it holds: read back whole
    assert [s for s, _, _ in steps] == list(range(0, 211)) and finished == 1 and queries
    base = demo[0]
    started = time.monotonic()
    for n in range(20):  # what a stranger's loop of made-up names costs the server now
        status, answer = get(base, "run", project=PROJECT, experiment_name=f"made-up-{n}")
        assert status == 404 and "experiment_name" in answer["error"], answer
    print(f"20 pages of made-up runs: {time.monotonic() - started:.2f} s")


def test_after_a_restart_the_curves_are_read_back_from_prometheus(demo, tmp_path):
    """The server forgets its step table when it stops; the run it has not carried since is read
    back from its Prometheus, step by step, with the same values."""
    base, token, env = demo
    config = SERVER_CONFIG["path"]
    before = get(base, "curves", project=PROJECT, experiment_name="real", keys="critic/score/mean,actor/entropy")[1]
    assert rl_insight("server", "stop", env=env, timeout=60).returncode == 0
    started = rl_insight("server", "start", "--detach", "--config", config, env=env, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for(lambda: http("GET", base + "/-/ready")[0] == 200, 60, what="the server back")
    # the runs list, before any run page is read back: each run with its newest step, not a blank
    rows = {(r["project"], r["experiment"]): r for r in get(base, "runs")[1]["runs"]}
    assert rows[(PROJECT, EXPERIMENT)]["step"] == STEPS and rows[(PROJECT, "real")]["step"] == 210, rows
    status, after = get(base, "curves", project=PROJECT, experiment_name="real", keys="critic/score/mean,actor/entropy")
    assert status == 200, after
    assert after["steps"] == before["steps"] and after["series"] == before["series"]
    status, page = get(base, "run", project=PROJECT, experiment_name="real")
    assert page["state"] == "finished" and page["findings"]
