"""verl-rl-insight: real-time monitoring for verl RL post-training.

The small public API, for code that is not verl's ``Tracking``::

    import verl_rl_insight as rli
    rli.init(project="p", experiment_name="e")      # config: defaults < file < dict < env
    rli.log({"actor/pg_loss": 0.1}, step=3)
    with rli.state("gen", lane="trainer"): ...
    rli.register_target("127.0.0.1:8000", job="vllm", labels={"replica": "0"})
    rli.finish()
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl_rl_insight.trainer.config import plugin_settings
    from verl_rl_insight.trainer.hook_types import RunInfo
    from verl_rl_insight.trainer.hookspecs import hookimpl
    from verl_rl_insight.trainer.runtime import Runtime

__version__ = "0.1.0"

__all__ = ["init", "log", "state", "register_target", "finish", "hookimpl", "plugin_settings", "__version__"]


def __getattr__(name: str) -> object:
    """``hookimpl`` and ``plugin_settings`` for plugins, imported when first asked for: this module
    is imported at every Python start (the ``.pth`` file), which must stay cheap."""
    if name == "hookimpl":
        from verl_rl_insight.trainer.hookspecs import hookimpl

        return hookimpl
    if name == "plugin_settings":
        from verl_rl_insight.trainer.config import plugin_settings

        return plugin_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_run: RunInfo | None = None


def init(
    project: str | None = None, experiment_name: str | None = None, config: Mapping[str, object] | None = None
) -> RunInfo:
    """Start monitoring in this process. ``config``: a dict like the Hydra ``rl_insight`` block.

    Raises ``verl_rl_insight.trainer.config.ConfigError`` on a bad config (the training hooks log it instead).
    """
    global _run
    from verl_rl_insight.trainer import runtime

    rt = runtime.start(trainer_config={"rl_insight": config} if config else None, strict=True)
    _run = rt.run(project, experiment_name)
    return _run


def _current() -> tuple[Runtime, RunInfo]:
    from verl_rl_insight.trainer import runtime

    rt = runtime.start()
    return rt, (_run or rt.current_run())


def log(metrics: Mapping[str, object], step: int | None = None) -> None:
    """Log scalars exactly as ``Tracking.log`` would (names ``rl_insight_monitor_<key>``)."""
    rt, run = _current()
    rt.hook.rl_insight_log_metrics(run=run, metrics=dict(metrics), step=step, timestamp=time.time())


@contextlib.contextmanager
def state(name: str, lane: str = "trainer", **attributes: object) -> Iterator[None]:
    """Time a block as one RL state interval on timeline lane ``lane``."""
    start_ns = time.time_ns()
    try:
        yield
    finally:
        rt, run = _current()
        rt.hook.rl_insight_state_span(
            run=run, name=name, lane=lane, start_ns=start_ns, end_ns=time.time_ns(), attributes=attributes
        )


def register_target(address: str, job: str, labels: dict[str, str] | None = None) -> None:
    """Ask the server to scrape ``host:port`` (e.g. a vLLM replica's /metrics)."""
    rt, run = _current()
    rt.hook.rl_insight_register_target(run=run, address=address, job=job, labels=dict(labels or {}))


def finish(timeout_s: float | None = None) -> None:
    """Flush (bounded) and stop; safe to call more than once."""
    global _run
    from verl_rl_insight.trainer import runtime

    runtime.shutdown(timeout_s)
    _run = None
