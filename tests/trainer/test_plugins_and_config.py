"""Plugins on and off through config, third-party plugins through entry points, config layering."""

import inspect
import json
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, run_python
from verl_rl_insight.commands.demo.verl_step import step_metrics
from verl_rl_insight.trainer import hookspecs
from verl_rl_insight.trainer.config import ConfigError, load_config


def test_every_hook_is_documented_in_the_readme_with_its_signature():
    readme = (REPO / "docs" / "plugins.md").read_text()
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("rl_insight_"):
            signature = f"{name}({', '.join(inspect.signature(spec).parameters)})"
            assert signature in readme, f"docs/plugins.md does not document the hook {signature}"
            assert spec.__doc__, f"{name} has no docstring"


def test_unknown_plugin_name_is_a_clear_error_listing_the_known_ones():
    import verl_rl_insight

    with pytest.raises(ConfigError) as err:
        verl_rl_insight.init("p", "e", config={"plugins": {"trainer_metrix": {"enabled": False}}})
    assert "trainer_metrix" in str(err.value)
    assert "trainer_metrics" in str(err.value) and "metric_push" in str(err.value)


def test_unknown_plugin_name_in_a_training_run_is_logged_and_training_goes_on(hub_server, monkeypatch, caplog):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    tracking = Tracking(
        "p",
        "typo",
        default_backend=["rl_insight"],
        config={"rl_insight": {"plugins": {"hardwear": {"enabled": False}}}},
    )
    tracking.log(step_metrics(1), step=1)
    tracking.finish()
    assert "unknown rl-insight plugin(s) in config: hardwear" in caplog.text
    assert server.hub.streams()[0]["step"] == 1  # the rest of monitoring still works


@pytest.mark.parametrize("where", ["top-level", "trainer"])
def test_hydra_override_switches_a_plugin_off(hub_server, monkeypatch, where):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    from verl.utils.tracking import Tracking

    block = {"plugins": {"trainer_metrics": {"enabled": False}}}
    config = {"rl_insight": block} if where == "top-level" else {"trainer": {"rl_insight": block}}
    tracking = Tracking("p", "off", default_backend=["rl_insight"], config=config)
    tracking.log(step_metrics(1), step=1)
    tracking.finish()
    assert server.hub.streams() == []


def test_config_layers_defaults_file_hydra_env(tmp_path):
    config_file = tmp_path / "rl.yaml"
    config_file.write_text(
        "server_url: http://from-file:1\ncollect_interval_s: 7\nplugins:\n  metric_push:\n    timeout_s: 1\n"
    )
    trainer_config = {
        "trainer": {"rl_insight": {"collect_interval_s": 8, "plugins": {"metric_push": {"timeout_s": 2}}}},
        "rl_insight": {"plugins": {"metric_push": {"timeout_s": 3}}},
    }
    config = load_config(trainer_config, environ={"RL_INSIGHT_CONFIG_FILE": str(config_file)})
    assert config.server_url == "http://from-file:1"
    assert config.collect_interval_s == 8  # Hydra beats the file
    assert config.plugins.metric_push.timeout_s == 3  # top-level beats trainer.rl_insight
    from verl_rl_insight.trainer.config import MetricPushSettings

    assert config.plugins.metric_push.queue_batches == MetricPushSettings().queue_batches  # defaults stay
    config = load_config(
        trainer_config,
        environ={"RL_INSIGHT_CONFIG_FILE": str(config_file), "RL_INSIGHT_SERVER_URL": "http://from-env:2/"},
    )
    assert config.server_url == "http://from-env:2"  # env beats everything


def test_bad_config_file_is_named_in_the_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(None, environ={"RL_INSIGHT_CONFIG_FILE": str(bad)})


