"""What verl's profiler can do for a job (fixed at launch) and which requests the trainer takes:
the checks of the profiler plugin (profiler.py), and ``plugins.profiler.arm`` (a dormant torch
profiler configured at launch)."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from omegaconf import DictConfig

from verl_rl_insight.contract.wire import MAX_PROFILE_STEPS, PROFILE_ROLES

logger = logging.getLogger("verl_rl_insight")

# role -> where verl keeps its profiler settings
ROLE_PATHS = {
    "actor": "actor_rollout_ref.actor.profiler",
    "rollout": "actor_rollout_ref.rollout.profiler",
    "ref": "actor_rollout_ref.ref.profiler",
    "critic": "critic.profiler",
}
# What the trainer takes from a server's answer, whatever the server (a wrong or hostile one at the
# URL can list anything): the step boundary's work stays a few thousand steps at most.
MAX_ANSWER_BYTES = 4 * 2**20  # the server's list: at most 1000 requests of a few hundred bytes
MAX_TAKEN = 20  # requests held at once (the server keeps at most 20 open per run)
MAX_RANKS = 4096
TAKEN_KEYS = ("id", "state", "first_step", "last_step", "role", "ranks")
REQUEST_ID = re.compile(r"[0-9a-f]{12}")
ARM_HINT = "+rl_insight.plugins.profiler.arm=torch (rl-insight configures a dormant torch profiler at launch)"


def capability(config: DictConfig) -> dict[str, Any]:
    """What the job's profiler can do, from verl's config: tool, roles on (with their ranks), traces' folder."""
    from omegaconf import OmegaConf

    tool = OmegaConf.select(config, "global_profiler.tool", default=None)
    roles: dict[str, object] = {}
    for role, path in ROLE_PATHS.items():
        if OmegaConf.select(config, f"{path}.enable", default=False):
            all_ranks = bool(OmegaConf.select(config, f"{path}.all_ranks", default=False))
            ranks = list(OmegaConf.select(config, f"{path}.ranks", default=None) or [])
            roles[role] = "all" if all_ranks else (ranks or [0])
    save_path = OmegaConf.select(config, "global_profiler.save_path", default=None)
    return {"tool": tool, "roles": roles, "save_path": str(save_path) if save_path else None}


def refusal(request: dict[str, Any], able: dict[str, Any]) -> str | None:
    """Why the job cannot honour ``request`` (with the launch override that would let it), or None."""
    role = request.get("role")
    if not able["tool"]:
        return (
            "the job was launched without a profiler tool; relaunch with global_profiler.tool=torch "
            "global_profiler.steps=[] actor_rollout_ref.actor.profiler.enable=True, or with " + ARM_HINT
        )
    if not able["roles"]:
        return (
            f"no role has its profiler on; relaunch with {ROLE_PATHS[role or 'actor']}.enable=True, or with {ARM_HINT}"
        )
    if role and role not in able["roles"]:
        on = ", ".join(able["roles"])
        return f"the {role} profiler is off (on: {on}); relaunch with {ROLE_PATHS[role]}.enable=True"
    ranks = request.get("ranks")
    if ranks:
        for name in [role] if role else list(able["roles"]):
            covered = able["roles"][name]
            if covered != "all" and not set(ranks) <= set(covered):
                wanted = sorted(set(ranks) | set(covered))
                return (
                    f"the {name} profiler covers ranks {covered}, not {sorted(set(ranks) - set(covered))}; "
                    f"relaunch with {ROLE_PATHS[name]}.ranks=[{','.join(map(str, wanted))}]"
                )
    return None


def bound_problem(request: object) -> str | None:
    """Why a request the server listed is not one the trainer takes (None: it is): the shape the
    server's own rules give every request, checked again here, since any server can be at the URL."""
    if not isinstance(request, dict):
        return "not an object"
    first, last, ranks, role = (request.get(k) for k in ("first_step", "last_step", "ranks", "role"))
    if not isinstance(request.get("id"), str) or not REQUEST_ID.fullmatch(request["id"]):
        return "its id is not 12 hex digits"
    if type(first) is not int or type(last) is not int or not 1 <= first <= last:
        return "its first_step..last_step is not a range of steps"
    if last - first + 1 > MAX_PROFILE_STEPS:
        return f"it asks for {last - first + 1:,} steps (at most {MAX_PROFILE_STEPS})"
    if role is not None and role not in PROFILE_ROLES:
        return f"its role is not one of {', '.join(PROFILE_ROLES)}"
    if ranks is not None and (
        not isinstance(ranks, list) or len(ranks) > MAX_RANKS or any(type(r) is not int or r < 0 for r in ranks)
    ):
        return f"its ranks are not a list of at most {MAX_RANKS} ranks"
    return None


VERL_DEFAULT_SAVE_PATH = "outputs/profile"  # verl's own default: relative to the job's working directory


def traces_folder(verl_config: DictConfig, settings: DictConfig) -> str:
    """Where an armed profiler writes: a save_path the job set itself (absolute); else
    ``plugins.profiler.save_path``; else ``<RL_INSIGHT_HOME>/profiles/<project>/<experiment>``,
    not ``./outputs`` in whatever directory the job was started from."""
    from omegaconf import OmegaConf

    from verl_rl_insight.contract import environment

    given = str(OmegaConf.select(verl_config, "global_profiler.save_path", default=None) or VERL_DEFAULT_SAVE_PATH)
    if given.rstrip("/") != VERL_DEFAULT_SAVE_PATH:
        return os.path.abspath(given)
    if settings.get("save_path"):
        return os.path.abspath(os.path.expanduser(str(settings.save_path)))
    home = os.environ.get(environment.HOME) or os.path.join(os.path.expanduser("~"), ".rl-insight")
    run = [
        re.sub(r"[^A-Za-z0-9._-]", "_", str(OmegaConf.select(verl_config, f"trainer.{key}", default=None) or "run"))
        for key in ("project_name", "experiment_name")
    ]
    return os.path.abspath(os.path.join(home, "profiles", *run))


def arm(verl_config: DictConfig, settings: DictConfig) -> bool:
    """``plugins.profiler.arm``: give the job a torch profiler that profiles nothing until asked
    (tool, empty steps, the roles and ranks of the settings, an absolute folder). True if armed."""
    from omegaconf import OmegaConf, open_dict, read_write

    if not settings.get("arm"):
        return False
    if settings.arm != "torch":
        logger.warning("rl-insight: plugins.profiler.arm=%s: only torch can be armed; nothing armed", settings.arm)
        return False
    with read_write(verl_config), open_dict(verl_config):
        profiler = verl_config.global_profiler
        if OmegaConf.select(profiler, "tool", default=None) is None:
            profiler.tool = "torch"
        if OmegaConf.select(profiler, "steps", default=None) is None:
            profiler.steps = []
        profiler.save_path = traces_folder(verl_config, settings)
        for role in settings.arm_roles:
            path = ROLE_PATHS.get(str(role))
            if path is None:
                logger.warning(
                    "rl-insight: plugins.profiler.arm_roles: unknown role %s (known: %s)", role, ", ".join(ROLE_PATHS)
                )
                continue
            OmegaConf.update(verl_config, f"{path}.enable", True, force_add=True)
            ranks = list(settings.arm_ranks)
            OmegaConf.update(verl_config, f"{path}.all_ranks", not ranks, force_add=True)
            OmegaConf.update(verl_config, f"{path}.ranks", ranks, force_add=True)
    return True
