"""The server parts' own counters (span store, span relay, span index, run keys, the explorer's
histories, the timeline figures) are typed records: read by attribute in the code, by name where a
test or a report names one, and reported in ``/api/v1/info`` as the same JSON as when they were dicts."""

import json

import pytest

from tests.helpers import free_port, http, start_hub_process, stop_group
from verl_rl_insight.server.settings.health import DEFAULTS, SETTINGS
from verl_rl_insight.server.stores.span_relay import RelayStats


def test_a_counter_reads_by_name_and_a_misspelled_name_is_a_key_error():
    stats = RelayStats()
    stats.dropped += 2
    assert stats["dropped"] == 2 and stats.as_dict() == {"relayed": 0, "dropped": 2, "failed": 0}
    with pytest.raises(KeyError, match="droped"):
        stats["droped"]  # a name that is no counter is never a silent 0


def test_the_info_route_reports_the_counters_and_the_detector_settings_as_before(tmp_path):
    """What an older ``rl-insight diagnose`` and a person reading /api/v1/info see: the counters by
    name, the detectors' settings by name as floats (``HealthSettings.as_dict``)."""
    port = free_port()
    process = start_hub_process(port, tmp_path)
    try:
        info = json.loads(http("GET", f"http://127.0.0.1:{port}/api/v1/info")[1])
    finally:
        stop_group(process)
    assert info["timeline_figures"] == {"steps": 0, "dropped": 0, "failed": 0, "dropped_memory": 0}
    assert info["health"] == DEFAULTS.as_dict() and list(info["health"]) == list(SETTINGS)
    assert info["health"]["window"] == 20.0 and info["health"]["stall_s"] == 900.0
