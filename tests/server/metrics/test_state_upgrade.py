"""A data folder written by an earlier hub is read back whole: a user who upgrades keeps exactly-once.

The files (``tests/data/hub_files``, with the script that wrote them) are a real ``hub-state.json``
and ``hub-promises.json`` of the hub before one stamp record replaced six. Three named scrapers:
``prometheus``, whose store lacked its first scrape (steps 1-3 to be sent again) and whose second
scrape (1-3 again, and 4-5) was written just before the crash, so its positions were never saved,
only its promises; ``mirror``, whose first scrape still awaits its store and whose second (4-5) was
being written when the state was saved; ``agent``, which confirms nothing and was sent 1-3."""

import json
import re
import shutil
from pathlib import Path

import pytest

FILES = Path(__file__).parents[2] / "data" / "hub_files"
T0 = 1_764_000_000.0  # the fake clock the files were written under
LINE = re.compile(r'^rl_insight_monitor_training_global_step\{experiment_name="a",project="p"\} (\S+) (\d+)$')
# what the earlier hub sent (tests/data/hub_files/SOURCE.md): steps 1-3 first, 4-5 in the scrapes the crash lost
FIRST_SENT = {1: 1764000001000, 2: 1764000002000, 3: 1764000003000, 4: 1764000005001, 5: 1764000005002}


def batch(step):
    return {"project": "p", "experiment_name": "a", "step": step, "time": T0 + step, "metrics": {"m": float(step)}}


def stamps(hub, name, at):
    exposure = hub.expose(name, at)
    body = exposure.body().decode()
    exposure.commit(True)
    return {int(float(m.group(1))): int(m.group(2)) for m in map(LINE.match, body.splitlines()) if m}


@pytest.fixture
def restarted(tmp_path):
    from verl_rl_insight.server.metrics.hub import MetricHub

    for name in ("hub-state.json", "hub-promises.json"):
        shutil.copy(FILES / name, tmp_path / name)
    now = [T0 + 9]
    hub = MetricHub(
        state_path=tmp_path / "hub-state.json",
        history_s=3600,
        clock=lambda: now[0],
        confirming=frozenset({"prometheus", "mirror"}),
    )
    for name in ("prometheus", "mirror", "agent"):  # each visits before the trainer's sender sends again
        assert stamps(hub, name, T0 + 9) == {}
    hub.push({"batches": [batch(step) for step in range(1, 6)]})  # the sender, after the 409
    return hub


def test_an_earlier_hubs_files_send_every_step_again_with_the_timestamp_it_was_first_sent_with(restarted):
    numbers, _ = restarted.awaiting(T0 + 9)["mirror"]
    assert numbers == [1764000005000]  # mirror's first scrape, still awaiting its store
    restarted.confirm("mirror", numbers, stored=set())  # its store lacks it
    assert stamps(restarted, "prometheus", T0 + 10) == FIRST_SENT
    assert stamps(restarted, "mirror", T0 + 10) == FIRST_SENT
    agent = stamps(restarted, "agent", T0 + 10)
    assert sorted(agent) == [4, 5], f"steps sent to agent before the restart came again: {agent}"
    assert agent[4] > (T0 + 9) * 1000  # the positive control: a step never promised is stamped anew
    assert stamps(restarted, "prometheus", T0 + 11) == {}  # nothing twice


def test_an_earlier_hubs_state_is_written_back_as_it_was_read(restarted, tmp_path):
    """The format is unchanged: what the hub writes of the positions it read is what it read
    (the seconds it last saw each scraper aside: a start counts as a sighting)."""
    from verl_rl_insight.server.metrics.positions import Scraper

    saved = json.loads((FILES / "hub-state.json").read_text())["scrapers"]
    for name, state in saved.items():
        again = Scraper.from_saved(name, state, T0 + 9, name != "agent").to_saved()
        assert {**again, "seen_at": None} == {**state, "seen_at": None}, name
