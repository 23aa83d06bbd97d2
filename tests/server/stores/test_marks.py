"""Marks on a run's steps (``rl-insight runs mark``): kept by the server (0600, through a restart),
written by the token or by that run's own credential only, hostile text refused naming the field
while the scrape still parses, drawn on the dashboards by a Prometheus annotation that a real
Prometheus answers with the step's time, and with ``--reset-baseline`` a planned score change at
the mark is no finding in ``diagnose``.

The steps pushed are a real verl run's (``tests/data/real_runs``, verl's ``file`` logger format)."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import Prometheus, free_port, http, push, rl_insight, start_hub_process, stop_group, wait_for
from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.errors import OverCapacity
from verl_rl_insight.contract.marks import MARK_METRIC, MAX_MARK_TEXT
from verl_rl_insight.dashboards import DASHBOARDS_DIR
from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.http_server import HttpServer
from verl_rl_insight.server.api.parts import ApiParts
from verl_rl_insight.server.app import step_time_in
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.stores.marks import MarkStore, WriteRate

TOKEN = "the-servers-own-token"
REAL_RUN = Path(__file__).parents[2] / "data" / "real_runs" / "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp.jsonl"  # steps 0-210


def real_steps(first=1, count=5, start=None):
    """Batches of a real verl run's steps (what its trainer logged, as the hub's wire carries them),
    one a minute by the trainer's clock ending now."""
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()]
    start = time.time() - 60 * count if start is None else start
    return [
        {
            "project": "p",
            "experiment_name": "e",
            "step": step,
            "time": start + 60 * i,
            "metrics": {detectors.series_name(k): v for k, v in rows[step]["data"].items() if wired(k, v)},
        }
        for i, step in enumerate(range(first, first + count))
    ]


def wired(key, value):
    """A logged key the hub's wire carries as a metric: verl's ``training/global_step`` goes as the
    batch's ``step``, and orjson's null (a NaN) is left out."""
    return value is not None and key != "training/global_step"


def mark_body(**fields):
    return json.dumps({"project": "p", "experiment_name": "e", "step": 3, "text": "data stage 2", **fields}).encode()


