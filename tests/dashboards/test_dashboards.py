"""Dashboards as code: the committed JSON is current, every query names a metric something
produces and filters on project and experiment_name, and `rl-insight dashboards export` writes them."""

import json
import re
import subprocess
import sys

import pytest

from verl_rl_insight.dashboards import DASHBOARDS_DIR, generate
from verl_rl_insight.dashboards.build import build
from verl_rl_insight.dashboards.catalogue import known_names
from verl_rl_insight.dashboards.panels import every_panel


def test_committed_dashboards_are_current_and_their_queries_check_out():
    result = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight.dashboards.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in DASHBOARDS_DIR.glob("*.json")) == [
        "rl_insight_agent_trajectories.json",
        "rl_insight_compare_runs.json",
        "rl_insight_hardware.json",
        "verl_trainer_v1_with_sglang_engine.json",
        "verl_trainer_v1_with_vllm_engine.json",
    ]


def first(dashboards, file, title):
    return next(p for p in every_panel(dashboards[file]) if p.get("title") == title)


def test_check_fails_on_a_stale_file_and_on_a_metric_nothing_produces(tmp_path):
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "verl_trainer_v1_with_vllm_engine.json"
    path.write_text(path.read_text().replace("Grad norm", "Grad norms"))
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1
    dashboards = build()
    panel = first(dashboards, "rl_insight_hardware.json", "GPU power")
    run = 'project=~"$project",experiment_name=~"$experiment_name"'
    panel["targets"][0]["expr"] = f"DCGM_FI_DEV_POWER_USAGES{{{run}}}"
    found = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert found == [
        f"rl_insight_hardware.json: DCGM_FI_DEV_POWER_USAGES is produced by nothing: {panel['targets'][0]['expr']}"
    ]
    panel["targets"][0]["expr"] = f"rl_insight_monitor_actor_grad_normz{{{run}}}"
    [problem] = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert "rl_insight_monitor_actor_grad_normz is produced by nothing" in problem  # not a key verl logs
    panel["targets"][0]["expr"] = "DCGM_FI_DEV_POWER_USAGE"
    assert (
        "does not filter on project and experiment_name"
        in generate.problems(dashboards, known_names(), generate.verl_keys())[0]
    )


RUN = 'project=~"$project",experiment_name=~"$experiment_name"'


@pytest.mark.parametrize(
    "title, expr, why",
    [
        (
            "KV cache usage",
            f"sum by (replica) (vllm:kv_cache_usage_perc{{{RUN}}})",
            "not of a form that stays in range",
        ),  # a sum of fractions passes 100 %
        (
            "KV cache usage",
            f"max by (replica) (vllm:num_requests_running{{{RUN}}})",
            "vllm:num_requests_running is not declared a percentunit metric",
        ),
        ("Prefix cache hit rate", f"clamp(vllm:prefix_cache_hits_total{{{RUN}}}, 0, 100)", "clamped to 100, not 1"),
    ],
)
def test_check_fails_on_a_percent_panel_that_could_pass_100_percent(title, expr, why):
    dashboards = build()
    first(dashboards, "verl_trainer_v1_with_vllm_engine.json", title)["targets"][0]["expr"] = expr
    [problem] = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert f"percent panel {title!r} could pass 100 %: {why}" in problem


def test_check_fails_on_a_traces_panel_fed_by_a_search():
    dashboards = build()
    trace = first(dashboards, "verl_trainer_v1_with_vllm_engine.json", "Selected trace")
    table = first(dashboards, "verl_trainer_v1_with_vllm_engine.json", "Trainer phases")
    assert table["type"] == "table" and table["targets"][0]["tableType"] == "spans"  # searches go to tables
    trace["targets"][0]["query"] = table["targets"][0]["query"]
    [problem] = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert "traces panel 'Selected trace' is fed by a search" in problem


