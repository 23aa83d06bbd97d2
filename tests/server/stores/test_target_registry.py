"""The target registry's persistence: batched (a few writes however many registrations), atomic
(a reader never sees half a file), complete after close, read back on the next start."""

import json
import threading
import time

from verl_rl_insight.server.stores.targets import TargetRegistry


def test_2000_static_registrations_cost_a_few_atomic_writes_and_all_survive_a_restart(tmp_path):
    store = tmp_path / "targets.json"
    registry = TargetRegistry(store, save_interval_s=0.2)
    seen, broken, stop = [], [], threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(len(json.loads(store.read_text())))
            except FileNotFoundError:
                pass
            except ValueError as exc:
                broken.append(str(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(2000):
        registry.register(f"127.0.0.1:{10000 + i}", "node-exporter", {"node": f"n{i}"}, ttl_s=0)
    registry.close()
    stop.set()
    thread.join()
    assert not broken, broken[:3]
    assert registry.writes <= 20, registry.writes
    assert len(json.loads(store.read_text())) == 2000
    again = TargetRegistry(store)
    assert len(again.list()) == 2000 and again.list()[0]["labels"]["node"].startswith("n")


def test_heartbeats_of_expiring_targets_write_nothing(tmp_path):
    store = tmp_path / "targets.json"
    registry = TargetRegistry(store)
    for _ in range(100):
        registry.register("127.0.0.1:8000", "vllm", {"replica": "0"}, ttl_s=90)
    registry.close()
    assert registry.writes == 0 and not store.exists()


def test_the_labels_the_router_reads_for_a_delete_are_the_listed_target_s_and_none_once_it_expired():
    """``labels(job, address)``: what a run credential's DELETE is checked against (one lookup):
    the live target's labels as ``list()`` shows them; {} for a target unknown or expired."""
    now = [1000.0]
    registry = TargetRegistry(clock=lambda: now[0])
    registry.register("127.0.0.1:8000", "vllm", {"project": "p", "experiment_name": "e"}, ttl_s=30)
    registry.register("127.0.0.1:9100", "node-exporter", {"node": "n1"}, ttl_s=0)
    assert (
        registry.labels("vllm", "127.0.0.1:8000")
        == registry.list()[1]["labels"]
        == {
            "project": "p",
            "experiment_name": "e",
        }
    )
    assert registry.labels("vllm", "127.0.0.1:8001") == {} and registry.labels("sglang", "127.0.0.1:8000") == {}
    now[0] += 31
    assert registry.labels("vllm", "127.0.0.1:8000") == {}  # expired: as list() no longer shows it
    assert [t["job"] for t in registry.list()] == ["node-exporter"]
    assert registry.labels("node-exporter", "127.0.0.1:9100") == {"node": "n1"}


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
