"""``rl-insight runs import`` against the real server (its real Prometheus and Debian's promtool), next to
a live run of the demo: every public real run in the repository imported as a directory, each value
Prometheus holds equal to the file's at its step (read from the file with json alone, not with the
importer's reader); a wandb console capture of verl's output holds its JSONL twin's values; a re-import
adds nothing; bad files and clashing names are one line each, with the live run untouched; no alert and
no stall for an import; the run page in Chromium draws the import dashed beside the demo's run."""

import json
import math
import shutil
import urllib.parse
from pathlib import Path

import pytest

from tests.e2e.test_explorer_page import browser as browser
from tests.e2e.test_explorer_page import open_page, require_browser
from tests.e2e.test_explorer_page import tab as tab
from tests.helpers import (
    grafana_legend,
    http,
    range_query,
    require_prometheus,
    rl_insight,
    stack_prometheus,
    write_server_config,
)
from verl_rl_insight.commands.demo import verl_step
from verl_rl_insight.contract.naming import GLOBAL_STEP_METRIC, METRIC_PREFIX, STEP_TIME_METRIC, metric_name
from verl_rl_insight.contract.run_import import MAX_IMPORT_BODY_BYTES, MAX_IMPORT_KEYS
from verl_rl_insight.dashboards.build import build
from verl_rl_insight.dashboards.panels import every_panel

TOKEN = "import-test-token-51c9a7"
DEMO_PROJECT = "rl-insight-demo"
LIVE = "live-demo"
REAL = Path(__file__).resolve().parents[1] / "data" / "real_runs"
TWIN = "jianghoucheng_opd_qwen25_3b_teacherkl0001"
BASELINE = "baseline-kl0001"
BS64 = "jianghoucheng_opd_qwen25_3b_teacherkl00005_bs64"  # the same recipe at twice the batch, with its config
UNSIZED = "jianghoucheng_opd_qwen25_3b_tokenkl01_stdfilter_toolcall_collapse"  # multi-turn, no config


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_browser()
    require_prometheus()
    if shutil.which("promtool") is None:
        pytest.skip("no promtool: it comes with Debian's prometheus package (.ci/run installs it)")
    tmp = tmp_path_factory.mktemp("imports")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}
    try:
        demo = rl_insight(
            "demo", "--steps", "12", "--step-seconds", "1", "--config", str(path), "--experiment", LIVE,
            env=env, timeout=600,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        base = f"http://127.0.0.1:{config['port']}"
        env["RL_INSIGHT_SERVER_URL"] = f"http://rl-insight:{TOKEN}@127.0.0.1:{config['port']}"
        # the repository's real runs as a folder (one run a file), and one of them into the demo's project
        # as its baseline: one wait for Prometheus to load them all
        every = rl_insight(
            "runs", "import", str(REAL), "--project", "real", "--no-wait", "--json", env=env, timeout=600
        )
        assert every.returncode == 0, every.stdout[-3000:] + every.stderr[-3000:]
        baseline = rl_insight(
            "runs", "import", str(REAL / f"{TWIN}.jsonl"), "--project", DEMO_PROJECT, "--experiment", BASELINE,
            env=env, timeout=600,
        )  # fmt: skip
        assert baseline.returncode == 0, baseline.stdout + baseline.stderr
        yield {
            "base": base,
            "env": env,
            "prometheus": stack_prometheus(tmp / "data", config["prometheus_port"]),
            "imported": json.loads(every.stdout)["runs"],
            "baseline_out": baseline.stdout,
        }
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def raw_samples(stack, run, names=f"{METRIC_PREFIX}.+"):
    """{series: {time: value}} of a run as Prometheus holds it (every raw sample of the last 40 days)."""
    selector = f'{{__name__=~"{names}",project="{run[0]}",experiment_name="{run[1]}"}}[40d]'
    url = f"{stack['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": selector})
    parts = urllib.parse.urlsplit(url)
    login = urllib.parse.unquote(parts.password or "")
    plain = url.replace(f"{parts.username}:{parts.password}@", "")
    status, body = http("GET", plain, headers={"Authorization": "Basic " + _basic(parts.username, login)}, timeout=60)
    assert status == 200, body
    found = {}
    for series in json.loads(body)["data"]["result"]:
        found.setdefault(series["metric"]["__name__"], {}).update({float(t): float(v) for t, v in series["values"]})
    return found


