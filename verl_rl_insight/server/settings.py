"""Server settings: defaults < YAML file (--config) < command-line options."""

import dataclasses
import os
from pathlib import Path

import yaml


def default_home():
    return Path(os.environ.get("RL_INSIGHT_HOME", Path.home() / ".rl-insight"))


@dataclasses.dataclass
class ServerSettings:
    bind: str = "0.0.0.0"           # address every service listens on
    advertise_host: str = ""        # what trainers should use; found automatically when empty
    port: int = 18080
    prometheus_port: int = 9090
    prometheus: bool = True         # run Prometheus when a binary is found
    scrape_interval_s: float = 5.0
    retention: str = "30d"
    data_dir: str = ""
    token: str = ""

    def __post_init__(self):
        if not self.data_dir:
            self.data_dir = str(default_home() / "data")
        if not self.token:
            self.token = os.environ.get("RL_INSIGHT_TOKEN", "")

    @property
    def data_path(self):
        return Path(self.data_dir).expanduser()

    @classmethod
    def load(cls, config_file=None, **overrides):
        """Settings from a YAML file and keyword overrides (None values are ignored)."""
        values = {}
        if config_file:
            with open(config_file) as f:
                loaded = yaml.safe_load(f) or {}
            if not isinstance(loaded, dict):
                raise ValueError(f"{config_file}: expected a mapping of settings")
            known = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(loaded) - known)
            if unknown:
                raise ValueError(f"{config_file}: unknown setting(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
            values.update(loaded)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
