"""``rl-insight mcp`` through the official SDK's own client, over stdio and streamable HTTP, against
the real server process holding

- the demo's run (verl's real ``run_ppo`` and trainer, simulated replicas: its spans, samples, card),
- two public runs of one tool-agent recipe (tests/data/real_runs): a tool-call collapse and a healthy
  run, each with a run card made of the demo's real resolved verl config and the settings the run's
  own logs name (its kl_coef, use_kl_in_reward, ppo_mini_batch_size),
- a long run: the public PPO run's 1,120 steps twice over (no public verl run here has 2,000 steps:
  steps 1,121-2,240 repeat steps 1-1,120; the values are the run's own).

Every number an agent reads is checked against the HTTP API's answer or ``rl-insight diagnose``'s."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="rl-insight mcp needs the mcp extra: pip install 'verl-rl-insight[mcp]'")

from tests import health_shapes as shapes
from tests import mcp_client
from tests.helpers import free_port, http, rl_insight, stop_group, wait_for, write_server_config
from tests.server.health.test_detectors_on_real_runs import push_run
from verl_rl_insight.contract import run_credential
from verl_rl_insight.contract.redaction import redact_text

TOKEN = "the-mcp-tests-token"
DEMO_PROJECT, DEMO = "rl-insight-demo", "mcp-demo"
REAL = "mcp-real"
COLLAPSE = "jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse"
HEALTHY = "jianghoucheng_opd_qwen25_3b_teacherkl0001"
LONG_SOURCE, LONG = "yushengsu_amd_ppo_deepseek7b_gsm8k", "long-run"
NAMED = ("mcp-names", "bidi\u202eexp")  # a name the server takes, holding a right-to-left override
TRACES = Path(__file__).resolve().parents[1] / "data" / "gpu_traces"
H200 = TRACES / "h200_step7"
# what each run's logs say it was started with (their .source.json): the differences a card shows
SETTINGS = {
    COLLAPSE: {"use_kl_in_reward": False, "kl_coef": 0.0, "ppo_mini_batch_size": 16},
    HEALTHY: {"use_kl_in_reward": True, "kl_coef": 0.001, "ppo_mini_batch_size": 8},
}
READ_TOOLS = {
    "list_runs", "run_summary", "diagnose", "get_curves", "compare_runs", "step_detail", "samples",
    "profile_analyze", "search_keys",
}  # fmt: skip


def auth(token=TOKEN):
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def api(base, path, token=TOKEN, **query):
    status, body = http("GET", f"{base}{path}?{urllib.parse.urlencode(query)}", headers=auth(token))
    assert status == 200, body
    return json.loads(body)


def card_for(config, experiment):
    config = json.loads(json.dumps(config))
    settings = SETTINGS[experiment]
    config["algorithm"]["use_kl_in_reward"] = settings["use_kl_in_reward"]
    config["algorithm"]["kl_ctrl"]["kl_coef"] = settings["kl_coef"]
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = settings["ppo_mini_batch_size"]
    config["trainer"]["experiment_name"] = experiment
    config["trainer"]["project_name"] = REAL
    return {"project": REAL, "experiment_name": experiment, "config": config}


def long_run():
    run = shapes.real_run(LONG_SOURCE)
    last = max(step for values in run.history.values() for step, _ in values)
    run.history = {name: [*values, *((s + last, v) for s, v in values)] for name, values in run.history.items()}
    return run


class Stack:
    def __init__(self, base, home, mcp_url, mcp_log, traces_root):
        self.base, self.home, self.mcp_url, self.mcp_log = base, home, mcp_url, mcp_log
        self.traces_root = traces_root
        self.env = {
            "RL_INSIGHT_SERVER_URL": base.replace("http://", f"http://rl-insight:{TOKEN}@"),
            "RL_INSIGHT_TOKEN": None,
            "RL_INSIGHT_HOME": home,
            "VERL_RL_INSIGHT_CONFIG": None,
        }

    def stdio(self, *calls, env=None, args=()):
        return mcp_client.stdio({**self.env, **(env or {})}, *calls, args=args)

    def http(self, secret, *calls):
        return mcp_client.http(self.mcp_url, secret, *calls)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp")
    off = {name: {"enabled": False} for name in ("prometheus", "alertmanager", "tempo", "grafana")}
    path, config = write_server_config(tmp, token=TOKEN, services=off)
    home = str(tmp / "home")
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": home, "RL_INSIGHT_SERVER_URL": None}
    process = None
    try:
        demo = rl_insight(
            "demo", "--steps", "8", "--step-seconds", "1", "--config", str(path), "--experiment", DEMO,
            "--engine", "vllm", env=env, timeout=600,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        base = f"http://127.0.0.1:{config['port']}"
        demo_config = api(base, "/api/v1/runs/card", project=DEMO_PROJECT, experiment_name=DEMO)["card"]["config"]
        start = time.time() - 20000
        for experiment in (COLLAPSE, HEALTHY):
            card = json.dumps(card_for(demo_config, experiment)).encode()
            assert http("PUT", base + "/api/v1/runs/card", card, headers=auth())[0] == 200
            push_run(base, experiment, shapes.real_run(experiment), start, project=REAL, token=TOKEN)
        push_run(base, LONG, long_run(), start, project=REAL, token=TOKEN)
        healthy = shapes.real_run(HEALTHY)
        healthy.history = {name: [(s, v) for s, v in values if s <= 3] for name, values in healthy.history.items()}
        push_run(base, NAMED[1], healthy, start, project=NAMED[0], token=TOKEN)
        root = tmp / "traces"  # --traces-root: a copy of the H200 step's traces, and nothing else
        shutil.copytree(H200, root / H200.name)
        port, log = free_port(), tmp / "mcp-http.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "verl_rl_insight", "mcp", "--http", f"127.0.0.1:{port}", "--allow-write",
             "--traces-root", str(root), "--server", base],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"), start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")} | {"RL_INSIGHT_HOME": home},
        )  # fmt: skip
        wait_for(lambda: http("GET", f"http://127.0.0.1:{port}/mcp")[0] in (400, 405, 406), 30, what="mcp --http")
        stack = Stack(base, home, f"http://127.0.0.1:{port}/mcp", log, root)
        wait_for(lambda: len(api(base, "/api/v1/explorer/run", project=REAL, experiment_name=COLLAPSE)["incidents"]),
                 30, what="the collapse's incidents")  # fmt: skip
        yield stack
    finally:
        if process is not None:
            stop_group(process)
        rl_insight("server", "stop", env=env, timeout=60)


def run_answer(stack, project, experiment):
    return api(stack.base, "/api/v1/explorer/run", project=project, experiment_name=experiment)


# -- what an agent chooses from ------------------------------------------------------------------


def test_an_agent_sees_typed_tools_with_descriptions_and_no_write_tool_when_read_only(stack):
    tools, instructions, templates = stack.stdio(("list_tools", None), ("instructions", None),
                                                 ("list_resource_templates", None))  # fmt: skip
    by_name = {t.name: t for t in tools}
    assert set(by_name) == READ_TOOLS  # read-only by default: no mark_step, no request_profile
    for tool in tools:
        assert len(tool.description) > 60, tool.name
        assert tool.output_schema and tool.output_schema["properties"], tool.name
        assert tool.annotations.read_only_hint is True
    assert by_name["get_curves"].input_schema["required"] == ["project", "experiment", "keys"]
    assert "read-only" in instructions and "--allow-write" in instructions
    assert {t.uri_template for t in templates} >= {"rl-insight://runs/{project}/{experiment}/card",
                                                    "rl-insight://docs/detector/{name}"}  # fmt: skip
    writing = {t.name for t in stack.http(TOKEN, ("list_tools", None))[0]}
    assert writing == READ_TOOLS | {"mark_step", "request_profile"}  # the HTTP one was started --allow-write


def test_the_findings_resource_says_what_each_detector_means_as_the_detectors_define_it(stack):
    from verl_rl_insight.server.health.modes import DETECTORS

    findings, one = stack.stdio(("read_resource", "rl-insight://docs/findings"),
                                ("read_resource", "rl-insight://docs/detector/joint_break"))  # fmt: skip
    text = findings.contents[0].text
    for d in DETECTORS:
        assert f"## {d.name} ({d.severity})" in text and d.means in text and d.usually in text
    assert one.contents[0].text.startswith("## joint_break (warning)")


# -- the numbers equal the API's and diagnose's --------------------------------------------------


def test_list_runs_gives_the_explorers_rows_and_its_filters_keep_the_ones_asked(stack):
    every, finished, real, recent = stack.stdio(
        ("list_runs", {}), ("list_runs", {"state": "finished"}), ("list_runs", {"project": REAL}),
        ("list_runs", {"since": "1h"}),
    )  # fmt: skip
    rows = {(r["project"], r["experiment"]): r for r in api(stack.base, "/api/v1/explorer/runs")["runs"]}
    got = {(r["project"], r["experiment"]): r for r in every.data["runs"]}
    assert set(got) == set(rows) == {(DEMO_PROJECT, DEMO), (REAL, COLLAPSE), (REAL, HEALTHY), (REAL, LONG), NAMED}
    for run, row in rows.items():
        assert {k: got[run][k] for k in ("step", "state", "findings")} == {
            k: row[k] for k in ("step", "state", "findings")
        }
    assert got[(REAL, LONG)]["step"] == 2240
    assert {r["experiment"] for r in finished.data["runs"]} == {DEMO, COLLAPSE, HEALTHY, LONG, NAMED[1]}
    assert {r["project"] for r in real.data["runs"]} == {REAL} and real.data["total"] == 3
    assert {r["experiment"] for r in recent.data["runs"]} == {DEMO}  # the real runs' steps are 5 h old


def test_run_summary_gives_the_card_config_state_and_incidents_the_api_gives(stack):
    demo, collapse = stack.stdio(
        ("run_summary", {"project": DEMO_PROJECT, "experiment": DEMO, "config_filter": "kl_coef"}),
        ("run_summary", {"project": REAL, "experiment": COLLAPSE}),
    )
    kept = api(stack.base, "/api/v1/runs/card", project=DEMO_PROJECT, experiment_name=DEMO)
    card = demo.data["card"]
    assert card["versions"] == kept["card"]["versions"] and card["commit"] == kept["card"]["git"]["commit"]
    assert card["command"] == kept["card"]["command"] and card["gpus_per_node"] == kept["card"]["gpus_per_node"]
    config = {e["key"]: e["value"] for e in demo.data["config"]}
    assert config and all("kl_coef" in k for k in config)
    assert config["algorithm.kl_ctrl.kl_coef"] == kept["card"]["config"]["algorithm"]["kl_ctrl"]["kl_coef"]
    answer = run_answer(stack, REAL, COLLAPSE)
    assert collapse.data["state"] == answer["state"] == "finished" and collapse.data["step"] == answer["step"]
    assert [i["headline"] for i in collapse.data["incidents"]] == [i["headline"] for i in answer["incidents"]]
    assert collapse.data["config_keys"] > 100 and collapse.data["keys"] == len(answer["keys"])


def test_diagnose_gives_the_incidents_and_findings_diagnose_file_gives_of_the_public_collapse(stack):
    path = next(p for p in shapes.real_run_files() if p.stem == COLLAPSE)
    offline = json.loads(rl_insight("diagnose", "--file", str(path), "--json").stdout)
    collapse, healthy, late = stack.http(
        TOKEN,
        ("diagnose", {"project": REAL, "experiment": COLLAPSE}),
        ("diagnose", {"project": REAL, "experiment": HEALTHY}),
        ("diagnose", {"project": REAL, "experiment": COLLAPSE, "first_step": 61}),
    )
    keys = ("kind", "severity", "first_step", "last_step", "headline", "recommendation")
    assert [{k: i[k] for k in keys} for i in collapse.data["incidents"]] == [
        {k: i[k] for k in keys} for i in offline["incidents"]
    ]
    assert sorted(f["detector"] for f in collapse.data["findings"]) == sorted(
        f["detector"] for f in offline["findings"]
    )
    worst = collapse.data["incidents"][0]
    assert collapse.data["verdict"].startswith(f"critical policy_collapse from step {worst['first_step']}")
    parts = [collapse.data["findings"][n] for n in worst["findings"]]
    assert all(p["evidence"]["text"] and p["first_step"] >= worst["first_step"] for p in parts)
    assert not any(i["severity"] == "critical" for i in healthy.data["incidents"])
    assert all(f["last_step"] >= 61 for f in late.data["findings"]) and len(late.data["findings"]) < len(
        collapse.data["findings"]
    )


def ema(values, alpha):
    """TensorBoard's debiased exponential moving average, written out here."""
    out, state, weight = [], 0.0, 0.0
    for v in values:
        state, weight = alpha * state + (1 - alpha) * v, alpha * weight + (1 - alpha)
        out.append(state / weight)
    return out


