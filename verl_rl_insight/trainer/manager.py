"""The plugin manager: built-in plugins and third-party ones go through the same door.

Third-party packages declare an entry point in group ``verl_rl_insight``; the environment
variable ``VERL_RL_INSIGHT_PLUGINS`` is an allow-list of their names (unset: all, ``none``:
no external plugin). Any plugin, built-in or not, is switched off with
``plugins.<name>.enabled=false`` in the config.

A plugin is an object whose methods are marked ``@hookimpl``, its state on the instance: a
built-in module names its class ``Plugin``, and an entry point may load a class (an instance of
it is registered), an instance, or a module of hook functions. A fresh manager holds fresh
instances: nothing one run's plugins kept reaches the next. pluggy holds each plugin through an
``Isolated`` stand-in (one plugin's failing hook does not stop the others'); ``registered(pm,
name)`` gives the plugin itself.
"""

import difflib
import functools
import importlib
import logging
import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from types import ModuleType

import pluggy
from omegaconf import DictConfig

from verl_rl_insight.contract import environment
from verl_rl_insight.trainer import hookspecs
from verl_rl_insight.trainer.config import check_plugin_names, plugin_settings

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "verl_rl_insight"
ENV_ALLOW_LIST = environment.PLUGINS

DEFAULT_PLUGINS = (
    "verl_rl_insight.trainer.plugins.trainer_metrics",
    "verl_rl_insight.trainer.plugins.metric_push",
    "verl_rl_insight.trainer.plugins.state_timeline",
    "verl_rl_insight.trainer.plugins.rollout_engines",
    "verl_rl_insight.trainer.plugins.transfer_queue",
    "verl_rl_insight.trainer.plugins.probs_diff",
    "verl_rl_insight.trainer.plugins.group_stats",
    "verl_rl_insight.trainer.plugins.agent_loop",
    "verl_rl_insight.trainer.plugins.hardware",
    "verl_rl_insight.trainer.plugins.profiler",
    "verl_rl_insight.trainer.plugins.samples",
)


def _allowed_external(environ: Mapping[str, str]) -> set[str] | None:
    policy = environ.get(ENV_ALLOW_LIST)
    if policy is None or policy.strip() == "":
        return None
    if policy.strip().lower() == "none":
        return set()
    return {name.strip() for name in policy.split(",") if name.strip()}


def discover(environ: Mapping[str, str] | None = None) -> dict[str, Callable[[], object]]:
    """Every plugin this environment offers: {name: loader}, built-ins first."""
    environ = os.environ if environ is None else environ
    found: dict[str, Callable[[], object]] = {
        path.rsplit(".", 1)[1]: functools.partial(importlib.import_module, path) for path in DEFAULT_PLUGINS
    }
    allowed = _allowed_external(environ)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            logger.warning("rl-insight: external plugin %r shadows a built-in one and is ignored", ep.name)
            continue
        if allowed is not None and ep.name not in allowed:
            continue
        found[ep.name] = ep.load
    return found


def instantiate(loaded: object) -> object:
    """The object to register for what a loader returned: a built-in module's ``Plugin()``, an
    instance of a class, else the thing itself (an instance, or a module of hook functions)."""
    if isinstance(loaded, ModuleType) and isinstance(getattr(loaded, "Plugin", None), type):
        loaded = loaded.Plugin
    return loaded() if isinstance(loaded, type) else loaded