@pytest.fixture
def api(tmp_path):
    marks = MarkStore(tmp_path / "marks.json")
    hub = MetricHub(listeners=(marks.observe,), collectors=(marks,))  # as the server wires them (compose.py)
    api = Api(ApiParts(hub, token=TOKEN, marks=marks))
    server = HttpServer(api, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{server.port}", hub
    server.stop()
    api.close()


def post(url, body, credential=TOKEN):
    headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
    status, answer = http("POST", url + "/api/v1/runs/marks", body=body, headers=headers)
    return status, json.loads(answer)


def scrape(url):
    status, body = http("GET", url + "/metrics")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_a_mark_made_with_the_token_is_listed_by_the_cli_survives_a_restart_and_its_file_is_0600(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": TOKEN}
    process = start_hub_process(port, tmp_path, token=TOKEN)
    try:
        steps = real_steps()
        assert push(url, {"batches": steps}, token=TOKEN)[0] == 200
        made = rl_insight(
            "runs", "mark", "--project", "p", "--experiment", "e", "--step", "3", "--text", "data stage 2",
            "--reset-baseline", env=env,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(steps[2]["time"]))
        assert made.stdout == (
            'marked step 3 of p/e: "data stage 2"; the detectors start their baselines again here; '
            f"on the dashboards at {when}\n"
        )
        refused = rl_insight(
            "runs", "mark", "--project", "p", "--experiment", "e", "--step", "4", "--text", "x",
            env={**env, "RL_INSIGHT_TOKEN": "not-the-token"},
        )  # fmt: skip
        assert refused.returncode != 0 and "401" in refused.stderr
    finally:
        stop_group(process)
    kept = tmp_path / "data" / "marks.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    process = start_hub_process(port, tmp_path, token=TOKEN)
    try:
        listed = rl_insight("runs", "marks", "--project", "p", "--experiment", "e", env=env)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines() == [
            "STEP  RESET  STEP TIME                TEXT",
            f"3     yes    {when}  data stage 2",
        ]
        # and the restarted hub exposes it again, at the step's trainer time (ms)
        (sample,) = scrape(url)[MARK_METRIC].samples
        assert sample.value == int(steps[2]["time"] * 1000)
        assert sample.labels == {
            "project": "p",
            "experiment_name": "e",
            "mark": "data stage 2",
            "step": "3",
            "reset_baseline": "true",
        }
    finally:
        stop_group(process)


def test_a_damaged_marks_file_is_moved_aside_and_named_in_the_log(tmp_path, caplog):
    path = tmp_path / "marks.json"
    path.write_text('{"marks": [{"project": "p", "experiment_name"')  # cut off mid-write by a crash
    store = MarkStore(path)
    assert store.of_run("p", "e") == {"marks": []}
    (aside,) = tmp_path.glob("marks.json.damaged-*")
    assert str(aside) in caplog.text and not path.exists()


def test_a_run_credential_marks_its_own_run_and_gets_403_for_another(api):
    url, _ = api
    mine = run_credential.mint(TOKEN, "p", "e")
    status, answer = post(url, mark_body(), credential=mine)
    assert status == 200, answer
    status, answer = post(url, mark_body(experiment_name="other"), credential=mine)
    assert status == 403 and "p/e only" in answer["error"], answer
    headers = {"Authorization": f"Bearer {mine}"}
    status, _ = http("DELETE", url + "/api/v1/runs/marks?project=p&experiment_name=other&step=3", headers=headers)
    assert status == 403
    status, body = http("GET", url + "/api/v1/runs/marks?project=p&experiment_name=other")
    assert status == 200 and json.loads(body) == {"marks": []}  # nothing written to the other run
    status, _ = http("DELETE", url + "/api/v1/runs/marks?project=p&experiment_name=e&step=3", headers=headers)
    assert status == 200  # its own run's mark it may remove


def test_deleting_a_run_removes_its_marks_and_they_leave_the_scrape(api):
    url, _ = api
    assert push(url, {"batches": real_steps()}, token=TOKEN)[0] == 200
    assert post(url, mark_body())[0] == 200
    assert MARK_METRIC in scrape(url)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    status, body = http("DELETE", url + "/api/v1/runs?project=p&experiment_name=e", headers=headers)
    assert status == 200 and json.loads(body)["marks"] == 1
    assert MARK_METRIC not in scrape(url)
    assert json.loads(http("GET", url + "/api/v1/runs/marks?project=p&experiment_name=e")[1]) == {"marks": []}


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"text": "\x1b[2J\x1b[31mcollapse"}, "text"),  # a terminal escape
        ({"text": "line one\nline two"}, "text"),
        ({"text": "\u202eevil"}, "text"),  # bidirectional override: the terminal shows it reversed
        ({"text": "x" * 100_000}, "text"),  # 100 kB
        ({"text": ""}, "text"),
        ({"text": None}, "text"),
        ({"step": -1}, "step"),
        ({"step": 2.5}, "step"),
        ({"step": "3"}, "step"),
        ({"colour": "red"}, "colour"),
        ({"project": "p\x00"}, "project"),
    ],
)
def test_hostile_input_is_a_400_naming_the_field(api, fields, named):
    url, _ = api
    status, answer = post(url, mark_body(**fields))
    assert status == 400 and named in answer["error"], answer


def test_a_missing_text_is_named_and_a_body_beyond_the_limit_is_a_413(api):
    url, _ = api
    status, answer = post(url, json.dumps({"project": "p", "experiment_name": "e", "step": 3}).encode())
    assert status == 400 and answer["error"] == "text must be given"
    status, answer = post(url, mark_body(text="x" * 200_000))
    assert status == 413, answer


