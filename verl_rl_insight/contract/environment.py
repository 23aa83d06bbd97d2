"""Every environment variable the package reads, by name, in one place."""

# trainer side
SERVER_URL = "RL_INSIGHT_SERVER_URL"  # the server, its push credential in the URL's password
TOKEN = "RL_INSIGHT_TOKEN"  # wins over the URL's
CONFIG_FILE = "RL_INSIGHT_CONFIG_FILE"  # a YAML file of the rl_insight block
CONFIG_JSON = "VERL_RL_INSIGHT_CONFIG"  # the Hydra block as JSON, set by the driver for its workers
PROJECT = "VERL_RL_INSIGHT_PROJECT"  # the run, handed to workers
EXPERIMENT = "VERL_RL_INSIGHT_EXPERIMENT"
AUTOLOAD = "VERL_RL_INSIGHT_AUTOLOAD"  # 0: the .pth file does not activate
PLUGINS = "VERL_RL_INSIGHT_PLUGINS"  # allow-list of external plugins (none: no external one)
COMMAND = "VERL_RL_INSIGHT_COMMAND"  # the driver's command line (JSON, redacted), for the run's card
WORKDIR = "VERL_RL_INSIGHT_WORKDIR"  # the driver's working folder, for the run's card (its git commit)
VERL_ENABLE = "VERL_RL_INSIGHT_ENABLE"  # what verl 0.9's main_ppo sets for trainer.logger rl_insight
# everything starting with one of these is forwarded to Ray workers
FORWARDED_PREFIXES = ("RL_INSIGHT_", "VERL_RL_INSIGHT_")

# server and commands
HOME = "RL_INSIGHT_HOME"  # ~/.rl-insight: services, data, state
ADVERTISE_IP = "RL_INSIGHT_ADVERTISE_IP"  # the address the server announces to trainers
MIRROR = "RL_INSIGHT_MIRROR"  # where `server install` downloads from
DEBUG = "RL_INSIGHT_DEBUG"  # tracebacks on the command line