def test_get_curves_raw_are_the_apis_values_and_smoothed_are_the_explorers_ema(stack):
    keys = ["actor/entropy", "critic/score/mean", "not/a/key"]
    raw, smoothed = stack.stdio(
        ("get_curves", {"project": REAL, "experiment": COLLAPSE, "keys": keys, "first_step": 5, "last_step": 40}),
        ("get_curves", {"project": REAL, "experiment": COLLAPSE, "keys": keys[:1], "smoothing": 0.6}),
    )
    served = api(stack.base, "/api/v1/explorer/curves", project=REAL, experiment_name=COLLAPSE,
                 keys=",".join(keys[:2]), steps="5:40")  # fmt: skip
    assert raw.data["missing"] == ["not/a/key"] and not raw.data["downsampled"]
    for curve in raw.data["curves"]:
        expected = [[s, v] for s, v in zip(served["steps"], served["series"][curve["key"]]) if v is not None]
        assert curve["points"] == expected and curve["steps"] == len(expected)
        assert curve["low"] == min(v for _, v in expected) and curve["last"] == expected[-1][1]
    whole = api(stack.base, "/api/v1/explorer/curves", project=REAL, experiment_name=COLLAPSE, keys=keys[0])
    values = [v for v in whole["series"][keys[0]] if v is not None]
    assert [v for _, v in smoothed.data["curves"][0]["points"]] == pytest.approx(ema(values, 0.6), rel=1e-12)