def _basic(user, password):
    import base64

    return base64.b64encode(f"{user}:{password}".encode()).decode()


def by_step(samples):
    """{(step, series): value}, each sample matched to its step by the global-step sample of its time
    (a live run's step is also scraped again later, with the scrape's time: the step's first sample)."""
    step_at = samples.pop(GLOBAL_STEP_METRIC)
    samples.pop(STEP_TIME_METRIC, None)  # the step's time: its own, or made up where the file had none
    found = {}
    for name, points in samples.items():
        for t in sorted(points):
            if t in step_at:
                found.setdefault((int(step_at[t]), name), points[t])
    return found


def file_values(path):
    """verl's file-logger JSONL read with json alone: (step, series) -> the first number of the key that
    names the series (null where the key has numbers elsewhere: orjson's NaN)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    numeric = {k for r in rows for k, v in r["data"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    values, first_key = {}, {}
    for row in rows:
        for key, value in row["data"].items():
            name = metric_name(METRIC_PREFIX, key)
            if key not in numeric or name in (GLOBAL_STEP_METRIC,) or first_key.setdefault(name, key) != key:
                continue
            if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                values.setdefault((row["step"], name), math.nan if value is None else float(value))
    return values


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def test_every_real_run_in_prometheus_holds_each_value_of_its_file_at_its_step(stack):
    imported = {r["imported"]["experiment_name"]: r for r in stack["imported"]}
    jsonl = sorted(REAL.glob("*.jsonl"))
    assert len(jsonl) >= 15 and all(p.stem in imported for p in jsonl), sorted(imported)
    checked = 0
    for path in jsonl:
        held = by_step(raw_samples(stack, ("real", path.stem)))
        wanted = file_values(path)
        assert set(wanted) == set(held), (path.name, sorted(set(wanted) ^ set(held))[:5])
        wrong = [(k, wanted[k], held[k]) for k in wanted if not same(wanted[k], held[k])]
        assert not wrong, (path.name, wrong[:5])
        assert imported[path.stem]["added"] == len(wanted), path.name
        checked += len(wanted)
    assert checked > 100_000  # every value of every run, not a sample of them


def test_a_wandb_console_capture_of_verl_holds_the_values_of_its_jsonl_twin(stack):
    console = by_step(raw_samples(stack, ("real", "output")))
    twin = by_step(raw_samples(stack, ("real", TWIN)))
    shared = set(console) & set(twin)
    assert len(shared) > 3700, len(shared)  # of 3,836 values the console printed (below: all but step 51)
    assert all(same(console[k], twin[k]) for k in shared), [
        (k, console[k], twin[k]) for k in shared if not same(console[k], twin[k])
    ][:5]
    # the console printed a step 51 that the committed .wandb file (cut short) lacks; the rest it cut at 4096
    assert {step for step, _ in set(console) - set(twin)} <= {51}
    history = by_step(raw_samples(stack, ("real", "history.csv")))
    assert set(history) == set(twin) and all(same(history[k], twin[k]) for k in twin)


def test_a_wandb_history_keeps_its_own_times_moved_by_whole_days_into_the_retention(stack):
    row = next(r["imported"] for r in stack["imported"] if r["imported"]["experiment_name"] == "history.jsonl")
    days = int(row["times"].split()[1])
    assert row["times"] == f"shifted {days} days" and days > 300  # logged 2025-11-30, older than 30 days
    assert row["first_time"] == pytest.approx(1764503094.283 + days * 86400, abs=0.01)
    times = raw_samples(stack, ("real", "history.jsonl"), GLOBAL_STEP_METRIC)[GLOBAL_STEP_METRIC]
    assert min(times) == pytest.approx(row["first_time"], abs=0.002)


def test_importing_the_same_file_again_adds_nothing(stack):
    before = raw_samples(stack, (DEMO_PROJECT, BASELINE))
    again = rl_insight(
        "runs", "import", str(REAL / f"{TWIN}.jsonl"), "--project", DEMO_PROJECT, "--experiment", BASELINE,
        "--json", env=stack["env"],
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    [answer] = json.loads(again.stdout)["runs"]
    assert answer["added"] == 0 and "imported under this name already" in answer["note"]
    assert raw_samples(stack, (DEMO_PROJECT, BASELINE)) == before


def test_bad_files_and_taken_names_are_one_line_each_and_the_live_run_is_untouched(stack, tmp_path):
    live_before = raw_samples(stack, (DEMO_PROJECT, LIVE))
    (tmp_path / "notes.md").write_text("# not a run\n")
    (tmp_path / "no-step.jsonl").write_text('{"data": {"critic/score/mean": 0.5}}\n')
    with (tmp_path / "huge.jsonl").open("wb") as f:
        f.truncate(1 << 30)
    wide = tmp_path / "wide.jsonl"  # one key more than the route takes
    wide.write_text(json.dumps({"step": 1, "data": {f"k/{i}": 0.5 for i in range(MAX_IMPORT_KEYS + 1)}}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}}) + "\n")
    cases = [
        ((str(tmp_path / "notes.md"),), "notes.md: not a run file; expected verl's file logger JSONL"),
        ((str(tmp_path / "no-step.jsonl"),), 'no-step.jsonl:1: no whole "step" and object "data"'),
        ((str(tmp_path / "huge.jsonl"),), "huge.jsonl: 1024 MiB, over the limit of 256 MiB"),
        ((str(wide),), f"wide.jsonl: {MAX_IMPORT_KEYS + 1} keys, over the server's limit of {MAX_IMPORT_KEYS}"),
        ((str(other), "--experiment", LIVE), f"(409): experiment_name: a live run '{LIVE}'"),
        ((str(other), "--experiment", BASELINE), f"(409): experiment_name: '{BASELINE}' in project '{DEMO_PROJECT}' "
                                                  "was imported from another file"),
    ]  # fmt: skip
    for args, said in cases:
        result = rl_insight("runs", "import", *args, "--project", DEMO_PROJECT, env=stack["env"])
        assert result.returncode != 0 and result.stdout == "", (args, result.stdout)
        first = result.stderr.splitlines()[0]
        assert said in first, (args, result.stderr)
    assert by_step(raw_samples(stack, (DEMO_PROJECT, LIVE))) == by_step(live_before)


def test_the_import_route_names_the_field_and_takes_no_write_without_the_token(stack):
    good = {"project": "p", "experiment_name": "e", "source": "f.jsonl", "format": "verl-jsonl", "sha256": "a" * 64,
            "times": "synthesized", "keys": ["critic/score/mean"],
            "steps": [[1, 1.7e9, [0.5]], [2, 1.7e9 + 60, [0.6]]]}  # fmt: skip
    url = f"{stack['base']}/api/v1/runs/import"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, body = http("POST", url, json.dumps(good).encode())
    assert status == 401, body
    for change, said in [
        ({"format": "png"}, "format must be one of"),
        ({"sha256": "x"}, "sha256 must be"),
        ({"keys": []}, "keys must be a non-empty list"),
        ({"steps": [[2, 1.7e9, [0.5]], [1, 1.7e9 + 60, [0.6]]]}, "steps[1][0]: step 1 after step 2"),
        ({"steps": [[1, 1.7e9, [0.5, 1.0]]]}, "steps[0][2] has 2 values for 1 keys"),
        ({"steps": [[1, 1.7e9, ["x"]]]}, 'steps[0][2][0] must be a number, "NaN"'),
        ({"experiment_name": "bad\nname"}, "experiment_name contains control characters"),
        ({"steps": [[1, 9.0e9, [0.5]]]}, "steps[0][1] (the time) must be unix seconds"),
    ]:
        status, body = http("POST", url, json.dumps({**good, **change}).encode(), headers=auth)
        assert status == 400 and said in json.loads(body)["error"], (change, status, body)
    status, body = http("POST", url, b"{" * 100_000, headers=auth)
    assert status == 400 and "not valid JSON" in json.loads(body)["error"], body
    status, body = http("POST", url, b" " * (MAX_IMPORT_BODY_BYTES + 1), headers=auth)
    assert status == 413, (status, body[:200])


def test_an_import_is_listed_as_imported_never_stalls_and_raises_no_alert(stack):
    listed = rl_insight("runs", "list", "--project", DEMO_PROJECT, env=stack["env"])
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line.split()[-1] for line in listed.stdout.splitlines()[1:]}
    assert rows[BASELINE] == "imported" and rows[LIVE] != "imported", listed.stdout
    status, body = http("GET", f"{stack['base']}/api/v1/explorer/runs")
    runs = {r["experiment"]: r for r in json.loads(body)["runs"]}
    assert runs[BASELINE]["state"] == "imported" and runs[BASELINE]["imported"]["format"] == "verl-jsonl"
    assert runs[LIVE]["imported"] is None
    # steps a day old, and no alert of any imported run (the collapsed ones among them)
    status, body = http("GET", f"{stack['base']}/api/v1/alerts")
    assert status == 200, body
    named = {a["labels"].get("experiment_name") for a in json.loads(body).get("alerts", [])}
    assert not named & ({r["imported"]["experiment_name"] for r in stack["imported"]} | {BASELINE}), named
    health = raw_samples(stack, (DEMO_PROJECT, BASELINE), "rl_insight_health_.+")
    assert health == {}, sorted(health)


def test_runs_diff_names_the_curves_that_part_from_the_baseline(stack):
    diff = rl_insight(
        "runs", "diff", f"real/{TWIN}", "real/jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse", "--json",
        env=stack["env"],
    )  # fmt: skip
    assert diff.returncode == 0, diff.stderr
    answer = json.loads(diff.stdout)
    assert answer["differences"] is None  # the collapse was imported without a config
    parted = {p["key"]: p["parts_at"] for p in answer["parting"]}
    # the tool-call collapse: responses grow into the limit (data README: onset 6) while the healthy run's do not
    assert "response_length/mean" in parted and 6 <= parted["response_length/mean"] <= 20, parted
    same_run = rl_insight("runs", "diff", f"real/{TWIN}", "real/history.csv", env=stack["env"])
    assert "their curves do not part" in same_run.stdout, same_run.stdout


def test_the_run_page_draws_the_baseline_dashed_beside_the_demo_run(stack, tab):
    url = f"{stack['base']}/runs/{DEMO_PROJECT}/{LIVE}?compare={BASELINE}"
    drawn = open_page(tab, url, "run")
    legend = tab.locator("[data-testid=legend] .run")
    names = [" ".join(text.split()) for text in legend.all_inner_texts()]
    assert names == [LIVE, f"{BASELINE} imported: dashed"], names
    score = drawn["panels"]["Score and reward"]
    lines = {(run, key): (dash, imported) for run, key, dash, imported in score["dashes"]}
    assert lines[(BASELINE, "critic/score/mean")][1] is True and lines[(BASELINE, "critic/score/mean")][0]
    assert lines[(LIVE, "critic/score/mean")] == (None, False)
    box = tab.locator("[data-testid=panel][data-title='Score and reward'] canvas").first.bounding_box()
    tab.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    readout = tab.locator("[data-testid=panel][data-title='Score and reward'] [data-testid=readout]").inner_text()
    assert f"{BASELINE} (imported)" in readout, readout
    page = open_page(tab, f"{stack['base']}/runs/{DEMO_PROJECT}/{BASELINE}", "run")
    assert "imported from" in tab.inner_text(".imported-from") and page is not None


def grafana_lines(stack, title, metric):
    """{line name: (points drawn, points the run's ``metric`` has)} of a compare-dashboard panel as Grafana
    draws it over each run's steps: its queries run by the real Prometheus, a time series named by its
    legendFormat, an XY chart's line by the values of the fields it partitions its table by (those a row has:
    Grafana joins them with a space)."""
    panel = next(p for p in every_panel(build()["rl_insight_compare_runs.json"]) if p["title"] == title)
    split = [t["options"]["fields"] for t in panel.get("transformations", []) if t["id"] == "partitionByValues"]
    lines = {}
    for run, every_s in ((LIVE, 1), (BASELINE, 30)):
        times = sorted(raw_samples(stack, (DEMO_PROJECT, run), GLOBAL_STEP_METRIC)[GLOBAL_STEP_METRIC])
        window = (times[0], times[-1], every_s)
        plain = f'{metric}{{project="{DEMO_PROJECT}",experiment_name="{run}"}}'
        [steps] = range_query(stack["prometheus"], plain, *window)
        for target in panel["targets"][-1:]:  # an XY chart's value (its first target is the step)
            expr = target["expr"].replace("$project", DEMO_PROJECT).replace("$experiment_name", f"{LIVE}|{BASELINE}")
            for series in range_query(stack["prometheus"], expr, *window):
                labels = series["metric"]
                name = (
                    " ".join(labels[f] for f in split[0] if f in labels)
                    if split
                    else grafana_legend(target["legendFormat"], labels)
                )
                drawn = lines.get(name, (0, 0))[0]
                lines[name] = (drawn + len(series["values"]), len(steps["values"]))
    return lines


def test_grafanas_compare_dashboard_names_the_import_imported_and_the_live_run_by_its_name(stack):
    """The legend of "Global step over time" and the lines of an XY chart by step: the baseline's line says
    "imported", the live run's does not, and each has a point wherever its run has a step. (With
    ``count_values by (..., imported)`` Prometheus 2.42 dropped a live run's other labels where it lacked
    ``imported``: all its points but the first went.)"""
    over_time = grafana_lines(stack, "Global step over time", GLOBAL_STEP_METRIC)
    assert set(over_time) == {f"{LIVE} #1", f"{BASELINE} #1 imported"}, over_time
    assert all(drawn == steps > 10 for drawn, steps in over_time.values()), over_time
    by_step = grafana_lines(stack, "Score by training step", metric_name(METRIC_PREFIX, "critic/score/mean"))
    assert set(by_step) == {f"{LIVE} 1", f"{BASELINE} 1 imported"}, by_step
    assert all(drawn == steps > 10 for drawn, steps in by_step.values()), by_step


def test_diagnose_holds_the_live_run_against_its_baseline(stack):
    said = rl_insight(
        "diagnose", "--project", DEMO_PROJECT, "--experiment", LIVE, "--baseline", BASELINE, "--json", env=stack["env"]
    )
    assert said.returncode in (0, 1), said.stderr
    held = {b["key"]: b for b in json.loads(said.stdout)["baseline"]}
    assert "critic/score/mean" in held, said.stdout[-2000:]
    diff = rl_insight(
        "runs", "diff", f"{DEMO_PROJECT}/{LIVE}", f"{DEMO_PROJECT}/{BASELINE}", "--json", env=stack["env"]
    )
    parted = {p["key"]: p["parts_at"] for p in json.loads(diff.stdout)["parting"]}
    score = held["critic/score/mean"]
    # the demo's simulated run and a real multi-turn agent's: their scores are far apart (real: -0.8 .. -0.6)
    assert score["parts_at"] == parted.get("critic/score/mean") and score["difference"] > 0.5, (score, parted)
    assert score["line"] == (
        f"critic/score/mean {score['difference']:.3g} above the baseline at step 12, as far apart from step 1 on"
    ), score
    text = rl_insight("diagnose", "--project", DEMO_PROJECT, "--experiment", LIVE, "--baseline", BASELINE,
                      env=stack["env"])  # fmt: skip
    assert f"against the baseline {BASELINE}:\n  {score['line']}" in text.stdout, text.stdout


def test_diagnose_says_where_a_collapse_left_its_healthy_sibling(stack):
    collapse = "jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse"
    said = rl_insight("diagnose", "--project", "real", "--experiment", collapse, "--baseline", TWIN, "--json",
                      env=stack["env"])  # fmt: skip
    assert said.returncode == 1, said.stderr  # the collapse's own findings
    length = {b["key"]: b for b in json.loads(said.stdout)["baseline"]}["response_length/mean"]
    # both runs logged steps 0..50 of this recipe; the collapsed one's responses grow into the limit
    assert length["step"] >= 45 and 6 <= length["parts_at"] <= 20 and length["difference"] > 1000, length
    assert length["line"] == (
        f"response_length/mean {length['difference']:.0f} above the baseline at step {length['step']}, "
        f"was within {length['within']:.3g} to step {length['parts_at'] - 1}"
    )


def test_a_config_beside_a_run_file_is_its_card_and_runs_diff_names_what_differs(stack):
    diff = rl_insight("runs", "diff", f"real/{TWIN}", f"real/{BS64}", "--json", env=stack["env"])
    assert diff.returncode == 0, diff.stderr
    differences = {row["key"]: (row["first"], row["second"]) for row in json.loads(diff.stdout)["differences"]}
    # the two runs' own configs (tests/data/real_runs/README.md): the batch and the teacher-KL coefficient
    assert differences["data.train_batch_size"] == (32, 64), sorted(differences)
    assert differences["algorithm.kl_ctrl.kl_coef"] == (0.001, 0.0005), sorted(differences)


def run_answer(stack, project, experiment):
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    status, body = http("GET", f"{stack['base']}/api/v1/explorer/run?{query}")
    assert status == 200, body
    return json.loads(body)


def test_each_run_says_how_many_sequences_a_step_it_trains_and_where_that_comes_from(stack):
    # from the card the folder import took from <name>.config.json: 64 prompts x 16 responses
    assert run_answer(stack, "real", BS64)["samples_seen"] == {
        "per_step": 1024, "from": "card: data.train_batch_size 64 x actor_rollout_ref.rollout.n 16",
    }  # fmt: skip
    # the demo's live run from what its steps logged (verl's own metric functions on its batch), as its card says
    live = run_answer(stack, DEMO_PROJECT, LIVE)["samples_seen"]
    assert live["per_step"] == verl_step.PROMPTS * verl_step.ROLLOUT_N and live["from"].startswith("logged: "), live
    assert "card" not in live["from"], live  # the card agrees: nothing to say
    assert run_answer(stack, DEMO_PROJECT, BASELINE)["samples_seen"]["per_step"] == 512
    unsized = run_answer(stack, "real", UNSIZED)["samples_seen"]
    assert unsized["per_step"] is None and "not one batch size" in unsized["from"], unsized


def test_the_compare_view_draws_two_batch_sizes_by_samples_seen(stack, tab):
    drawn = open_page(tab, f"{stack['base']}/runs/real/{BS64}?compare={TWIN}&x=samples", "run")
    axis = tab.evaluate("window.RL_INSIGHT_PAGE.xAxis")
    assert axis["by"] == "samples" and axis["per_step"] == {BS64: 1024, TWIN: 512}, axis
    score = drawn["panels"]["Score and reward"]
    assert score["x"] == "samples"
    stepped = {s for s, _ in file_values(REAL / f"{BS64}.jsonl")}  # a run's curves are on all its steps
    twin = {s for s, _ in file_values(REAL / f"{TWIN}.jsonl")}
    # both runs on one axis of sequences trained: step 10 of the big batch beside step 20 of the small one
    assert set(score["xs"]) == {1024 * s for s in stepped} | {512 * s for s in twin}, score["xs"][:10]
    assert "1024 a step" in tab.inner_text("[data-testid=x-note]")
    box = tab.locator("[data-testid=panel][data-title='Score and reward'] canvas").first.bounding_box()
    tab.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    readout = tab.locator("[data-testid=panel][data-title='Score and reward'] [data-testid=readout]").inner_text()
    assert "samples seen" in readout and " · step " in readout, readout
    # by step, the same two runs on their own steps
    by_step_page = open_page(tab, f"{stack['base']}/runs/real/{BS64}?compare={TWIN}", "run")
    assert set(by_step_page["panels"]["Score and reward"]["xs"]) == stepped | twin


def test_by_samples_seen_is_refused_with_the_reason_where_a_runs_batch_is_not_known(stack, tab):
    drawn = open_page(tab, f"{stack['base']}/runs/real/{UNSIZED}?compare={TWIN}&x=samples", "run")
    axis = tab.evaluate("window.RL_INSIGHT_PAGE.xAxis")
    assert axis["by"] == "step" and axis["per_step"][UNSIZED] is None and "not one batch size" in axis["why"], axis
    assert drawn["panels"]["Score and reward"]["x"] == "step"
    assert tab.locator("select[aria-label='x axis'] option[value=samples]").is_disabled()
    note = tab.inner_text("[data-testid=x-note]")
    assert note.startswith("by samples seen needs each run's batch size") and UNSIZED in note, note