def verl_ppo_step_keys():
    """The keys a verl PPO step logs: computed by verl's own metric functions on a batch (data,
    timing, throughput, rollout correction in two modes), plus what its workers report (their
    names as verl's source spells them, and the ones it builds at run time)."""

    from verl.trainer.ppo import metric_utils, rollout_corr_helper

    from verl_rl_insight.commands.demo.verl_step import rollout_batch
    from verl_rl_insight.dashboards import keys

    batch = rollout_batch(3)
    timing = {
        name: 0.1
        for name in (
            "gen",
            "reward",
            "old_log_prob",
            "ref",
            "values",
            "adv",
            "update_critic",
            "update_actor",
            "update_weights",
            "testing",
            "save_checkpoint",
        )
    }
    timing["step"] = 2.0
    batch.batch["advantages"] = batch.batch["returns"] = batch.batch["token_level_rewards"]
    found = set(metric_utils.compute_data_metrics(batch, use_critic=True))
    found |= set(metric_utils.compute_timing_metrics(batch, timing))
    found |= set(metric_utils.compute_throughout_metrics(batch, timing, n_gpus=8))
    old, rollout, mask = batch.batch["old_log_probs"], batch.batch["rollout_log_probs"], batch.batch["response_mask"]
    found |= set(rollout_corr_helper.compute_rollout_corr_metrics_from_logprobs(old, rollout, mask))
    for mode in ("token", "sequence"):
        found |= set(
            rollout_corr_helper.compute_rollout_correction_and_rejection_mask(
                old, rollout, mask, rollout_is=mode, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0"
            )[2]
        )
    workers = {k for k in keys.verl_literals() if k.split("/")[0] in ("actor", "critic", "perf")}
    return found | (workers - keys.NOT_LOGGED) | keys.RUNTIME_KEYS | set(keys.own_keys())


def test_every_key_a_verl_ppo_step_logs_has_a_panel_of_its_own():
    from tests.e2e.test_demo import dashboard_shows
    from verl_rl_insight.contract.naming import metric_name

    step_keys = verl_ppo_step_keys()
    assert len(step_keys) > 100
    for file in ("verl_trainer_v1_with_vllm_engine.json", "verl_trainer_v1_with_sglang_engine.json"):
        dashboard = build()[file]
        missing = sorted(k for k in step_keys if not dashboard_shows(dashboard, metric_name("rl_insight_monitor_", k)))
        assert missing == [], f"{file}: {missing}"


def test_the_catch_all_panel_shows_a_key_no_panel_shows_and_nothing_else():
    import re

    from verl_rl_insight.dashboards import training

    catch_all = first(build(), "verl_trainer_v1_with_vllm_engine.json", "Every other key the trainer logs")
    expr = catch_all["targets"][0]["expr"]
    [include], [exclude] = re.findall(r'__name__=~"([^"]*)"', expr), re.findall(r'__name__!~"([^"]*)"', expr)

    def shown(name):
        return bool(re.fullmatch(include, name)) and not re.fullmatch(exclude, name)

    assert shown("rl_insight_monitor_a_key_from_verl_2_0")
    assert not shown("rl_insight_monitor_actor_pg_loss") and not shown("rl_insight_monitor_timing_s_gen")
    assert not shown("rl_insight_monitor_rollout_corr_rollout_is_mean") and exclude == training.shown()


def test_dashboards_have_the_rows_variables_and_datasources_users_look_for():
    dashboards = build()
    vllm = dashboards["verl_trainer_v1_with_vllm_engine.json"]
    assert vllm["uid"] == "verl_trainer_v1_with_vllm_engine"
    variables = {v["name"]: v for v in vllm["templating"]["list"]}
    assert list(variables) == ["project", "experiment_name", "replica", "node", "gpu", "trace_id"]
    assert variables["project"]["multi"] and variables["experiment_name"]["multi"]  # compare runs
    rows = [p["title"] for p in vllm["panels"] if p["type"] == "row"]
    assert rows[:5] == [
        "Training: what to check first",
        "Training signal: groups, advantages, percentiles",
        "Per data source",
        "RL state timeline",
        "vLLM engines (per replica)",
    ]
    for row in (
        "Actor",
        "Critic, rewards and advantages",
        "Performance",
        "Time per phase",
        "Lengths",
        "Rollout correction (with algorithm.rollout_correction on)",
        "TransferQueue",
        "Hardware",
    ):
        assert row in rows, row
    panels = list(every_panel(vllm))
    assert {p["datasource"]["uid"] for p in panels if "datasource" in p} == {
        "rl-insight-prometheus",
        "rl-insight-tempo",
    }
    assert any(p["type"] == "xychart" for p in panels)  # the training-step x axis
    assert not [p["title"] for p in panels if p["type"] == "timeseries" and not p["fieldConfig"]["defaults"]["unit"]]
    sglang_text = json.dumps(dashboards["verl_trainer_v1_with_sglang_engine.json"])
    assert "sglang:num_running_reqs" in sglang_text and "vllm:" not in sglang_text
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    # per replica: an engine index inside a replica never splits a line
    engine_row = [p for p in panels if "vllm:" in json.dumps(p.get("targets", []))]
    assert all(
        "by (replica" in t["expr"] or "by (le" in t["expr"] or "by (finished_reason)" in t["expr"]
        for p in engine_row
        for t in p["targets"]
    ), [p["title"] for p in engine_row]