def test_2000_steps_by_40_keys_stay_under_the_budget_keep_each_spike_and_say_downsampled(stack):
    keys = sorted(k for k in run_answer(stack, REAL, LONG)["keys"] if not k.startswith("rl_insight/"))[:40]
    assert len(keys) == 40
    (answer,) = stack.stdio(("get_curves", {"project": REAL, "experiment": LONG, "keys": keys, "max_points": 2000}))
    assert answer.data["downsampled"] and not answer.data["truncated"]
    assert answer.data["points"] == sum(len(c["points"]) for c in answer.data["curves"]) <= 2000
    assert answer.size <= 100_000
    served = api(stack.base, "/api/v1/explorer/curves", project=REAL, experiment_name=LONG, keys=",".join(keys))
    assert len(served["steps"]) == 2240 and "stride" not in served
    for curve in answer.data["curves"]:
        values = [(s, v) for s, v in zip(served["steps"], served["series"][curve["key"]]) if v is not None]
        assert curve["steps"] == len(values)
        high = max(values, key=lambda p: p[1])
        assert curve["high"] == high[1] and any(v == high[1] for _, v in curve["points"])  # the spike survives
        assert min(v for _, v in curve["points"]) == curve["low"] == min(v for _, v in values)
        assert curve["points"][0] == list(values[0]) and curve["points"][-1] == list(values[-1])


