"""Small hazards, each fixed where it lived: the sender's counters shared by two threads, a third-party
plugin's misspelled hook that never runs and nobody is told of, and a target writer that close()
had to wait out."""

import collections
import logging
import threading
import time

import pluggy

from tests.helpers import free_port
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.trainer import manager
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.client.sender import BatchSender
from verl_rl_insight.trainer.config import load_config
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.services import Services


class WatchedStats(collections.Counter):
    """The sender's stats, noting every write made without the sender's count lock held."""

    def __init__(self, lock):
        super().__init__()
        self.lock, self.unlocked_writes = lock, []

    def __setitem__(self, key, value):
        if not self.lock.locked():
            self.unlocked_writes.append((key, threading.current_thread().name))
        super().__setitem__(key, value)


def test_the_senders_counts_are_written_under_its_lock_from_either_thread(hub_server):
    """The training thread (a full queue) and the sender thread (sent, refused, failed) both count:
    each write holds the lock, so no count is lost between them (a free-threaded Python has no GIL)."""
    server = hub_server()
    sender = BatchSender(server.url + "/api/v1/push", queue_values=3, linger_s=0.01)
    sender.stats = stats = WatchedStats(sender._count_lock)
    sender.submit(MetricBatch("p", "e", 1, time.time(), {"a": 1.0, "b": 2.0}))
    sender.submit(MetricBatch("p", "e", 2, time.time(), {"a": 1.0, "b": 2.0}))  # over queue_values: dropped
    assert sender.flush(10)
    sender.url = f"http://127.0.0.1:{free_port()}/api/v1/push"  # the server goes away
    sender.submit(MetricBatch("p", "e", 3, time.time(), {"a": 1.0}))
    assert not sender.flush(2)
    assert stats["dropped_batches"] == 1 and stats["sent_batches"] == 1 and stats["failed_requests"] >= 1
    assert stats.unlocked_writes == []
    sender.close(0.1)


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


def test_closing_the_target_registry_does_not_wait_out_the_writers_pause(tmp_path):
    registry = TargetRegistry(tmp_path / "targets.json", save_interval_s=30)
    registry.register("127.0.0.1:9100", "node", ttl_s=0)  # a static target: written to disk
    deadline = time.monotonic() + 10
    while registry.writes < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    registry.register("127.0.0.1:9101", "node", ttl_s=0)  # waits for the writer's next turn, 30 s away
    started = time.monotonic()
    registry.close()
    assert time.monotonic() - started < 1.0, "close() waited for the writer's pause"
    assert "127.0.0.1:9101" in (tmp_path / "targets.json").read_text()  # close() still wrote what was pending