def test_dashboards_export_writes_them_for_an_existing_grafana(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "dashboards", "export", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "out").glob("*.json"))
    assert written == sorted(p.name for p in DASHBOARDS_DIR.glob("*.json"))
    for name in written:
        assert (tmp_path / "out" / name).read_text() == (DASHBOARDS_DIR / name).read_text()


@pytest.mark.parametrize(
    "run, other", [("qwen2.5-7b", "qwen2a5-7b"), ("a/b", "a"), ("x+y(1)", "xxy1"), ("grpo", "grpo_v2")]
)
def test_every_traceql_query_is_valid_and_selects_only_its_run(run, other):
    """What Tempo receives once Grafana interpolated the selected run (a double-quoted TraceQL string
    refuses Grafana's regex escapes, Tempo 2.6 matches =~ as a substring): no refused escape, and the
    run's own spans match while a run whose name is one character off, or longer, does not."""
    from verl_rl_insight.dashboards import traceql
    from verl_rl_insight.dashboards.generate import TRACE_ID, queries

    checked = 0
    for name, dashboard in build().items():
        for kind, text in queries(dashboard):
            if kind != "traceql" or TRACE_ID.fullmatch(text):
                continue
            sent = traceql.interpolate(text, {"project": [run], "experiment_name": [run]})
            assert traceql.string_problems(sent) == [], (name, sent)
            matchers = traceql.raw_matchers(sent)
            for attribute in ("span.project", "span.experiment_name"):
                pattern = re.compile(matchers[attribute])
                assert pattern.search(run) and not pattern.search(other), (name, attribute, sent)
            checked += 1
    assert checked >= 4


def test_the_check_refuses_the_filters_that_break_on_real_run_names():
    """Positive controls for the check above: the filter the dashboards had, and an unanchored one."""
    from verl_rl_insight.dashboards import traceql

    quoted = 'span.project =~ "${project:regex}" && span.experiment_name =~ "${experiment_name:regex}"'
    sent = traceql.interpolate(quoted, {"project": ["qwen2.5-7b"], "experiment_name": ["e"]})
    assert traceql.string_problems(sent) == ["invalid char escape '\\\\.' in a double-quoted string"]
    unanchored = traceql.RUN_FILTER.replace("^(", "(").replace(")$", ")")
    problems = traceql.check("{ " + traceql.RUN_FILTER + " }", runs=("grpo", "grpo_v2"))
    assert problems == []
    sent = traceql.interpolate(unanchored, {"project": ["grpo"], "experiment_name": ["grpo"]})
    assert re.compile(traceql.raw_matchers(sent)["span.project"]).search("grpo_v2")  # what anchoring prevents


# Grafana 11's transformations and the option names its source reads for each (public/app/features/
# transformers and packages/grafana-data/src/transformations/transformers), and the state timeline's.
TRANSFORMATION_OPTIONS = {
    "calculateField": {"mode", "reduce", "binary", "alias", "replaceFields", "index", "unary", "cumulative", "window"},
    "extractFields": {"source", "format", "replace", "keepTime", "regExp", "jsonPaths", "delimiter"},
    "convertFieldType": {"conversions", "fields"},
    "sortBy": {"fields", "sort"},
    "organize": {"excludeByName", "indexByName", "renameByName", "includeByName"},
    "partitionByValues": {"fields", "keepFields", "naming"},
}
STATE_TIMELINE_OPTIONS = {
    "mergeValues",
    "showValue",
    "alignValue",
    "rowHeight",
    "colWidth",
    "perPage",
    "legend",
    "tooltip",
}
STATE_TIMELINE_CUSTOM = {"fillOpacity", "lineWidth", "spanNulls", "insertNulls", "hideFrom"}