def test_compare_runs_names_the_config_keys_runs_diff_names_and_the_step_where_the_curves_part(stack):
    (answer,) = stack.stdio(("compare_runs", {"project": REAL, "first": HEALTHY, "second": COLLAPSE}))
    diff = rl_insight("runs", "diff", f"{REAL}/{HEALTHY}", f"{REAL}/{COLLAPSE}", "--json", env=stack.env)
    assert diff.returncode == 0, diff.stderr
    cli = json.loads(diff.stdout)
    assert [[d["key"], d["first"], d["second"]] for d in answer.data["config_differences"]] == [
        [d["key"], d["first"], d["second"]] for d in cli["differences"]
    ]
    assert {d["key"] for d in answer.data["config_differences"]} >= {
        "algorithm.kl_ctrl.kl_coef", "algorithm.use_kl_in_reward", "actor_rollout_ref.actor.ppo_mini_batch_size",
    }  # fmt: skip
    parted = {d["key"]: d for d in answer.data["diverging"]}
    # the collapse's own signals, where they part from the healthy run's: tool use stops (the most
    # turns a sample takes falls to 2), responses grow and are cut at the limit
    assert {"num_turns/max", "response_length/mean", "response_length/clip_ratio"} <= set(parted)
    distances = [d["distance"] for d in answer.data["diverging"]]
    assert distances == sorted(distances, reverse=True) and len(distances) == 10
    keys = ["num_turns/mean", "critic/score/mean", "actor/entropy"]
    (asked,) = stack.stdio(("compare_runs", {"project": REAL, "first": HEALTHY, "second": COLLAPSE, "keys": keys}))
    onset = json.loads(shapes.real_run_files()[0].with_name(f"{COLLAPSE}.source.json").read_text())["onset"]
    at = {d["key"]: d["parts_at"] for d in asked.data["diverging"]}
    assert set(at) == set(keys) and asked.data["keys_compared"] == 3
    assert all(onset <= step <= onset + 15 for step in at.values()), at  # after the labelled onset, near it
    assert at["num_turns/mean"] <= onset + 10  # tool calls first: the collapse's leading signal


