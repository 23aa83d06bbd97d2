"""The run's logged keys as the explorer names them, and the key curves of the run page.

The hub holds series names (``critic/score/mean`` arrives as ``rl_insight_monitor_critic_score_mean``,
``contract.naming.metric_name``), a mapping that loses the slashes. A series is named back with
verl's key where one is known (the keys the generated dashboards name, the detectors' keys, the
keys verl makes at run time), else by its group (``dashboards.keys.GROUPS``, the longest prefix):
``val_core_openai_gsm8k_reward_mean_1`` -> ``val-core/openai_gsm8k_reward_mean_1``. Any name works
in a request for curves: a key and its series name map to the same series.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from verl_rl_insight.contract.naming import metric_name
from verl_rl_insight.contract.verl_keys import (
    ENTROPY,
    RESPONSE_LENGTH_CLIP_RATIO,
    ROLLOUT_PROBS_DIFF_MEAN,
    STEP_TIME,
    THROUGHPUT,
)
from verl_rl_insight.dashboards import DASHBOARDS_DIR
from verl_rl_insight.dashboards.keys import GROUPS, RUNTIME_KEYS, STATS
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.modes import verl_key
from verl_rl_insight.server.settings.health import HealthSettings

PREFIX = detectors.PREFIX
_GROUPS = sorted(((metric_name("", g), g) for g in GROUPS), key=lambda pair: -len(pair[0]))
_KEY_TEXT = re.compile(r"[a-zA-Z_][\w\-]*(?:/[\w\-@.]+)+")


@functools.lru_cache(maxsize=1)
def known_keys() -> dict[str, str]:
    """series name -> verl key, of every key the generated dashboards name and the detectors read."""
    keys = {k for d in detectors.ALL for k in (*d.keys, *d.extra) if not k.endswith("/")} | set(RUNTIME_KEYS)
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        text = path.read_text(errors="replace")
        named = {k for k in _KEY_TEXT.findall(text) if k.split("/")[0] in GROUPS}
        keys.update(named, (f"{k}/{stat}" for k in named for stat in STATS))  # a family: its statistics
    return {metric_name(PREFIX, k): k for k in sorted(keys, reverse=True)}


# (title, patterns on the key) in page order: the first panel a key matches takes it
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Score and reward", (r"critic/(score|rewards)/(mean|max|min)",)),
    ("Entropy", (re.escape(ENTROPY),)),
    # a loss near 0.001 and a coefficient near 0.001-1 on one scale flatten one of them: each its own panel
    ("KL", (r"actor/(kl_loss|ppo_kl|reward_kl_penalty)", r"critic/kl")),
    ("KL coefficient", (r"actor/(kl_coef|reward_kl_penalty_coeff)", r"critic/kl_coeff?")),
    ("Grad norm", (r"(actor|critic)/grad_norm",)),
    ("Response length", (r"response_length/(mean|max|min)",)),
    ("Clip ratio", (r"actor/pg_clipfrac(_lower)?", re.escape(RESPONSE_LENGTH_CLIP_RATIO), r"critic/vf_clipfrac")),
    # the mean is what verl's thresholds judge (0.005 / 0.01): its own scale, the lines drawn on it
    ("Log-prob mismatch", (re.escape(ROLLOUT_PROBS_DIFF_MEAN),)),
    ("Log-prob mismatch: max and std", (r"training/rollout_probs_diff_(max|std)",)),
    ("Rollout/actor log-prob correlation", (r"training/rollout_actor_probs_pearson_corr",)),
    ("Log-prob mismatch: valid tokens", (r"training/rollout_.*",)),
    ("Throughput", (re.escape(THROUGHPUT),)),
    ("Time per step", (re.escape(STEP_TIME),)),
)
_PANELS = [(title, re.compile("|".join(f"(?:{p})" for p in patterns))) for title, patterns in PANELS]
_VALIDATION = re.compile(r"^val-(?:core|aux)/(?:(.+)/[^/]+/[^/]+)?")
# a key named back without its slashes (val-core/openai_gsm8k_reward_mean_1): its data source is what
# comes before verl's variable name (reward, acc, score, ...: val-core/<source>/<var>/<metric>)
_FLAT_VALIDATION = re.compile(r"^val-(?:core|aux)/(.+?)_(?:reward|acc|accuracy|score|pred|correct)(?:_|$)")
_SIGNAL = re.compile(r"^rl_insight/(group|advantage)/")


@functools.lru_cache(maxsize=65536)
def key_of(series: str) -> str:
    """The key a series of the trainer's was logged as (best known): see the module's docstring."""
    known = known_keys().get(series)
    if known is not None:
        return known
    name = series[len(PREFIX) :] if series.startswith(PREFIX) else series
    for form, group in _GROUPS:
        if name.startswith(form + "_") and len(name) > len(form) + 1:
            return f"{group}/{name[len(form) + 1 :]}"
    return name


def logged_names(logged: Mapping[str, str]) -> dict[str, str]:
    """Each name a series goes by here (its own, the key named back, the detectors' name of it) ->
    the key the trainer logged, from ``logged`` (series name -> logged key: a push's ``keys``)."""
    names = {}
    for series, key in logged.items():
        for name in (series, key_of(series), verl_key(series), key_of(verl_key(series))):
            names[name] = key
    return names


def series_of(key: str) -> str:
    """The series a requested key is: a series name as is, a key by the trainer's naming."""
    return key if key.startswith(PREFIX) or key.startswith("rl_insight_") else metric_name(PREFIX, key)


Panel = dict[str, str | list[str] | list[dict[str, str | float]]]
MISMATCH_KEY = ROLLOUT_PROBS_DIFF_MEAN


def thresholds(params: HealthSettings) -> dict[str, list[dict[str, str | float]]]:
    """panel title -> the lines a panel draws: verl's mismatch thresholds (the detectors' parameters)."""
    return {
        "Log-prob mismatch": [
            {"value": params.mismatch_warning, "severity": "warning", "label": f"{MISMATCH_KEY} warning"},
            {"value": params.mismatch_critical, "severity": "critical", "label": f"{MISMATCH_KEY} critical"},
        ]
    }


def panels(keys: list[str], params: HealthSettings | None = None) -> list[Panel]:
    """The key curves present among ``keys``, in page order (see the contract, EXPLORER_API.md), each
    with the threshold lines its detector judges by (``params``: the detectors' parameters)."""
    found: dict[str, list[str]] = {}
    for key in keys:
        for title, pattern in _PANELS:
            if pattern.fullmatch(key):
                found.setdefault(title, []).append(key)
                break
        else:
            source = _VALIDATION.match(key)
            if source is not None:
                flat = None if source.group(1) else _FLAT_VALIDATION.match(key)
                named = source.group(1) or (flat.group(1) if flat else None)
                title = f"Validation {named}" if named else "Validation"
                found.setdefault(title, []).append(key)
            elif _SIGNAL.match(key):
                found.setdefault("Signals", []).append(key)
    order = [title for title, _ in PANELS]
    titles = sorted(found, key=lambda t: (order.index(t) if t in order else len(order) + (t == "Signals"), t))
    lines = thresholds(params or detectors.DEFAULTS)
    return [{"title": t, "keys": found[t], **({"thresholds": lines[t]} if t in lines else {})} for t in titles]