def build_plugin_manager(
    config: DictConfig,
    environ: Mapping[str, str] | None = None,
    strict: bool = True,
    plugins: Mapping[str, object] | None = None,
) -> pluggy.PluginManager:
    """A PluginManager with every enabled plugin registered under its name.

    Unknown plugin names in the config raise ConfigError when ``strict``; otherwise they are
    logged (once, by the caller's logger) and ignored. A plugin that fails to import is
    logged and skipped: one broken plugin must not take monitoring down with it. ``plugins``:
    objects registered in place of the plugins of the same name.
    """
    environ = os.environ if environ is None else environ
    pm = pluggy.PluginManager("verl_rl_insight")
    pm.add_hookspecs(hookspecs)
    available = discover(environ)
    known = set(available)
    for ep in entry_points(group=ENTRY_POINT_GROUP):  # filtered out by the allow-list, still known
        known.add(ep.name)
    if strict:
        check_plugin_names(config, known)
    for name, load in available.items():
        if not plugin_settings(config, name).get("enabled", True):
            continue
        try:
            plugin = (plugins or {}).get(name) or instantiate(load())
        except Exception:
            logger.exception("rl-insight: plugin %r failed to load and is skipped", name)
            continue
        try:
            pm.register(Isolated(pm, plugin, name), name=name)
        except pluggy.PluginValidationError as exc:  # a hook with arguments its spec does not give
            logger.warning("rl-insight: plugin %r is skipped: %s", name, exc)
            if pm.get_plugin(name) is not None:  # pluggy keeps what it registered before the error
                pm.unregister(name=name)
    warn_unknown_hooks(pm)
    return pm


class Isolated:
    """What the manager registers with pluggy for a plugin: the plugin's hook functions, each run on
    its own (``_isolated``; a hook wrapper as it is), and the plugin itself as ``plugin`` (what
    ``registered`` gives). A hook function that raises is logged (the first time, naming the plugin
    and the hook) and counts as no answer, and the other plugins of that hook still run: pluggy stops
    a hook call at the first exception, and the samples plugin raising on a batch without
    ``responses`` once kept group statistics from ever running on verl's v1 trainer.

    pluggy registers the functions it finds on the object it is given, as they are (``register``
    takes ``getattr(plugin, name)``; ``parse_hookimpl_opts`` only says which names and options), so
    a stand-in whose attributes are the wrapped functions is the way through its public API.
    ``functools.wraps`` keeps the marks and the signature pluggy reads."""

    def __init__(self, pm: pluggy.PluginManager, plugin: object, name: str) -> None:
        self.plugin = plugin
        for attribute in dir(plugin):
            options = pm.parse_hookimpl_opts(plugin, attribute)
            if options is None:
                continue
            function = getattr(plugin, attribute)
            if not (options.get("wrapper") or options.get("hookwrapper")):
                function = _isolated(function, name, options.get("specname") or attribute)
            setattr(self, attribute, function)

    def __getattr__(self, name: str) -> object:
        """The plugin's own attribute (what a third-party plugin reads of ``pm.get_plugin(name)``)."""
        return getattr(self.plugin, name)

    def __repr__(self) -> str:
        return f"Isolated({self.plugin!r})"


def registered(pm: pluggy.PluginManager, name: str) -> object | None:
    """The plugin object registered as ``name`` (not the stand-in pluggy holds), or None."""
    found: object | None = pm.get_plugin(name)
    return found.plugin if isinstance(found, Isolated) else found


def _isolated(function: Callable[..., object], plugin: str, hook: str) -> Callable[..., object]:
    said = False

    @functools.wraps(function)
    def call(*args: object, **kwargs: object) -> object:
        nonlocal said
        try:
            return function(*args, **kwargs)
        except Exception:
            if not said:
                said = True
                logger.exception("rl-insight: plugin %r failed in %s (the other plugins go on)", plugin, hook)
            return None

    return call


def warn_unknown_hooks(pm: pluggy.PluginManager) -> list[str]:
    """Warn, naming the plugin, of each ``@hookimpl`` whose name is no hook rl-insight calls (a
    misspelling never runs, and nobody would be told: pluggy's ``check_pending``, as a warning
    rather than an error so that the rest of that plugin works). Returns the warnings."""
    known = {name for name in dir(hookspecs) if name.startswith("rl_insight_")}
    said: list[str] = []
    for hook_name, caller in vars(pm.hook).items():
        if hook_name.startswith("_") or not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if impl.optionalhook:
                continue
            close = difflib.get_close_matches(hook_name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            said.append(
                f"rl-insight: plugin {impl.plugin_name!r} implements {hook_name!r}, which is no hook rl-insight "
                f"calls{hint}: it never runs"
            )
            logger.warning(said[-1])
    return said