def test_step_detail_gives_the_apis_phases_replicas_and_slowest_replica_of_a_demo_step(stack):
    (answer,) = stack.http(TOKEN, ("step_detail", {"project": DEMO_PROJECT, "experiment": DEMO, "step": 5}))
    served = api(stack.base, "/api/v1/explorer/step", project=DEMO_PROJECT, experiment_name=DEMO, step=5)
    trainer = next(lane for lane in served["lanes"] if lane["kind"] == "trainer")
    assert [p["name"] for p in answer.data["phases"]] == [s["name"] for s in trainer["spans"]]
    for phase, span in zip(answer.data["phases"], trainer["spans"]):
        assert phase["duration_s"] == pytest.approx(span["end"] - span["start"], abs=1e-9)
    assert {lane["lane"] for lane in answer.data["lanes"]} == {lane["lane"] for lane in served["lanes"]}
    replicas = [lane for lane in answer.data["lanes"] if lane["kind"] == "replica"]
    assert len(replicas) == 2 and all(r["spans"] > 0 and r["busy_s"] > 0 for r in replicas)
    assert answer.data["slowest_replica"] == served["slowest_replica"]
    assert answer.data["duration_s"] == served["duration_s"] and answer.data["long_tail_s"] == served["long_tail_s"]


def test_samples_are_the_apis_prompts_and_responses_secrets_masked(stack):
    (answer,) = stack.stdio(("samples", {"project": DEMO_PROJECT, "experiment": DEMO, "step": 5}))
    served = api(stack.base, "/api/v1/explorer/samples", project=DEMO_PROJECT, experiment_name=DEMO, step=5)
    assert served["samples"] and len(answer.data["samples"]) == len(served["samples"])
    for got, kept in zip(answer.data["samples"], served["samples"]):
        assert got["prompt"] == redact_text(kept["prompt"])[:2000] and got["score"] == kept["score"]
        assert (got["kind"], got["rank"], got["mismatch"]) == (kept["kind"], kept["rank"], kept["mismatch"])
    from verl_rl_insight.commands.mcp.tools import _cut

    pasted = "use the key sk-proj-Zq8vX2mN5bR7tY1wK4pL9sD3fG6hJ0aQ to call it"
    assert "sk-proj" not in _cut(pasted) and "to call it" in _cut(pasted)