def test_the_engine_dashboards_draw_the_timeline_as_lanes_in_a_sync_and_an_async_view():
    from verl_rl_insight.dashboards import traceql

    for name in ("verl_trainer_v1_with_vllm_engine.json", "verl_trainer_v1_with_sglang_engine.json"):
        timelines = [p for p in every_panel(build()[name]) if p["type"] == "state-timeline"]
        assert [(", synchronous" in p["title"], ", asynchronous" in p["title"]) for p in timelines] == [
            (True, False),
            (False, True),
        ]
        for panel in timelines:
            [target] = panel["targets"]
            assert (target["queryType"], target["tableType"], target["datasource"]["type"]) == (
                "traceql",
                "spans",
                "tempo",
            )
            assert traceql.check(target["query"]) == []
            lanes = re.search(r"span\.state_lane_id =~ `([^`]*)`", target["query"]).group(1)
            for lane in ("trainer", "replica_0", "replica_12"):
                assert re.fullmatch(lanes, lane), (panel["title"], lane)
            assert not re.fullmatch(lanes, "replica_x") and not re.fullmatch(lanes, "trainer2")
            ids = [t["id"] for t in panel["transformations"]]
            assert ids[-1] == "partitionByValues" and panel["transformations"][-1]["options"]["fields"] == [
                "state_lane_id"
            ]
            for transformation in panel["transformations"]:
                assert set(transformation["options"]) <= TRANSFORMATION_OPTIONS[transformation["id"]], transformation
            end = next(t for t in panel["transformations"] if t["options"].get("alias") == "End time")
            assert end["options"]["reduce"]["include"] == ["Start time", "duration_ms"]
            conversions = next(t for t in panel["transformations"] if t["id"] == "convertFieldType")["options"]
            assert {c["targetField"]: c["destinationType"] for c in conversions["conversions"]} == {
                "Start time": "time",
                "End time": "time",
                "lane_number": "number",
            }
            assert set(panel["options"]) <= STATE_TIMELINE_OPTIONS and panel["options"]["mergeValues"] is True
            assert set(panel["fieldConfig"]["defaults"]["custom"]) <= STATE_TIMELINE_CUSTOM


def test_the_check_refuses_a_state_timeline_without_a_run_filter():
    from verl_rl_insight.dashboards.panels import state_timeline

    panel = state_timeline("lanes", "trainer", "")
    unfiltered = re.sub(
        r"span\.project =~ `[^`]*` && span\.experiment_name =~ `[^`]*` && ", "", panel["targets"][0]["query"]
    )
    assert unfiltered != panel["targets"][0]["query"]
    panel["targets"][0]["query"] = unfiltered
    dashboards = {"d.json": {"panels": [panel], "templating": {"list": []}}}
    found = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert len(found) == 1 and "does not filter on the run" in found[0], found


def panels_showing(dashboard, name):
    """The panels (not the catch-all) whose queries select metric ``name``, by name or by regex."""
    import re as regex

    from verl_rl_insight.dashboards import generate
    from verl_rl_insight.dashboards.panels import every_panel

    found = []
    for panel in every_panel(dashboard):
        if panel.get("title") == "Every other key the trainer logs":
            continue
        for t in panel.get("targets", []):
            text = t.get("expr", "")
            by_name = regex.search(rf"(?<![\w:]){regex.escape(name)}(?![\w:])", text)
            by_regex = any(op == "=~" and regex.fullmatch(r, name) for op, r in generate.NAME_MATCHER.findall(text))
            if by_name or by_regex:
                found.append(panel)
                break
    return found


@pytest.mark.parametrize(
    "key, unit",
    [
        ("global_seqlen/balanced_max", None),
        ("global_seqlen/mean", None),
        ("training/off_policy/evicted_samples_staleness/mean", None),
        ("gdpo/format_reward/mean", None),
        ("rollout/moe/max_vio/layer_17", None),
        ("rollout/moe/avg_vio/max", None),
        ("agent_loop/generate_sequences/max", "s"),
        ("agent_loop/slowest/tool_calls", "s"),
        ("perf/max_memory_allocated_gb", "gbytes"),
        ("checkpoint_engine/payload_mbytes", "mbytes"),
    ],
)
def test_keys_verl_builds_at_run_time_have_panels_of_their_own_in_their_units(key, unit):
    """Read against verl 0.9.1's source: f-string keys (seqlen balancing, the replay buffer, GDPO, MoE
    routing per layer) are on panels, not in the catch-all; times in seconds, GiB and MiB as verl divides."""
    from verl_rl_insight.contract.naming import metric_name

    name = metric_name("rl_insight_monitor_", key)
    dashboard = build()["verl_trainer_v1_with_vllm_engine.json"]
    shown = panels_showing(dashboard, name)
    assert shown, f"{key} is on no panel of its own"
    if unit is not None:
        assert {p["fieldConfig"]["defaults"]["unit"] for p in shown} == {unit}, [p["title"] for p in shown]