@pytest.fixture(scope="module")
def example_plugin_dir(tmp_path_factory):
    """The example plugin package, really pip-installed (into a folder put on PYTHONPATH)."""
    target = tmp_path_factory.mktemp("example-plugin")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(REPO / "examples" / "rl-insight-example-plugin"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return target


PLUGIN_RUN = """
import json, os
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics
config = json.loads(os.environ["PLUGIN_RUN_CONFIG"]) if "PLUGIN_RUN_CONFIG" in os.environ else None
tracking = Tracking("p", "plugin-run", default_backend=["rl_insight"], config=config)
tracking.log(step_metrics(1), step=1)  # what verl's trainer logs at a step
tracking.finish()
"""


def run_with_plugin(plugin_dir, out, config=None, extra_env=None):
    env = {"EXAMPLE_JSONL_PATH": str(out), **(extra_env or {})}
    if config:
        env["PLUGIN_RUN_CONFIG"] = json.dumps(config)
    result = run_python(PLUGIN_RUN, env=env, pythonpath=plugin_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_third_party_plugin_is_called_then_disabled_through_config(example_plugin_dir, tmp_path):
    out = tmp_path / "calls.jsonl"
    [call] = run_with_plugin(example_plugin_dir, out)
    keys = sorted(step_metrics(1))
    assert call == {"project": "p", "experiment_name": "plugin-run", "step": 1, "keys": keys}
    out.unlink()
    assert (
        run_with_plugin(
            example_plugin_dir, out, config={"rl_insight": {"plugins": {"example_jsonl": {"enabled": False}}}}
        )
        == []
    )
    assert run_with_plugin(example_plugin_dir, out, extra_env={"VERL_RL_INSIGHT_PLUGINS": "none"}) == []
    assert len(run_with_plugin(example_plugin_dir, out, extra_env={"VERL_RL_INSIGHT_PLUGINS": "example_jsonl"})) == 1


def test_plugins_command_lists_builtin_and_third_party(example_plugin_dir):
    result = run_python(
        "from verl_rl_insight.commands import main; main(['plugins', '--json'])", pythonpath=example_plugin_dir
    )
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["trainer_metrics"]["source"] == "built-in"
    assert rows["example_jsonl"] == {"name": "example_jsonl", "source": "entry point", "enabled": True}


@pytest.mark.parametrize(
    "block, key, known",
    [
        ({"plugins": {"metric_push": {"queue_batchez": 10}}}, "plugins.metric_push.queue_batchez", "queue_batches"),
        ({"plugins": {"hardware": {"intervals": 2}}}, "plugins.hardware.intervals", "interval_s"),
        ({"server_ulr": "http://127.0.0.1:1"}, "server_ulr", "server_url"),
    ],
)
def test_a_typo_in_a_trainer_side_key_is_refused_naming_the_known_keys(block, key, known):
    import verl_rl_insight

    with pytest.raises(ConfigError) as err:
        verl_rl_insight.init("p", "e", config=block)
    assert repr(key) in str(err.value) and known in str(err.value)


def test_a_value_of_the_wrong_type_is_refused_naming_the_key():
    import verl_rl_insight

    with pytest.raises(ConfigError) as err:
        verl_rl_insight.init("p", "e", config={"plugins": {"metric_push": {"timeout_s": "soon"}}})
    assert "plugins.metric_push.timeout_s" in str(err.value)


def test_max_request_bytes_changes_how_the_sender_splits_requests(hub_server, monkeypatch):
    """The README's metric_push.max_request_bytes is read: no push body the hub receives is larger."""
    import verl_rl_insight
    from verl_rl_insight.trainer.plugins import metric_push

    server = hub_server()
    sizes = []
    push = server.hub.push_body

    def slow_first_push(body, gate=None):  # the batches logged meanwhile queue up: the next request could take them all
        if not sizes:
            time.sleep(0.5)
        sizes.append(len(body))
        return push(body, gate)

    monkeypatch.setattr(server.hub, "push_body", slow_first_push)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    verl_rl_insight.init("p", "small", config={"plugins": {"metric_push": {"max_request_bytes": 4096}}})
    assert metric_push.sender().max_request_bytes == 4096
    for step in range(1, 41):
        verl_rl_insight.log({f"metric_{i}": float(i) for i in range(20)}, step=step)
    verl_rl_insight.finish(timeout_s=20)
    assert server.hub.streams()[0]["step"] == 40
    assert max(sizes) <= 4096, sizes
    assert len(sizes) >= 39 * 700 // 4096  # a batch of 20 metrics is about 700 bytes


def test_the_readme_configuration_block_is_exactly_the_typed_defaults(tmp_path):
    """Every key the README documents is one the code reads (a typo there would be refused), with
    the default the README gives, and no setting the code has is missing from the README."""
    from omegaconf import OmegaConf

    from verl_rl_insight.trainer.config import _defaults, load_config

    readme = (REPO / "docs" / "getting-started.md").read_text()
    block = readme.split("prints the result, `rl-insight plugins` lists plugins", 1)[1]
    block = block.split("```\n", 1)[1].split("```", 1)[0]
    documented = tmp_path / "readme.yaml"
    documented.write_text(block)
    loaded = load_config(config_file=str(documented), environ={})  # an unknown key would raise
    assert OmegaConf.to_container(OmegaConf.load(documented)) == OmegaConf.to_container(_defaults())
    assert OmegaConf.to_container(loaded) == OmegaConf.to_container(_defaults())


def test_each_plugin_manager_holds_its_own_plugin_objects_so_one_runs_state_never_reaches_another():
    """Plugins are objects: two managers (two runtimes, one after the other in a process) share no
    state; a run the first one saw is unknown to the second, and finishing it there sends nothing."""
    from verl_rl_insight.trainer.config import BUILTIN_PLUGINS
    from verl_rl_insight.trainer.manager import build_plugin_manager, registered
    from verl_rl_insight.trainer.runtime import RunInfo
    from verl_rl_insight.trainer.services import Services

    plugins = {"hardware": {"enabled": False}, "samples": {"enabled": True}}
    config = load_config({"rl_insight": {"plugins": plugins}}, environ={})
    first, second = build_plugin_manager(config, environ={}), build_plugin_manager(config, environ={})

    class Exporter:  # a plugin object that keeps what its manager exports
        def __init__(self):
            self.sent = []

        @hookspecs.hookimpl
        def rl_insight_export_batch(self, batch):
            self.sent.append(batch)

    exporters = {}
    for pm in (first, second):
        exporters[id(pm)] = Exporter()
        pm.register(exporters[id(pm)])
        pm.hook.rl_insight_configure(config=config, pm=pm, services=Services.of(config))
    sent = {key: exporter.sent for key, exporter in exporters.items()}
    first.hook.rl_insight_log_metrics(run=RunInfo("p", "e"), metrics=step_metrics(1, 5), step=1, timestamp=1.0)
    second.hook.rl_insight_shutdown(timeout_s=0.1)
    assert sent[id(second)] == []  # the second never saw the run: no "finished" for it
    first.hook.rl_insight_shutdown(timeout_s=0.1)
    finished = [b.samples()[0] for b in sent[id(first)] if b.step is None]
    assert finished == [{"rl_insight_run_finished": 0.0}, {"rl_insight_run_finished": 1.0}]
    for name in BUILTIN_PLUGINS:  # none is one object made at import (group_stats and samples once were)
        if name != "hardware":
            assert registered(first, name) is not registered(second, name), name
            assert type(registered(first, name)).__name__ == "Plugin", name


def test_a_plugin_that_raises_in_a_hook_leaves_the_other_plugins_of_that_hook_running(caplog):
    """pluggy stops a hook call at the first exception: the samples plugin (registered last, so
    called first) raising on verl's v1 batch kept group statistics from ever running. Each plugin's
    hook functions now run on their own; the failure is logged once, naming the plugin and hook. A
    hook wrapper is left as it is (it sees what the calls under it raise), and the runtime's
    ``plugin(name)`` is the plugin object itself, not what pluggy holds."""
    from verl_rl_insight.trainer.manager import build_plugin_manager, registered
    from verl_rl_insight.trainer.runtime import RunInfo

    class Raising:
        @hookspecs.hookimpl
        def rl_insight_advantage_batch(self, run, batch, step, trainer):
            raise KeyError("responses")

    class Recorder:
        def __init__(self):
            self.steps = []

        @hookspecs.hookimpl
        def rl_insight_advantage_batch(self, run, batch, step, trainer):
            self.steps.append(step)

        @hookspecs.hookimpl(wrapper=True)
        def rl_insight_collect(self, run):
            return (yield)

    recorder, raising = Recorder(), Raising()
    plugins = {"hardware": {"enabled": False}, "samples": {"enabled": True}}
    config = load_config({"rl_insight": {"plugins": plugins}}, environ={})
    pm = build_plugin_manager(config, environ={}, plugins={"agent_loop": recorder, "samples": raising})
    assert registered(pm, "samples") is raising and registered(pm, "agent_loop") is recorder
    assert pm.get_plugin("agent_loop").steps is recorder.steps  # what pluggy holds reads as the plugin
    [wrapper] = [i for i in pm.hook.rl_insight_collect.get_hookimpls() if i.plugin_name == "agent_loop"]
    assert wrapper.wrapper and wrapper.function == recorder.rl_insight_collect
    callers = [impl.plugin_name for impl in pm.hook.rl_insight_advantage_batch.get_hookimpls()]
    assert callers.index("samples") > callers.index("agent_loop")  # pluggy calls the last one first
    with caplog.at_level("ERROR", logger="verl_rl_insight"):
        for step in (1, 2):
            pm.hook.rl_insight_advantage_batch(run=RunInfo("p", "e"), batch=object(), step=step, trainer=None)
    assert recorder.steps == [1, 2]
    said = [r.getMessage() for r in caplog.records if "failed in" in r.getMessage()]
    assert said == ["rl-insight: plugin 'samples' failed in rl_insight_advantage_batch (the other plugins go on)"]