def test_search_keys_finds_every_logged_key_holding_the_words(stack):
    run = {"project": REAL, "experiment": COLLAPSE}
    clip, two = stack.stdio(("search_keys", {**run, "word": "clip"}), ("search_keys", {**run, "word": "response len"}))
    keys = run_answer(stack, REAL, COLLAPSE)["keys"]
    assert clip.data["keys"] == [k for k in keys if "clip" in k.lower()] and clip.data["keys"]
    assert two.data["keys"] == [k for k in keys if "response" in k and "length" in k] and clip.data["total"] == len(
        keys
    )


def test_profile_analyze_of_a_trace_folder_is_profile_analyze_json_and_http_reads_only_under_its_root(stack, tmp_path):
    cli = json.loads(rl_insight("profile", "analyze", str(H200), "--json").stdout)
    (here,) = stack.stdio(("profile_analyze", {"directory": str(H200)}))
    assert here.data["analysis"] == json.loads(json.dumps(cli)) and here.data["source"] == "directory"
    inside, outside, up = stack.http(
        TOKEN,
        ("profile_analyze", {"directory": str(stack.traces_root / H200.name)}),
        ("profile_analyze", {"directory": str(H200)}),
        ("profile_analyze", {"directory": str(stack.traces_root / ".." / "home")}),
    )
    assert inside.data["analysis"]["answer"] == cli["answer"]
    assert outside.error and "outside --traces-root" in outside.text
    assert up.error and "outside --traces-root" in up.text  # a path climbing out of the root is out
    (no_trace,) = stack.stdio(("profile_analyze", {"directory": str(tmp_path)}))
    assert no_trace.error and "no trace of verl's profiler" in no_trace.text
    (unprofiled,) = stack.stdio(("profile_analyze", {"project": DEMO_PROJECT, "experiment": DEMO, "step": 5}))
    assert unprofiled.error and "step 5 of rl-insight-demo/mcp-demo was not profiled" in unprofiled.text


# -- bad arguments, wrong credentials ------------------------------------------------------------

BAD = [
    (("step_detail", {"project": DEMO_PROJECT, "experiment": DEMO, "step": -1}), "step"),
    (("get_curves", {"project": REAL, "experiment": COLLAPSE, "keys": []}), "keys"),
    (("get_curves", {"project": REAL, "experiment": COLLAPSE, "keys": ["a"], "max_points": 3}), "max_points"),
    (("get_curves", {"project": REAL, "experiment": COLLAPSE, "keys": ["a"], "smoothing": 1.5}), "smoothing"),
    (
        (
            "get_curves",
            {"project": REAL, "experiment": COLLAPSE, "keys": ["actor/entropy"], "first_step": 9, "last_step": 3},
        ),
        "first_step: 9 is after last_step 3",
    ),  # fmt: skip
    (("list_runs", {"state": "exploded"}), "state"),
    (("list_runs", {"since": "forever"}), "since: 'forever' is not a duration"),
    (("run_summary", {"project": REAL, "experiment": "no-such-run"}), "the server refused (404): experiment_name"),
    (("diagnose", {"project": "bad\u001bname", "experiment": "x"}), "the server refused (400): project"),
    (("search_keys", {"project": REAL, "experiment": COLLAPSE, "word": " , "}), "word: give a word"),
    (("compare_runs", {"project": REAL, "first": HEALTHY, "second": "nope"}), "the server refused (404)"),
    (("samples", {"project": DEMO_PROJECT, "experiment": DEMO}), "step"),
    (("profile_analyze", {"directory": "/tmp/a\u0000b"}), "is no folder to read"),
    (("profile_analyze", {"directory": "/tmp/" + "a" * 300}), "/tmp/aaaa"),
]