def test_text_that_is_printable_but_awkward_reaches_the_scrape_exactly_and_the_scrape_parses(api):
    url, hub = api
    assert push(url, {"batches": real_steps()}, token=TOKEN)[0] == 200
    awkward = 'he said "stop" \\n {a="b"} # TYPE x counter '
    awkward += "é" * (MAX_MARK_TEXT - len(awkward))
    status, answer = post(url, mark_body(text=awkward))
    assert status == 200, answer
    for named in (None, "test-scraper"):  # the live body and a named scraper's
        suffix = f"?scraper={named}" if named else ""
        status, body = http("GET", url + "/metrics" + suffix, headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        (sample,) = families[MARK_METRIC].samples
        assert sample.labels["mark"] == awkward
        assert "rl_insight_monitor_training_global_step" in families  # the rest of the body is intact


def test_a_mark_ahead_of_the_run_is_drawn_once_its_step_arrives_at_that_steps_time(api):
    url, _ = api
    steps = real_steps(count=6)
    assert push(url, {"batches": steps[:2]}, token=TOKEN)[0] == 200
    status, answer = post(url, mark_body(step=5, text="curriculum: longer prompts"))
    assert status == 200 and answer["time"] is None
    assert MARK_METRIC not in scrape(url)
    assert push(url, {"batches": steps[2:]}, token=TOKEN)[0] == 200
    (sample,) = scrape(url)[MARK_METRIC].samples
    assert sample.value == int(steps[4]["time"] * 1000) and sample.labels["step"] == "5"


def test_marks_are_bounded_per_run_and_one_more_is_a_422(tmp_path):
    store = MarkStore(tmp_path / "marks.json", max_per_run=3, max_total=5)
    for step in range(3):
        store.add(mark_body(step=step))
    store.add(mark_body(step=2, text="replaced"))  # the same step again replaces its mark
    with pytest.raises(OverCapacity, match="runs unmark"):
        store.add(mark_body(step=9))
    assert [m["text"] for m in store.of_run("p", "e")["marks"]] == ["data stage 2", "data stage 2", "replaced"]


def test_marks_count_against_the_servers_memory_bound_and_one_beyond_it_is_a_422(tmp_path):
    hub = MetricHub(memory_limit_bytes=100_000)  # others may hold a quarter of it: 25 kB
    store = MarkStore(tmp_path / "marks.json", book=lambda nbytes: hub.book_other("marks", nbytes))
    store.rate = WriteRate(per_run=10_000, burst=10_000)  # the memory bound is what this test reaches
    for step in range(5):
        store.add(mark_body(step=step, text="x" * MAX_MARK_TEXT))
    assert hub.summary()["memory_booked_by_others"]["marks"] > 5 * 5 * MAX_MARK_TEXT
    with pytest.raises(OverCapacity, match="memory_limit_mb"):
        for step in range(5, 100):
            store.add(mark_body(step=step, text="x" * MAX_MARK_TEXT))
    held = len(store.of_run("p", "e")["marks"])
    assert 5 < held < 100
    store.forget("p", "e")
    assert hub.summary()["memory_booked_by_others"]["marks"] == 0


def annotation():
    board = json.loads((DASHBOARDS_DIR / "verl_trainer_v1_with_vllm_engine.json").read_text())
    (found,) = [a for a in board["annotations"]["list"] if a["name"] == "marks"]
    return found


def test_the_marks_annotation_is_in_the_generated_dashboards_and_promtool_parses_it(tmp_path):
    for file in ("verl_trainer_v1_with_vllm_engine.json", "verl_trainer_v1_with_sglang_engine.json"):
        names = [a["name"] for a in json.loads((DASHBOARDS_DIR / file).read_text())["annotations"]["list"]]
        assert "marks" in names, file
    found = annotation()
    assert found["useValueForTime"] is True and MARK_METRIC in found["expr"]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus has it; .ci/run installs it)")
    rules = tmp_path / "rules.yml"
    rules.write_text(json.dumps({"groups": [{"name": "g", "rules": [{"record": "r", "expr": found["expr"]}]}]}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_real_prometheus_answers_the_annotation_query_with_the_marked_steps_time(tmp_path):
    """What Grafana does with the annotation: a range query over the dashboard's time, each
    sample's value the time to draw the mark at (useValueForTime)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_hub_process(port, tmp_path)  # on loopback, no token: the test Prometheus scrapes as is
    prometheus = None
    try:
        steps = real_steps(count=4)
        assert push(url, {"batches": steps}, token=TOKEN)[0] == 200
        assert post(url, mark_body(step=2, text='stage "2" \\ begins'))[0] == 200
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])
        expr = annotation()["expr"].replace("$project", "p").replace("$experiment_name", "e")
        wait_for(lambda: prometheus.query(expr), 20, what="the mark in Prometheus")
        now = time.time()
        (series,) = prometheus.query_range(expr, now - 30, now, step="5s")
        assert series["metric"]["mark"] == 'stage "2" \\ begins' and series["metric"]["step"] == "2"
        assert {float(v) for _, v in series["values"]} == {int(steps[1]["time"] * 1000)}
        # where the hub no longer holds a step (a restart), the server reads its time from Prometheus
        wait_for(lambda: prometheus.query('rl_insight_monitor_training_global_step{project="p"} == 4'), 20)
        assert [step_time_in(prometheus.url, "p", "e", s["step"]) for s in steps] == [s["time"] for s in steps]
        assert step_time_in(prometheus.url, "p", "e", 5) is None
        # and diagnose lists the run's marks with its findings
        said = rl_insight(
            "diagnose", "--project", "p", "--experiment", "e", "--server", url, "--prometheus", prometheus.url
        )
        assert said.returncode == 0, said.stderr
        assert said.stdout.startswith("p/e (steps 1-4): no finding")
        assert said.stdout.endswith('\n\nmarks (1, rl-insight runs marks):\n  step 2: stage "2" \\ begins\n')
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)


PLANNED = 120  # the step at which the (made-up) curriculum moves on to harder data


def shifted_history(at, factor):
    """A real verl run's history with its score scaled by ``factor`` from step ``at`` on: a planned
    switch to harder data (a curriculum stage) as the detectors see it."""
    history = {}
    for line in REAL_RUN.read_text().splitlines():
        row = json.loads(line)
        for key, value in row["data"].items():
            if not wired(key, value):
                continue
            if row["step"] >= at and key in ("critic/score/mean", "critic/rewards/mean"):
                value *= factor
            history.setdefault(detectors.series_name(key), []).append((row["step"], float(value)))
    return history


def shifted_batches(at, factor, count=211, step_s=5.0):
    """The first ``count`` steps of the real run, scaled from ``at`` on, as batches ``step_s`` apart
    ending now (the time compressed, as the health corpus pushes it), then its ``finish()``."""
    history = shifted_history(at, factor)
    rows = [json.loads(line) for line in REAL_RUN.read_text().splitlines()][:count]
    by_step = {name: dict(series) for name, series in history.items()}
    start = time.time() - step_s * count
    batches = [
        {
            "project": "p",
            "experiment_name": "e",
            "step": row["step"],
            "time": start + step_s * i,
            "metrics": {name: values[row["step"]] for name, values in by_step.items() if row["step"] in values},
        }
        for i, row in enumerate(rows)
    ]
    end = {
        "project": "p",
        "experiment_name": "e",
        "time": start + step_s * count,
        "metrics": {"rl_insight_run_finished": 1},
    }
    return [*batches, end]


def test_with_reset_baseline_a_planned_score_change_at_the_mark_is_not_a_finding_in_diagnose(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_hub_process(port, tmp_path)
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, [f"127.0.0.1:{port}"])  # scraping before the run's first step
        batches = shifted_batches(PLANNED, 0.4)
        for i in range(0, len(batches), 50):
            assert push(url, {"batches": batches[i : i + 50]})[0] == 200
        wait_for(
            lambda: prometheus.query(
                'count_over_time(rl_insight_monitor_training_global_step{project="p"}[1h]) >= 211'
            ),
            30,
        )

        def diagnose():
            said = rl_insight(
                "diagnose", "--project", "p", "--experiment", "e", "--server", url, "--prometheus", prometheus.url,
                "--json",
            )  # fmt: skip
            assert said.returncode in (0, 1), said.stderr
            return [(f["detector"], f["first_step"]) for f in json.loads(said.stdout)["findings"]]

        collapses = [step for detector, step in diagnose() if detector == "reward_collapse"]
        assert len(collapses) == 1 and PLANNED <= collapses[0] <= PLANNED + 5  # unmarked, it reads as a collapse
        assert post(url, mark_body(step=PLANNED, text="data stage 2: harder problems", reset_baseline=True))[0] == 200
        assert [f for f in diagnose() if f[0] == "reward_collapse"] == []
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_group(process)


def test_a_reset_mark_made_ahead_restarts_the_live_detectors_there_so_the_planned_change_is_no_online_finding(
    tmp_path,
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_hub_process(port, tmp_path)
    try:
        assert post(url, mark_body(step=PLANNED, text="data stage 2", reset_baseline=True))[0] == 200  # before the run
        for experiment in ("e", "unmarked"):
            batches = [{**b, "experiment_name": experiment} for b in shifted_batches(PLANNED, 0.4)]
            for i in range(0, len(batches), 50):
                assert push(url, {"batches": batches[i : i + 50]})[0] == 200
        counts = {
            (s.labels["experiment_name"], s.labels["detector"]): s.value
            for s in scrape(url)["rl_insight_health_findings_total"].samples
        }
        assert counts.get(("unmarked", "reward_collapse"), 0.0) > 0  # without the mark: a collapse at step 200
        assert counts.get(("e", "reward_collapse"), 0.0) == 0.0, counts
    finally:
        stop_group(process)
