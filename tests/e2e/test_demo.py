"""`rl-insight demo` end to end (shortened): the server with a real Prometheus, the SIMULATED run
through verl's real run_ppo and the real patches, then every PromQL query of the dashboards,
with its variables filled, returns data from that Prometheus."""

import datetime
import json
import re
import urllib.parse

import pytest

from tests.helpers import http, range_query, require_prometheus, rl_insight, stack_prometheus, write_server_config
from verl_rl_insight.dashboards import generate
from verl_rl_insight.dashboards.build import build

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

EXPERIMENT = "demo-test"


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def demo_run(request, tmp_path_factory):
    engine = request.param
    require_prometheus()
    tmp = tmp_path_factory.mktemp("demo")
    path, config = write_server_config(tmp, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}})
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}  # the demo's hardware stays on
    try:  # the stack is stopped also when the demo fails or runs past its time
        result = rl_insight(
            "demo",
            "--steps",
            "8",
            "--step-seconds",
            "1",
            "--config",
            str(path),
            "--experiment",
            EXPERIMENT,
            "--engine",
            engine,
            *(["--no-transfer-queue"] if engine == "sglang" else []),
            env=env,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        yield result.stdout, stack_prometheus(config["data_dir"], config["prometheus_port"]), engine, env, result.stderr
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def test_demo_says_it_is_a_simulation_and_where_to_look(demo_run):
    out, prom, engine, _, err = demo_run
    assert f"2 simulated {engine} replicas" in out
    assert "SIMULATED verl run" in out and "This was a SIMULATION" in out
    shown = "http://" + prom.rpartition("@")[2]  # the demo prints the address, not the login
    links = re.findall(rf"({re.escape(shown)}/\S+)", out)  # the graph and the alerts page: both open
    assert len(links) == 2 and all(http("GET", link.replace(shown, prom))[0] == 200 for link in links), links
    assert "g0.expr=rl_insight_monitor_critic_score_mean%7Bproject%3D%22rl-insight-demo%22" in links[0]
    assert "password: rl-insight server url --prometheus" in out
    assert "SIMULATED step 8/8 [##############################]" in out
    # not a terminal here: a progress line per quarter of the run, not one per step
    assert len(re.findall(r"SIMULATED step \d+/8 ", out)) <= 5
    assert f"rl-insight watch --project rl-insight-demo --experiment {EXPERIMENT}" in out
    assert f"rl-insight timeline export --project rl-insight-demo --experiment {EXPERIMENT} -o trace.json" in out
    # no Tempo here: spans go to the server, and no exporter error is printed per batch
    assert "Failed to export" not in out + err and "cannot send timeline spans" not in out + err


PHASES = (
    "step",
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "update_weights",
)


def test_the_timeline_of_a_demo_without_tempo_exports_as_a_chrome_trace(demo_run, tmp_path):
    out, _, engine, env, _ = demo_run
    path = tmp_path / "trace.json"
    exported = rl_insight(
        "timeline", "export", "--project", "rl-insight-demo", "--experiment", EXPERIMENT, "-o", str(path), env=env
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "open it in https://ui.perfetto.dev" in exported.stdout
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    for event in events:  # the trace-event format: what Perfetto and chrome://tracing need of each event
        assert event["ph"] in ("X", "M") and isinstance(event["name"], str)
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert event["ts"] >= 0 and event["dur"] >= 0
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    trainer = [e for e in spans if tracks[e["tid"]] == "trainer"]
    for step in range(1, 9):  # every trainer phase of every step, with its step
        assert {e["args"]["state_name"] for e in trainer if e["args"].get("step") == step} >= set(PHASES), step
    replicas = {
        tracks[e["tid"]].split(" #")[0]
        for e in spans
        if e["name"] == "rollout generate" and tracks[e["tid"]] != "trainer"
    }
    assert replicas == {"replica_0", "replica_1"}
    for tid in tracks:  # events of one track nest: each starts after the last one ended or ends inside it
        open_ends = []
        for e in sorted((e for e in spans if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + 1e-3, (tracks[tid], e)
            open_ends.append(e["ts"] + e["dur"])
    steps = [e for e in trainer if e["args"]["state_name"] == "step"]
    for phase in (e for e in trainer if e["args"]["state_name"] == "gen"):  # phases inside their step
        [parent] = [s for s in steps if s["args"]["step"] == phase["args"]["step"]]
        assert parent["ts"] <= phase["ts"] and phase["ts"] + phase["dur"] <= parent["ts"] + parent["dur"] + 1e-3

    only = tmp_path / "steps.json"
    assert (
        rl_insight(
            "timeline",
            "export",
            "--project",
            "rl-insight-demo",
            "--experiment",
            EXPERIMENT,
            "--steps",
            "3:4",
            "-o",
            str(only),
            env=env,
        ).returncode
        == 0
    )
    kept = {e["args"].get("step") for e in json.loads(only.read_text())["traceEvents"] if e["ph"] == "X"}
    assert kept == {3, 4}


def fill(expr):
    for name, value in (
        ("$project", "rl-insight-demo"),
        ("$experiment_name", EXPERIMENT),
        ("$replica", ".*"),
        ("$node", ".*"),
        ("$gpu", ".*"),
        ("$__rate_interval", "20s"),
    ):
        expr = expr.replace(name, value)
    return expr


def query(prom, promql, at):
    status, body = http("GET", prom + "/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": at}))
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def query_range(prom, promql, start, end):
    return [float(v) for series in range_query(prom, promql, start, end) for _, v in series["values"]]


def demo_window(out):
    """(start, end) of the run: the first and the last step's clock time, plus the linger."""
    stamps = re.findall(r"SIMULATED step \d+/\d+ \[[#.]+\] (\d\d:\d\d:\d\d)", out)
    day = datetime.date.today()
    first, last = (
        datetime.datetime.combine(day, datetime.time.fromisoformat(t)).timestamp() for t in (stamps[0], stamps[-1])
    )
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
    """Every query runs against the real Prometheus and selects series: the demo gives the keys
    verl's workers log (which need a GPU) simulated values, so this checks the queries and the
    labels, not which keys exist; that is judged on what verl's own functions compute (below)."""
    out, prom, engine, _, _ = demo_run
    # the demo lingers 3 s after its last step with its replicas still registered: look 2 s in
    at = demo_window(out)[1]
    empty = []
    checked = 0
    for file, panel in panels_to_check(engine):
        for t in panel.get("targets", []):
            if "expr" not in t:
                continue  # TraceQL: no Tempo here; test_dashboards covers what they constrain
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
    out, prom, engine, _, _ = demo_run
    start, end = demo_window(out)
    checked = 0
    for _file, panel in panels_to_check(engine):
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
                f"{panel['title']}: {min(values)} .. {max(values)} for {expr}"
            )
    assert checked >= 10


def test_every_key_the_run_logged_and_every_transfer_queue_family_is_on_a_panel(demo_run):
    out, prom, engine, _, _ = demo_run
    names = json.loads(http("GET", prom + "/api/v1/label/__name__/values")[1])["data"]
    logged = [
        n
        for n in names
        if n.startswith("rl_insight_monitor_")
        and query(prom, f'count({n}{{experiment_name="{EXPERIMENT}"}})', demo_window(out)[1])
    ]
    served = [n for n in names if n.startswith("tq_") and not n.endswith("_created")] if engine == "vllm" else []
    assert len(logged) > 80 and (engine == "sglang" or len(served) > 15)
    dashboard = build()[f"verl_trainer_v1_with_{engine}_engine.json"]
    missing = [n for n in logged + served if not dashboard_shows(dashboard, n)]
    assert missing == []


def dashboard_shows(dashboard, name):
    """Whether a panel other than the catch-all for keys without a panel shows metric ``name``."""
    from verl_rl_insight.dashboards.panels import every_panel

    family = re.sub(r"_(bucket|sum|count)$", "", name)
    for panel in every_panel(dashboard):
        if panel.get("title") == "Every other key the trainer logs":
            continue
        for t in panel.get("targets", []):
            text = t.get("expr", "")
            if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) or re.search(
                rf"(?<![\w:]){re.escape(family)}_(bucket|sum|count)(?![\w:])", text
            ):
                return True
            if any(op == "=~" and re.fullmatch(regex, name) for op, regex in generate.NAME_MATCHER.findall(text)):
                return True
    return False