def test_bad_arguments_are_tool_errors_naming_the_field_and_the_server_goes_on(stack):
    results = stack.stdio(*(call for call, _ in BAD), ("list_runs", {}))
    for (call, says), result in zip(BAD, results):
        assert result.error and says in result.text, (call, result.text)
        assert "Traceback" not in result.text
    assert not results[-1].error and results[-1].data["total"] == 5  # the same session answers after each


def test_a_wrong_token_or_none_is_an_error_that_says_so(stack):
    (wrong_stdio,) = stack.stdio(("list_runs", {}), env={"RL_INSIGHT_TOKEN": "not-the-token"})
    assert wrong_stdio.error and "the server refused the token (401)" in wrong_stdio.text
    assert "not-the-token" not in wrong_stdio.text
    (wrong,) = stack.http("not-the-token", ("list_runs", {}))
    (none,) = stack.http(None, ("diagnose", {"project": REAL, "experiment": COLLAPSE}))
    assert wrong.error and "refused the token (401)" in wrong.text and "Authorization: Bearer" in wrong.text
    assert none.error and "refused the request without a token (401)" in none.text
    forged = run_credential.mint("another-servers-token", REAL, COLLAPSE)
    (forged_answer,) = stack.http(forged, ("diagnose", {"project": REAL, "experiment": COLLAPSE}))
    assert forged_answer.error and "refused the run credential (403)" in forged_answer.text


def test_a_run_credential_reads_its_own_run_only(stack):
    mine = run_credential.mint(TOKEN, REAL, COLLAPSE)
    other = {"project": REAL, "experiment": HEALTHY}
    calls = [
        ("list_runs", {}),
        ("diagnose", {"project": REAL, "experiment": COLLAPSE}),
        ("run_summary", {"project": REAL, "experiment": COLLAPSE}),
        ("diagnose", other), ("run_summary", other), ("get_curves", {**other, "keys": ["actor/entropy"]}),
        ("step_detail", {**other, "step": 3}), ("samples", {"project": DEMO_PROJECT, "experiment": DEMO, "step": 5}),
        ("search_keys", {**other, "word": "clip"}),
        ("compare_runs", {"project": REAL, "first": HEALTHY, "second": COLLAPSE}),
        ("request_profile", {"project": REAL, "experiment": COLLAPSE, "first_step": 500}),
        ("mark_step", {**other, "step": 3, "text": "not mine to mark"}),
    ]  # fmt: skip
    for results in (stack.http(mine, *calls), stack.stdio(*calls[:10], env={"RL_INSIGHT_TOKEN": mine})):
        listed, diagnosed, summary, *refused = results
        assert [(r["project"], r["experiment"]) for r in listed.data["runs"]] == [(REAL, COLLAPSE)]
        assert diagnosed.data["incidents"] and not diagnosed.error
        assert summary.data["card"] is None and "needs the server's token" in summary.data["card_note"]
        for call, result in zip(calls[3:], refused):
            assert result.error, call
            if call[0] == "request_profile":
                assert "request_profile needs the server's token" in result.text
            else:
                assert f"this run credential reads {REAL}/{COLLAPSE} only" in result.text, (call, result.text)
    assert api(stack.base, "/api/v1/runs/marks", project=REAL, experiment_name=HEALTHY)["marks"] == []
    # over HTTP the folders under --traces-root hold every run's traces: not a run credential's to read
    (folder,) = stack.http(mine, ("profile_analyze", {"directory": str(stack.traces_root / H200.name)}))
    assert folder.error and "over HTTP a run credential reads no trace folder" in folder.text


def test_a_run_named_with_a_control_character_is_listed_and_read_by_its_own_name(stack):
    """The names go to the agent as the server holds them (JSON), not escaped for a terminal: its own
    credential lists it, and the name listed reads it."""
    mine = run_credential.mint(TOKEN, *NAMED)
    (listed,) = stack.http(mine, ("list_runs", {}))
    assert [(r["project"], r["experiment"]) for r in listed.data["runs"]] == [NAMED]
    (row,) = [r for r in stack.stdio(("list_runs", {"project": NAMED[0]}))[0].data["runs"]]
    (summary,) = stack.stdio(("run_summary", {"project": row["project"], "experiment": row["experiment"]}))
    assert summary.data["step"] == 3 and summary.data["last_step_time"] == row["last_step_time"]


