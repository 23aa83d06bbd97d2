"""The detectors' settings as the server config sets them and as ``rl-insight diagnose`` reads them
from ``GET /api/v1/info`` (``"health"``): one typed object (``HealthSettings``), the same wire as before."""

from verl_rl_insight.server.settings.alerts import AlertSettings
from verl_rl_insight.server.settings.health import DEFAULTS, SETTINGS, HealthSettings


def health_settings(alerts):
    """The detectors' settings as the server config's ``alerts:`` sets them."""
    return AlertSettings.from_mapping(alerts).detectors


def test_the_info_wire_is_every_setting_by_name_as_a_float():
    """An older diagnose merges ``"health"`` over its own dict of floats: the names, their order and
    the float values stay what the server sent before the settings were typed."""
    wire = health_settings({"kl_mads": 7, "stalled_for": "20m"}).as_dict()
    assert list(wire) == list(SETTINGS) and all(type(v) is float for v in wire.values())
    assert wire["kl_mads"] == 7.0 and wire["stall_s"] == 1200.0 and wire["window"] == 20.0
    assert "lower_is_better" not in wire  # the walk's own, never a setting


def test_diagnose_reads_an_older_and_a_newer_servers_settings():
    """A newer server's setting this version does not know is ignored; one an older server did not
    send keeps its default; a count of steps comes back an int, as the detectors slice with it."""
    sent = health_settings({"trend_far": 80}).as_dict()
    assert HealthSettings.from_wire({**sent, "a_newer_servers_setting": 0.5}) == health_settings({"trend_far": 80})
    older = {k: v for k, v in sent.items() if k != "zero_variance_sustain"}
    read = HealthSettings.from_wire(older)
    assert read.zero_variance_sustain == DEFAULTS.zero_variance_sustain and read.trend_far == 80
    assert type(read.trend_far) is int and type(read.kl_mads) is float
