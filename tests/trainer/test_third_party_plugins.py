"""A third-party plugin's mistakes are named, never silent: a misspelled hook that would never run is
said in a warning naming the plugin (and the hook it was meant to be), and a hook taking arguments no hook
gives skips that plugin with a warning, the built-ins still registered."""

import logging

import pluggy

from verl_rl_insight.trainer import manager
from verl_rl_insight.trainer.config import load_config
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.services import Services


class MisspelledPlugin:
    """A third-party plugin with one hook spelled wrong (log_metric for log_metrics) and one right."""

    def __init__(self):
        self.configured = False

    @hookimpl
    def rl_insight_log_metric(self, run, metrics, step, timestamp):
        raise AssertionError("never called: no such hook")

    @hookimpl
    def rl_insight_configure(self, config):
        self.configured = True


class FakeEntryPoint:
    def __init__(self, name, obj):
        self.name, self._obj = name, obj

    def load(self):
        return self._obj


def test_a_misspelled_hook_in_a_third_party_plugin_is_named_in_a_warning(monkeypatch, caplog):
    plugin = MisspelledPlugin()
    monkeypatch.setattr(manager, "entry_points", lambda group: [FakeEntryPoint("acme_metrics", plugin)])
    with caplog.at_level(logging.WARNING, logger=manager.logger.name):
        pm = manager.build_plugin_manager(load_config(None, environ={}), environ={})
    warnings = [r.getMessage() for r in caplog.records if "rl_insight_log_metric'" in r.getMessage()]
    assert warnings == [
        "rl-insight: plugin 'acme_metrics' implements 'rl_insight_log_metric', which is no hook rl-insight "
        "calls (did you mean 'rl_insight_log_metrics'?): it never runs"
    ]
    config = load_config(None, environ={})
    pm.hook.rl_insight_configure(config=config, pm=pm, services=Services.of(config))
    assert plugin.configured  # the rest of the plugin works


class WrongArguments:
    @hookimpl
    def rl_insight_log_metrics(self, run, metrics, step, timestamp, extra):  # no hook gives ``extra``
        pass


def test_a_plugin_whose_hook_takes_arguments_no_hook_gives_is_skipped_naming_it(monkeypatch, caplog):
    monkeypatch.setattr(manager, "entry_points", lambda group: [FakeEntryPoint("acme_bad", WrongArguments())])
    with caplog.at_level(logging.WARNING, logger=manager.logger.name):
        pm = manager.build_plugin_manager(load_config(None, environ={}), environ={})
    assert pm.get_plugin("acme_bad") is None and pm.get_plugin("metric_push") is not None
    assert any("plugin 'acme_bad' is skipped" in r.getMessage() for r in caplog.records)
    assert isinstance(pm, pluggy.PluginManager)
