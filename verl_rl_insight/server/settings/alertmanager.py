"""The server config's ``alertmanager:`` section (receivers, route, ... in Alertmanager's own
syntax, passed through), checked when the settings are read; ``managed/alertmanager.py`` renders it.
settings/server.py imports this module, never the other way round."""

from verl_rl_insight.contract.errors import ConfigError

NO_RECEIVER = "rl-insight-none"  # where alerts go when no receiver is configured
PASSED_THROUGH = ("global", "route", "receivers", "inhibit_rules", "time_intervals", "mute_time_intervals", "templates")


def check_settings(section: object) -> None:
    """The ``alertmanager:`` mapping: a ConfigError naming the key that is wrong."""
    if not isinstance(section, dict):
        raise ConfigError("alertmanager must be a mapping (receivers, route, ... in Alertmanager's syntax)")
    unknown = sorted(set(section) - set(PASSED_THROUGH))
    if unknown:
        raise ConfigError(
            f"alertmanager: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(PASSED_THROUGH)}"
        )
    receivers = section.get("receivers", [])
    if not isinstance(receivers, list):
        raise ConfigError("alertmanager.receivers must be a list of receivers ({name: ..., webhook_configs: ...})")
    names = set()
    for i, receiver in enumerate(receivers):
        name = receiver.get("name") if isinstance(receiver, dict) else None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"alertmanager.receivers[{i}] needs a name")
        if name in names or name == NO_RECEIVER:
            raise ConfigError(
                f"alertmanager.receivers[{i}]: the name {name!r} is " + ("taken twice" if name in names else "reserved")
            )
        names.add(name)
    if not isinstance(section.get("route", {}), dict):
        raise ConfigError("alertmanager.route must be a mapping (receiver, group_by, routes, ...)")