def test_the_demo_timeline_has_the_long_tail_a_real_run_has(demo_run):
    """Several generate calls per replica per step with long-tailed lengths, and a straggler that
    holds some step back: what `rl-insight timeline summary` then reports."""
    from verl_rl_insight.commands.demo.simulation import CALLS_PER_STEP

    _, _, _, env, _ = demo_run
    result = rl_insight(
        "timeline", "summary", "--project", "rl-insight-demo", "--experiment", EXPERIMENT, "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    steps = {s["step"]: s for s in json.loads(result.stdout)["steps"]}
    assert sorted(steps) == list(range(1, 9))
    assert all(s["generate_calls"] == 2 * CALLS_PER_STEP for s in steps.values())
    tails = {n: s["long_tail_ratio"] for n, s in steps.items()}
    assert max(tails.values()) > 3, tails  # some step is held back by one call
    assert min(tails.values()) < max(tails.values()) / 1.5, tails  # and not every step alike


def test_every_key_verls_own_functions_compute_is_on_a_panel_that_shows_it(demo_run):
    """Judged on what verl computes, not on the catalogue: verl's own metric functions
    (compute_data_metrics, compute_timing_metrics, compute_throughout_metrics, the rollout-correction
    metrics) run here on a batch shaped like the demo's; every key they return reached Prometheus
    through the demo, and a panel other than the catch-all shows it with data."""

    from verl_rl_insight.commands.demo.simulation import verl_metrics
    from verl_rl_insight.commands.demo.verl_step import rollout_batch
    from verl_rl_insight.contract.naming import metric_name

    out, prom, engine, _, _ = demo_run
    phases = ("step", "gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    batch = ray_trainer.compute_advantage(rollout_batch(1), adv_estimator=AdvantageEstimator.GRPO)
    computed = verl_metrics(batch, {phase: 0.5 for phase in phases})
    assert len(computed) > 40 and "response_length/mean" in computed and "timing_s/gen" in computed
    dashboard = build()[f"verl_trainer_v1_with_{engine}_engine.json"]
    at = demo_window(out)[1]
    problems = []
    for key in sorted(computed):
        name = metric_name("rl_insight_monitor_", key)
        if not query(prom, f'{name}{{experiment_name="{EXPERIMENT}"}}', at):
            problems.append(f"{key}: not in Prometheus after the demo")
        elif not dashboard_shows(dashboard, name):
            problems.append(f"{key}: on no panel of its own")
    assert problems == []


def test_the_demo_prints_its_own_lines_and_sends_verl_and_ray_to_its_log(demo_run):
    out, _, _, _, err = demo_run
    own = ("[demo]", "  ", "rl-insight server", "On every training node", "This was a SIMULATION")
    foreign = [line for line in (out + err).splitlines() if line.strip() and not line.startswith(own)]
    assert len(foreign) <= 20, "\n".join(foreign)
    assert "\x1b[" not in out + err  # no colour codes
    [log] = re.findall(r"\[demo\] what verl and Ray print goes to (\S+)", out)
    text = open(log).read()
    assert "SimulatedTaskRunner" in text and "\x1b[" not in text  # the positive control: they did print, there
    # what rl-insight itself warned of in the run's processes: nothing refused, dropped or left undelivered
    said = [line for line in text.splitlines() if "rl-insight:" in line and "WARNING" in line]
    assert said == [], "\n".join(said[:5])


def test_the_demos_gpus_say_they_are_simulated_and_follow_its_phases(demo_run):
    """The demo hands its simulated load to the hardware plugin: every GPU series it shows carries
    simulated="true" and its utilisation moves with the run's phases."""
    out, prom, _, _, _ = demo_run
    start, end = demo_window(out)
    selector = f'DCGM_FI_DEV_GPU_UTIL{{project="rl-insight-demo",experiment_name="{EXPERIMENT}"'
    simulated = query(prom, selector + ',simulated="true"}', end)
    assert simulated and all(s["metric"]["modelName"] == "simulated NVIDIA H200" for s in simulated)
    assert query(prom, selector + ',simulated!="true"}', end) == []  # no GPU passes for a real one
    levels = query_range(prom, selector + ',gpu="0"}', start, end)
    assert len(set(levels)) > 1, levels  # generate, update and sync differ: the load reaches the plugin
