"""Every PromQL expression the project ships goes through Prometheus' own parser (promtool 2.42, the
Debian package's): each panel query, variable query (the selector inside Grafana's ``label_values``) and
annotation query of every generated dashboard, and each expression of the rule file the server writes,
with Grafana's variables replaced by what Grafana puts there. The catch-all panel is also evaluated by
promtool against series of the keys it must show and hide: its regex as Prometheus reads it."""

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from verl_rl_insight.contract.attempts import ATTEMPT_METRIC
from verl_rl_insight.contract.naming import metric_name
from verl_rl_insight.dashboards import DASHBOARDS_DIR
from verl_rl_insight.dashboards.panels import M, every_panel
from verl_rl_insight.server.managed import alert_rules

PROJECT, EXPERIMENT = "verl_grpo_example_gsm8k", "qwen2.5_0.5b_grpo"
# What Grafana 11 puts in a Prometheus query: a multi-value variable becomes an alternation of its values,
# their regex characters escaped and the backslash doubled for the PromQL string (prometheusSpecialRegexEscape);
# ${var:regex} the regex without the PromQL escaping; the interval variables a duration.
GRAFANA = {
    "$project": f"({PROJECT}|rl-insight-demo)",
    "$experiment_name": "(" + EXPERIMENT.replace(".", "\\\\.") + "|simulated-1764600000)",
    "${project:regex}": f"({PROJECT}|rl-insight-demo)",
    "${experiment_name:regex}": "(" + EXPERIMENT.replace(".", "\\.") + "|simulated-1764600000)",
    "$replica": "(replica_0|replica_1)",
    "$node": "(node-0|node-1)",
    "$gpu": "(0|1)",
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
}
LABEL_VALUES = re.compile(r"label_values\((.+),\s*\w+\)", re.DOTALL)


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package prometheus has it; .ci/run installs it)")
    return path


def as_grafana_sends(expr: str) -> str:
    for variable in sorted(GRAFANA, key=len, reverse=True):
        expr = expr.replace(variable, GRAFANA[variable])
    unknown = re.findall(r"\$\{?[A-Za-z_]\w*(?::\w+)?\}?", expr)  # not label_replace's $1
    assert not unknown, f"variables the test does not know how Grafana fills: {unknown} in {expr}"
    return expr


def is_prometheus(node: dict, default: bool) -> bool:
    source = node.get("datasource")
    return default if source is None else isinstance(source, dict) and source.get("type") == "prometheus"


