"""verl's phase timers (``marked_timer``, ``_timer``): one RL state per timed phase.

The trainers import the timer by name (``from verl.utils.debug import marked_timer``), so it
is wrapped where it is used: in every trainer module bootstrap.TARGETS names, and in the
modules that re-export it (for trainers imported later). The step comes from the calling trainer's ``global_steps``.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import time
from collections.abc import Callable
from types import ModuleType

from verl_rl_insight.trainer import runtime

TIMER_NAMES = ("marked_timer", "_timer")
PROFILE_PHASES = ("start_profile", "stop_profile")  # verl's profiler boundaries: the profiler plugin's points
# The modules are listed once, in bootstrap.TARGETS; phases timed here run on lane "trainer"
# except in these modules.
LANES = {
    "verl.experimental.fully_async_policy.fully_async_rollouter": "rollouter",
    "recipe.fully_async_policy.fully_async_rollouter": "rollouter",
}


class PhaseState:
    """Wraps the timer's own context manager: verl's timing is untouched, a state spans it."""

    __slots__ = ("inner", "name", "lane", "step", "trainer")

    def __init__(
        self,
        inner: contextlib.AbstractContextManager[object],
        name: str,
        lane: str,
        step: int | None,
        trainer: object = None,
    ) -> None:
        self.inner, self.name, self.lane, self.step, self.trainer = inner, name, lane, step, trainer

    def _profile_point(self, when: str) -> None:
        if self.name in PROFILE_PHASES and self.trainer is not None:
            _hook("rl_insight_profile_point", trainer=self.trainer, phase=self.name, when=when, step=self.step)

    def __enter__(self) -> object:
        self._profile_point("enter")
        result = self.inner.__enter__()
        _hook(
            "rl_insight_state_enter",
            name=self.name,
            lane=self.lane,
            start_ns=time.time_ns(),
            attributes={"step": self.step, "role": self.lane},
        )
        return result

    def __exit__(self, *exc: object) -> bool | None:
        _hook(
            "rl_insight_state_exit",
            name=self.name,
            lane=self.lane,
            end_ns=time.time_ns(),
            attributes={"error": True} if exc[0] is not None else None,
        )
        try:
            return self.inner.__exit__(*exc)  # type: ignore[arg-type]  # what the with statement gave
        finally:
            self._profile_point("exit")


def _hook(hook_name: str, **kwargs: object) -> None:
    rt = runtime.get_runtime()
    if rt is None:
        return
    try:
        getattr(rt.hook, hook_name)(run=rt.current_run(), **kwargs)
    except Exception:  # a phase of training is never stopped by monitoring
        pass


def _wrap(original: Callable[..., contextlib.AbstractContextManager[object]], lane: str) -> Callable[..., PhaseState]:
    def timer(name: str, timing_raw: dict[str, float], *args: object, **kwargs: object) -> PhaseState:
        caller = sys._getframe(1).f_locals.get("self")
        step = getattr(caller, "global_steps", None)
        return PhaseState(
            original(name, timing_raw, *args, **kwargs),
            str(name),
            lane,
            step if isinstance(step, int) else None,
            caller if name in PROFILE_PHASES else None,
        )

    timer.__wrapped__ = original  # type: ignore[attr-defined]
    timer._rl_insight_phase_timer = True  # type: ignore[attr-defined]
    timer.__name__ = getattr(original, "__name__", "marked_timer")
    timer.__doc__ = original.__doc__
    return timer


def _profiled_method(original: Callable[..., object], phase: str) -> Callable[..., object]:
    """verl's v1 trainer (main_ppo's default in 0.9.1) has no start_profile/stop_profile timers:
    its ``_start_profiling``/``_stop_profiling`` methods are the step's profiler boundaries."""

    def method(self: object, *args: object, **kwargs: object) -> object:
        step = getattr(self, "global_steps", None)
        step = step if isinstance(step, int) else None
        _hook("rl_insight_profile_point", trainer=self, phase=phase, when="enter", step=step)
        try:
            return original(self, *args, **kwargs)
        finally:
            _hook("rl_insight_profile_point", trainer=self, phase=phase, when="exit", step=step)

    method.__wrapped__ = original  # type: ignore[attr-defined]
    method._rl_insight_phase_timer = True  # type: ignore[attr-defined]
    return method


PROFILING_METHODS = {"_start_profiling": "start_profile", "_stop_profiling": "stop_profile"}


def _install_profiling_methods(module: ModuleType) -> None:
    trainer = module.__dict__.get("PPOTrainer")
    if not isinstance(trainer, type) or module.__name__ != "verl.trainer.ppo.v1.trainer_base":
        return
    for attr, phase in PROFILING_METHODS.items():
        original = trainer.__dict__.get(attr)
        if callable(original) and not getattr(original, "_rl_insight_phase_timer", False):
            setattr(trainer, attr, _profiled_method(original, phase))


def install(module: ModuleType) -> None:
    _install_profiling_methods(module)
    lane = LANES.get(module.__name__, "trainer")
    for attr in TIMER_NAMES:
        original = module.__dict__.get(attr)
        if original is not None and getattr(original, "_rl_insight_phase_timer", False):
            original = original.__wrapped__  # imported already wrapped: re-wrap with this module's lane
        # a bare generator (verl's inner _timer, used with `yield from`) is no context manager
        if callable(original) and not inspect.isgeneratorfunction(original):
            setattr(module, attr, _wrap(original, lane))


def uninstall(module: ModuleType) -> None:
    trainer = module.__dict__.get("PPOTrainer")
    for attr in PROFILING_METHODS if isinstance(trainer, type) else ():
        current = trainer.__dict__.get(attr)
        if current is not None and getattr(current, "_rl_insight_phase_timer", False):
            setattr(trainer, attr, current.__wrapped__)
    for attr in TIMER_NAMES:
        current = module.__dict__.get(attr)
        if current is not None and getattr(current, "_rl_insight_phase_timer", False):
            setattr(module, attr, current.__wrapped__)