def test_gpu_panels_and_the_gpu_variable_follow_the_node_selector():
    """GPU series carry dcgm-exporter's Hostname (the host series carry node): the node selector
    must reach GPU queries through Hostname, or GPU 0 of every node is one line."""
    from verl_rl_insight.dashboards.panels import every_panel

    for file in ("verl_trainer_v1_with_vllm_engine.json", "rl_insight_hardware.json"):
        dashboard = build()[file]
        gpu_queries = [
            t["expr"] for p in every_panel(dashboard) for t in p.get("targets", []) if "DCGM_" in t.get("expr", "")
        ]
        assert len(gpu_queries) >= 8
        assert all('Hostname=~"$node"' in q for q in gpu_queries), [q for q in gpu_queries if "Hostname" not in q]
        [gpu] = [v for v in dashboard["templating"]["list"] if v["name"] == "gpu"]
        assert 'Hostname=~"$node"' in gpu["query"]["query"]


def test_every_xy_chart_is_in_the_current_schema_with_one_series_per_experiment_and_attempt():
    """Grafana 11's XY chart options (mapping / series with field matchers, pluginVersion set, so no
    migration guesses), the step and the value merged on time, run and attempt, then split by
    experiment and attempt: two experiments selected are two lines, not a join that breaks, and a
    run restarted from step 1 under its name is two lines, not one that goes back to step 1."""
    from verl_rl_insight.dashboards.attempts import BY_ATTEMPT
    from verl_rl_insight.dashboards.panels import every_panel

    charts = [p for d in build().values() for p in every_panel(d) if p["type"] == "xychart"]
    assert len(charts) >= 10
    for chart in charts:
        assert chart["pluginVersion"].startswith("11.") and "dims" not in chart["options"], chart["title"]
        assert chart["options"]["mapping"] == "auto" and "seriesMapping" not in chart["options"]
        assert chart["options"]["series"][0]["x"]["field"]["matcher"] == {"id": "byName", "options": "step"}
        ids = [t["id"] for t in chart["transformations"]]
        assert ids == ["merge", "organize", "partitionByValues"], chart["title"]
        assert chart["transformations"][2]["options"]["fields"] == ["experiment_name", "attempt", "imported"]
        assert all(t["format"] == "table" and t["expr"].startswith(BY_ATTEMPT) for t in chart["targets"])


def test_the_trajectory_dashboard_reads_the_spans_this_package_sends():
    """Its TraceQL selects what state_timeline.rl_insight_trajectory makes (service verl, lane
    agent_loop, span "agent trajectory", ops as children) for the selected run only (the check)."""
    from verl_rl_insight.dashboards import traceql
    from verl_rl_insight.trainer.plugins import state_timeline

    dashboard = build()["rl_insight_agent_trajectories.json"]
    queries = [t["query"] for p in every_panel(dashboard) for t in p.get("targets", []) if "query" in t]
    assert len(queries) >= 4 and all(traceql.check(q) == [] for q in queries)
    source = open(state_timeline.__file__).read()
    assert '"agent trajectory"' in source and '"agent_loop"' in source and '"service.name": "verl"' in source
    assert any('name = "agent trajectory"' in q and "span.sample_index" in q and "status" in q for q in queries)
    assert any("status = error" in q for q in queries)
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["project", "experiment_name", "trace_id"]


def test_no_panel_draws_the_key_verl_sends_only_to_wandb_as_a_table():
    """DAPO's ``training/filter_groups/filtered_reward_counts``: verl's trainer pops it out of the metrics
    before ``logger.log`` and hands it to DapoFilteredRewardTableLogger, which sends a ``wandb.Table``: no
    scalar of it ever reaches a logger, so a panel of it would stay empty."""
    from pathlib import Path

    import verl

    root = Path(verl.__file__).parent
    assert (
        'wandb.log({"training/filter_groups/filtered_reward_counts": table}'
        in (root / "utils" / "tracking.py").read_text()
    )
    fit = (root / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert re.search(r"metrics\.pop\(DAPO_FILTERED_REWARD_COUNTS_KEY, None\)\s+self\.logger\.log\(data=metrics", fit)
    for path in DASHBOARDS_DIR.glob("*.json"):
        assert "filtered_reward_counts" not in path.read_text(), path.name