def test_read_only_refuses_the_write_tools_and_writes_are_logged_with_who_never_the_secret(stack):
    mark = {"project": REAL, "experiment": COLLAPSE, "step": 30, "text": "switched the tool sandbox"}
    (refused,) = stack.stdio(("mark_step", mark))
    assert refused.error and "mark_step" in refused.text
    assert api(stack.base, "/api/v1/runs/marks", project=REAL, experiment_name=COLLAPSE)["marks"] == []
    mine = run_credential.mint(TOKEN, REAL, COLLAPSE)
    made, again, profile = stack.http(
        mine, ("mark_step", mark), ("mark_step", {**mark, "step": 31, "reset_baseline": True}),
        ("request_profile", {"project": REAL, "experiment": COLLAPSE, "first_step": 500}),
    )  # fmt: skip
    assert made.data == {"truncated": False, "project": REAL, "experiment": COLLAPSE, "step": 30,
                         "text": mark["text"], "reset_baseline": False}  # fmt: skip
    assert again.data["reset_baseline"] and profile.error and "needs the server's token" in profile.text
    kept = api(stack.base, "/api/v1/runs/marks", project=REAL, experiment_name=COLLAPSE)["marks"]
    assert [(m["step"], m["text"], m["reset_baseline"]) for m in kept] == [(30, mark["text"], False),
                                                                           (31, mark["text"], True)]  # fmt: skip
    (by_token,) = stack.http(TOKEN, ("request_profile", {"project": REAL, "experiment": COLLAPSE, "first_step": 500}))
    assert by_token.error and "has finished: it has no coming step to profile" in by_token.text
    log = stack.mcp_log.read_text()
    assert f"marked step 30 of {REAL}/{COLLAPSE} (no reset) by a run credential of {REAL}/{COLLAPSE}" in log
    assert TOKEN not in log and mine not in log and mine.split(".")[2] not in log


def test_an_answer_past_its_byte_cap_is_cut_and_says_truncated(stack):
    (cut,) = stack.stdio(("diagnose", {"project": REAL, "experiment": COLLAPSE}), args=("--max-bytes", "4000"))
    (whole,) = stack.stdio(("diagnose", {"project": REAL, "experiment": COLLAPSE}))
    assert whole.size > 4000 and not whole.data["truncated"]
    assert cut.data["truncated"] and cut.size <= 4000
    assert cut.data["incidents"][0]["headline"] == whole.data["incidents"][0]["headline"]  # the worst is kept
    assert cut.data["verdict"] == whole.data["verdict"]
    assert 1 <= len(cut.data["findings"]) < len(whole.data["findings"])


def test_the_http_server_refuses_a_request_naming_another_host(stack):
    """A page on evil.example that a browser resolves to 127.0.0.1 (DNS rebinding) gets nothing: the
    SDK's host check, on because the server was started on loopback."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    headers = {"Host": "evil.example", "Content-Type": "application/json", "Accept": "application/json"}
    status, answer = http("POST", stack.mcp_url, body, headers)
    assert status == 421 and b"list_runs" not in answer


def test_over_http_a_link_inside_the_traces_root_to_a_trace_outside_it_is_not_read(stack):
    """Someone who may write under --traces-root links a trace that lies elsewhere: it is left out."""
    folder = stack.traces_root / "linked"
    folder.mkdir()
    for trace in H200.glob("*.json.gz"):
        (folder / trace.name).symlink_to(trace)  # tests/data: outside the root
    (linked,) = stack.http(TOKEN, ("profile_analyze", {"directory": str(folder)}))
    assert linked.error and "no trace of verl's profiler" in linked.text
    (here,) = stack.stdio(("profile_analyze", {"directory": str(folder)}))  # stdio: the user's own files
    assert not here.error and here.data["analysis"]["files"] == 2
