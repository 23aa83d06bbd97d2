"""The checks of the training job's side: this shell's environment, verl and its patches, what Ray workers
get, and the Hydra overrides the job would run with."""

import logging
import os
from collections.abc import Sequence

from verl_rl_insight.commands.doctor.report import Report
from verl_rl_insight.contract import environment, server_url

SUPPORTED_VERL = ((0, 6), (0, 10))  # 0.6 <= verl < 0.10


def _url_fix(url: str, needs_token: bool, server_here: bool = False) -> str:
    bare = url or "http://<server-ip>:18080"
    if server_here and needs_token:  # works when pasted, and this report (often pasted on) holds no token
        return 'export RL_INSIGHT_SERVER_URL="$(rl-insight server url)"'
    if not needs_token:
        return f"export RL_INSIGHT_SERVER_URL={bare}"
    scheme, _, rest = bare.partition("://")  # the URL carries the token; this report (often pasted) never shows it
    return (
        f"export RL_INSIGHT_SERVER_URL={scheme}://rl-insight:<token>@{rest}   (the line `rl-insight server start` "
        "printed; `rl-insight server status --secrets` shows it with the token)"
    )


def check_environment(report: Report, url: str, needs_token: bool = False, server_here: bool = False) -> None:
    if os.environ.get(environment.SERVER_URL):
        report.ok("RL_INSIGHT_SERVER_URL", server_url.redact(os.environ[environment.SERVER_URL]))
    else:
        report.problem(
            "RL_INSIGHT_SERVER_URL",
            "not set in this shell: trainers would send nothing",
            _url_fix(url, needs_token, server_here),
        )
    try:
        import verl
    except ImportError:
        report.problem("verl", "not importable in this Python", "pip install verl (0.6 to 0.9.x)")
        return
    version = tuple(int(p) for p in verl.__version__.split(".")[:2] if p.isdigit())
    if SUPPORTED_VERL[0] <= version < SUPPORTED_VERL[1]:
        report.ok("verl version", verl.__version__)
    else:
        report.problem("verl version", f"{verl.__version__} is outside 0.6 to 0.9.x", "use a supported verl")
    import verl.utils.tracking as tracking

    if "rl_insight" in tracking.Tracking.supported_backend and hasattr(tracking.Tracking.__init__, "__wrapped__"):
        report.ok("patches active", "Tracking accepts rl_insight in this Python environment")
    else:
        report.problem(
            "patches active",
            "verl's Tracking is not patched here",
            "unset VERL_RL_INSIGHT_AUTOLOAD=0, or run the job with rl-insight run -- ...",
        )
    try:
        import verl.trainer.main_ppo as main_ppo

        quiet = logging.getLogger("verl_rl_insight")
        quiet.disabled = True  # no run is named here, so no credential is made: that is not news
        try:
            env = main_ppo.get_ppo_ray_runtime_env()["env_vars"]
        finally:
            quiet.disabled = False
    except Exception as exc:
        report.skip("Ray workers", f"verl.trainer.main_ppo does not import here ({exc})")
        return
    ours = server_url.without_credentials(os.environ.get(environment.SERVER_URL) or "")
    if ours and env.get(environment.SERVER_URL) == ours:
        report.ok(
            "Ray workers", "RL_INSIGHT_* reach them through verl's runtime_env, with a run credential, not the token"
        )
    elif os.environ.get(environment.SERVER_URL):
        report.problem(
            "Ray workers",
            "RL_INSIGHT_SERVER_URL would not reach them",
            "check that verl.trainer.main_ppo is patched (patches active above)",
        )


def check_overrides(report: Report, overrides: Sequence[str]) -> None:
    if not overrides:
        report.skip("trainer config", "no Hydra overrides given (rl-insight doctor -- <your overrides>)")
        return
    import verl.trainer.main_ppo as main_ppo
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(main_ppo.__file__), "config"), version_base=None
    ):
        config = compose(config_name="ppo_trainer", overrides=list(overrides))
    loggers = config.trainer.logger
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    if "rl_insight" in loggers or "rl-insight" in loggers:
        report.ok("trainer.logger", str(loggers))
    else:
        report.problem("trainer.logger", f"{loggers} has no rl_insight", 'trainer.logger=\'["console","rl_insight"]\'')
    if config.actor_rollout_ref.rollout.disable_log_stats:
        report.problem(
            "disable_log_stats",
            "True: vLLM / SGLang serve no engine metrics",
            "actor_rollout_ref.rollout.disable_log_stats=False",
        )
    else:
        report.ok("disable_log_stats", "False: engine metrics are served")
    tq = config.get("transfer_queue") or {}
    if tq.get("enable") and not (tq.get("metrics") or {}).get("enabled"):
        report.problem(
            "transfer_queue.metrics.enabled",
            "TransferQueue is on but its metrics are off",
            "transfer_queue.metrics.enabled=True",
        )
    else:
        report.ok("transfer_queue.metrics.enabled", str((tq.get("metrics") or {}).get("enabled", False)))