def dashboard_expressions(folder: Path = DASHBOARDS_DIR) -> Iterator[tuple[str, str]]:
    """(where, PromQL as Grafana sends it) of every query in the folder's dashboards: panel targets (also in
    collapsed rows), query variables (``label_values(<selector>, label)``: the selector) and annotations."""
    for path in sorted(folder.glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in every_panel(dashboard):
            panel_is_prometheus = is_prometheus(panel, default=True)
            for target in panel.get("targets", []):
                if "expr" in target and is_prometheus(target, panel_is_prometheus):
                    yield f"{path.name}: panel {panel.get('title')!r}", as_grafana_sends(target["expr"])
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query" and is_prometheus(variable, default=True):
                query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
                inner = LABEL_VALUES.fullmatch(query)
                assert inner, f"{path.name}: variable {variable['name']}: a query form this test does not read: {query}"
                yield f"{path.name}: variable {variable['name']!r}", as_grafana_sends(inner.group(1))
        for annotation in dashboard.get("annotations", {}).get("list", []):
            if "expr" in annotation and is_prometheus(annotation, default=True):
                yield f"{path.name}: annotation {annotation['name']!r}", as_grafana_sends(annotation["expr"])


def rule_expressions(rules_text: str) -> Iterator[tuple[str, str]]:
    for group in yaml.safe_load(rules_text)["groups"]:
        for rule in group["rules"]:
            yield f"rl-insight.rules.yml: {rule.get('alert') or rule.get('record')}", rule["expr"]


def refused(expressions: list[tuple[str, str]], folder: Path) -> list[str]:
    """``where: promtool's reason: expression`` for each expression Prometheus' parser refuses (each is a
    recording rule of one file that ``promtool check rules`` reads)."""
    rules = [{"record": f"rl_insight_parse_check_{i}", "expr": expr} for i, (_, expr) in enumerate(expressions)]
    path = folder / "every-expression.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "every-expression", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    found = []
    for line in (result.stdout + result.stderr).splitlines():
        match = re.search(r'rule (\d+), "rl_insight_parse_check_\d+": (.*)', line)
        if match:
            where, expr = expressions[int(match.group(1)) - 1]
            found.append(f"{where}: {match.group(2)}: {expr}")
    if result.returncode != 0 and not found:
        found.append(f"promtool refused the file: {result.stdout}{result.stderr}")
    return found


def test_every_promql_expression_of_the_dashboards_and_the_rule_file_parses_in_prometheus(tmp_path):
    dashboards = list(dashboard_expressions())
    assert len(dashboards) > 500
    assert sum(where.endswith("'project'") for where, _ in dashboards) == 5  # the variables are read too
    rules = list(rule_expressions(alert_rules.render(links_to={"grafana": "http://g", "prometheus": "http://p"})))
    assert len(rules) >= 10
    assert refused(dashboards + rules, tmp_path) == []
    rule_file = tmp_path / "rl-insight.rules.yml"  # the file itself, its annotation templates too
    rule_file.write_text(alert_rules.render(links_to={"grafana": "http://g", "prometheus": "http://p"}))
    result = subprocess.run([promtool(), "check", "rules", str(rule_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_query_is_refused_and_named_with_where_it_is(tmp_path):
    """The positive control: a dashboard folder with the catch-all's old unescaped ``\\d`` in a double-quoted
    string, an unclosed bracket in a panel and a broken variable selector; the sound ones pass."""
    run = 'project=~"$project",experiment_name=~"$experiment_name"'
    dashboard = {
        "panels": [
            {"title": "sound", "type": "timeseries", "targets": [{"expr": f"sum by (replica) (up{{{run}}})"}]},
            {"title": "escape", "type": "timeseries", "targets": [{"expr": f'{{__name__=~"{M}x_\\d+",{run}}}'}]},
            {
                "title": "bracket",
                "type": "timeseries",
                "targets": [{"expr": f"sum(rate(up{{{run}}}[$__rate_interval])"}],
            },
            {
                "title": "traces",
                "type": "table",
                "targets": [{"query": '{ span.x = "\\d" }', "datasource": {"type": "tempo"}}],
            },
        ],
        "templating": {
            "list": [
                {"name": "replica", "type": "query", "query": {"query": f"label_values(sum(up{{{run}}}, replica)"}}
            ]
        },
        "annotations": {"list": [{"name": "fine", "expr": f"changes(up{{{run}}}[1m]) > 0"}]},
    }
    (tmp_path / "d.json").write_text(json.dumps(dashboard))
    found = refused(list(dashboard_expressions(tmp_path)), tmp_path)
    assert [line.split(": could not parse")[0] for line in found] == [
        "d.json: panel 'escape'",
        "d.json: panel 'bracket'",
        "d.json: variable 'replica'",
    ], found
    assert "unknown escape sequence" in found[0] and "unclosed left parenthesis" in found[1]


def catch_all_expr() -> str:
    dashboard = json.loads((DASHBOARDS_DIR / "verl_trainer_v1_with_vllm_engine.json").read_text())
    [panel] = [p for p in every_panel(dashboard) if p.get("title") == "Every other key the trainer logs"]
    return as_grafana_sends(panel["targets"][0]["expr"])


def series(key: str, experiment: str = EXPERIMENT) -> str:
    return f'{metric_name(M, key)}{{project="{PROJECT}",experiment_name="{experiment}"}}'


def attempt_series(experiment: str = EXPERIMENT) -> str:
    """The hub's rl_insight_run_attempt of a run (the trainer panels join on it)."""
    return f'{ATTEMPT_METRIC}{{project="{PROJECT}",experiment_name="{experiment}"}}'


def joined_labels() -> str:
    """The labels a trainer panel's query gives a series of the run, in its first attempt."""
    return f'{{project="{PROJECT}",experiment_name="{EXPERIMENT}",attempt="1"}}'


def shown_as(key: str) -> str:
    """The labels a trainer panel gives ``key``'s series: its name as ``key``, the run's attempt."""
    return f'{{key="{metric_name(M, key)}",project="{PROJECT}",experiment_name="{EXPERIMENT}",attempt="1"}}'


def test_the_catch_all_panel_as_prometheus_reads_it_shows_a_key_no_panel_draws_and_hides_drawn_ones(tmp_path):
    """A key a newer verl adds to its fully async rollouter's statistics (every key verl 0.9.1 and main
    log has a panel now: ``fully_async/processing_time/tp50`` is on the async row) is on no panel of its
    own: the catch-all must show it. Keys the rows draw by name (actor/pg_loss) or by pattern
    (timing_s/gen, the MoE layer family) it must not, nor the same key of another run. Each series is
    named by its key and its run's attempt (the hub's rl_insight_run_attempt)."""
    from verl_rl_insight.dashboards import training

    assert re.fullmatch(training.shown(), metric_name(M, "fully_async/processing_time/tp50"))  # the async row's
    undrawn = "fully_async/monitor/queue/a_newer_verls_queue_size"
    assert not re.fullmatch(training.shown(), metric_name(M, undrawn)), "now drawn by a panel: pick another key"
    drawn = ["actor/pg_loss", "timing_s/gen", "rollout/moe/max_vio/layer_3", "training/global_step"]
    moe_layer = next(expr for where, expr in dashboard_expressions() if "panel 'MoE load imbalance per layer'" in where)
    inputs = [series(k) for k in [undrawn, *drawn]] + [series(undrawn, experiment="another-run")]
    inputs += [attempt_series(), attempt_series("another-run")]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": "1 1 1"} for s in inputs],
                "promql_expr_test": [
                    {
                        "expr": catch_all_expr(),
                        "eval_time": "2m",
                        "exp_samples": [{"labels": shown_as(undrawn), "value": 1}],
                    },
                    {
                        "expr": moe_layer,
                        "eval_time": "2m",
                        "exp_samples": [{"labels": shown_as("rollout/moe/max_vio/layer_3"), "value": 1}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "catch-all.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
