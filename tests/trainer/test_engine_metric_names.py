"""vLLM and SGLang metric names: the one list (contract/engine_metrics.py) the dashboards, the alert rules,
the terminal view and the simulated engines take them from, checked against the metric definitions in the
released wheels of the versions the installed verl pins (its ``vllm`` / ``sglang`` extras), read from the
wheels' source with ``ast`` (tests/engine_wheels.py): an upstream rename fails here instead of blanking a
panel. The wheels come from a cache that .ci/run fills; no test reaches the network."""

import functools
import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import engine_wheels
from tests.conftest import in_ci
from verl_rl_insight.contract import engine_metrics
from verl_rl_insight.dashboards import DASHBOARDS_DIR

ENGINE_NAME = re.compile(r"\b(?:vllm|sglang):[A-Za-z0-9_:]+")


def release(engine: str) -> str:
    version = engine_wheels.pinned_versions()[engine]
    return f"{engine}=={version}"


def wheel(engine: str):
    versions = engine_wheels.pinned_versions()
    assert engine in versions, f"the installed verl pins no {engine} version in its extras"
    path = engine_wheels.wheel_path(engine, versions[engine])
    if path is None:
        why = (
            f"no {engine}=={versions[engine]} wheel in {engine_wheels.cache_dir()} "
            "(python3 -m tests.engine_wheels downloads it; .ci/run does)"
        )
        if in_ci():  # .ci/run fills the cache: a missing wheel there is a failure
            pytest.fail(why)
        pytest.skip(why)
    return path


@functools.cache
def upstream_sources(engine: str) -> dict[str, str]:
    return engine_wheels.wheel_sources(wheel(engine), engine)


def used(engine: str) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(m.name, m.kind, m.labels) for m in engine_metrics.of(engine)]


@pytest.mark.parametrize("engine", engine_metrics.ENGINES)
def test_every_engine_metric_the_project_reads_is_defined_so_in_the_release_verl_pins(engine):
    defined = engine_wheels.definitions(upstream_sources(engine), engine)
    assert len(defined) > 50, f"the definitions reader found only {sorted(defined)} in {release(engine)}"
    assert engine_wheels.problems(used(engine), defined, release(engine)) == []


def test_a_metric_renamed_retyped_or_relabelled_upstream_fails_the_check():
    """The positive control: the same check on copies of the real sources, each changed the way an
    upstream release could change them."""
    vllm = dict(upstream_sources("vllm"))
    loggers = "vllm/v1/metrics/loggers.py"
    assert '"vllm:num_requests_running"' in vllm[loggers]
    vllm[loggers] = vllm[loggers].replace('"vllm:num_requests_running"', '"vllm:num_running_requests"')
    assert '+ ["finished_reason"]' in vllm[loggers]
    vllm[loggers] = vllm[loggers].replace('+ ["finished_reason"]', '+ ["finish_reason"]')
    spec = "vllm/v1/spec_decode/metrics.py"
    assert '("vllm:spec_decode_num_drafts",' in vllm[spec]  # named through a loop over a literal list
    vllm[spec] = vllm[spec].replace('("vllm:spec_decode_num_drafts",', '("vllm:spec_decode_drafts",')
    problems = engine_wheels.problems(used("vllm"), engine_wheels.definitions(vllm, "vllm"), "vllm (changed)")
    assert [p.split(" (")[0] for p in problems] == [
        "vllm:num_requests_running",
        "vllm:request_success has no label finished_reason in vllm",
        "vllm:spec_decode_num_drafts",
    ], problems
    assert problems[0] == "vllm:num_requests_running (gauge) is not defined in vllm (changed)"

    sglang = dict(upstream_sources("sglang"))
    collector = "sglang/srt/observability/metrics_collector.py"
    definition = 'Counter(\n            name="sglang:num_requests_total"'
    assert definition in sglang[collector]
    sglang[collector] = sglang[collector].replace(definition, definition.replace("Counter", "Gauge"))
    [problem] = engine_wheels.problems(used("sglang"), engine_wheels.definitions(sglang, "sglang"), "sglang")
    assert problem.startswith("sglang:num_requests_total is a gauge in sglang (") and problem.endswith(
        "), not a counter"
    )


def test_the_definitions_reader_follows_literals_f_strings_loops_and_class_attributes():
    """The shapes the engines write their definitions in, in one made-up module; a log call is no metric."""
    source = """
import prometheus_client
from prometheus_client import Gauge
PREFIX = "vllm:"

class Logger:
    _histogram_cls = prometheus_client.Histogram

    def __init__(self, labelnames):
        Gauge(name="vllm:plain", documentation="d", labelnames=labelnames + ["reason"])
        prometheus_client.Counter(f"{PREFIX}formatted", "d")
        specs = [("vllm:looped_a", "d"), ("vllm:looped_b", "d")]
        for name, doc in specs:
            self._histogram_cls(name=name, documentation=doc)
        logger.info("vllm:not_a_metric %s", 1)
"""
    defined = engine_wheels.definitions({"vllm/fake.py": source}, "vllm")
    assert {name: (d.kind, sorted(d.labels)) for name, d in defined.items()} == {
        "vllm:plain": ("gauge", ["reason"]),
        "vllm:formatted": ("counter", []),
        "vllm:looped_a": ("histogram", []),
        "vllm:looped_b": ("histogram", []),
    }


def dashboard_names(file: str) -> set[str]:
    return set(ENGINE_NAME.findall((DASHBOARDS_DIR / file).read_text()))


def test_dashboards_alert_rules_watch_and_simulated_engines_name_only_what_the_list_holds():
    from verl_rl_insight.commands.demo.simulated_engines import EngineSimulator
    from verl_rl_insight.commands.watch.data import ENGINES
    from verl_rl_insight.server.managed import alert_rules

    listed = engine_metrics.all_series()
    for engine in engine_metrics.ENGINES:
        drawn = dashboard_names(f"verl_trainer_v1_with_{engine}_engine.json")
        assert drawn - listed == set()
        undrawn = [m.name for m in engine_metrics.of(engine) if not set(m.series) & drawn]
        assert undrawn == [], "listed but drawn by no panel of the engine's dashboard"
        assert {n.split(":")[0] for n in drawn} == {engine}
    assert set(ENGINE_NAME.findall(alert_rules.render())) - listed == set()
    assert {n for names in ENGINES.values() for n in names} - listed == set()
    for engine in engine_metrics.ENGINES:
        simulator = EngineSimulator(engine, 0)
        try:
            text = generate_latest(simulator.registry).decode()
        finally:
            simulator.close()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        assert {s.name for s in samples if not s.name.endswith("_created")} == {
            series for m in engine_metrics.of(engine) for series in m.series
        }
        for metric in engine_metrics.of(engine):  # the labels queries group by (finished_reason)
            assert all(set(metric.labels) <= set(s.labels) for s in samples if s.name in metric.series)
