"""Profiling on demand: ``rl-insight profile`` asks through the server, and this plugin has verl's
own profiler profile the requested steps.

verl decides at the end of every step whether the next one is profiled (``global_steps + 1 in
config.global_profiler.steps``, in the ``stop_profile`` phase of its loop). At that point this
plugin adds the requested steps to ``global_profiler.steps``; verl then starts and stops its
workers' profilers (DistProfiler: torch, nsys, npu, ...) for them as if they had been configured
at launch. What verl's profiler can do is fixed at launch (the tool, which roles and ranks have
it on), so a request the job cannot honour is refused with the override that would make it
possible; ``plugins.profiler.arm=torch`` configures a dormant torch profiler at launch (no step
profiled until asked).

The server is asked from a background thread every ``poll_interval_s``; the step boundary only
reads what that thread found: training never waits on the server. Profiled steps become a span on
the timeline's ``profiler`` lane and the counter ``rl_insight_profiled_steps_total`` (the
dashboards' annotations).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pluggy
from omegaconf import DictConfig

from verl_rl_insight.contract import paths
from verl_rl_insight.contract.http_client import HttpClient, Oversized, Unreachable
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import ServerUrl, plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins import profile_summary
from verl_rl_insight.trainer.plugins.profiler_capability import (
    MAX_ANSWER_BYTES,
    MAX_TAKEN,
    TAKEN_KEYS,
    arm,
    bound_problem,
    capability,
    refusal,
)
from verl_rl_insight.trainer.services import Services

__all__ = ["MAX_ANSWER_BYTES", "MAX_ARMED_STEPS", "MAX_TAKEN", "Plugin", "Profiles", "arm", "capability", "refusal"]

logger = logging.getLogger("verl_rl_insight")

# the steps to come that requests may have armed at once: 20 open requests of 100 steps (what a
# server may list) put 2,000 steps in verl's list, and one step boundary took 0.8-3.5 s
MAX_ARMED_STEPS = 100
ARMED_FULL = "rl-insight: %d steps to come are armed to be profiled already; later profile requests wait their turn"
StateSpan = Callable[..., object]  # the manager's rl_insight_state_span hook caller (keyword arguments)


class Profiles:
    """This process's view of the run's requests: what the poller found, what to report."""

    def __init__(self, server: ServerUrl, interval_s: float, state_span: StateSpan | None = None) -> None:
        self.server = server
        self.interval_s = interval_s
        self.state_span = state_span  # the manager's rl_insight_state_span: a profiled step on the timeline
        self.client = HttpClient(server.token, timeout_s=5.0)
        self.lock = threading.Lock()
        self.requests: dict[str, dict[str, Any]] = {}  # id -> request (as the server gave it, then ours)
        self.reports: list[dict[str, Any]] = []
        self.capability: dict[str, Any] | None = None
        self.capability_sent = False
        self.run: RunInfo | None = None
        self.profiled_steps = 0
        self.warned: set[str] = set()
        self.current: dict[int, tuple[int, list[str]]] = {}  # step -> (start ns, request ids) while profiled
        self.wanted: set[int] = set()  # the armed requests' steps to come
        self.listed: set[int] = set()  # the steps this plugin put in verl's global_profiler.steps
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.summarize = True  # analyse each profiled step's traces (profile_summary.py)
        self.reader: threading.Thread | None = None

    def start(self, run: RunInfo) -> None:
        with self.lock:
            self.run = run
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="rl-insight-profiles", daemon=True)
                self.thread.start()

    def update(self, request: dict[str, Any], state: str, detail: str, **extra: object) -> None:
        """Change a request's state here and queue the report (under the lock)."""
        request.update(state=state, detail=detail, **extra)
        self.reports.append({"id": request["id"], "state": state, "detail": detail, **extra})
        self.wake.set()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self._exchange()
            self.wake.wait(self.interval_s)
            self.wake.clear()

    def _exchange(self) -> None:
        run = self.run
        if run is None:
            return
        with self.lock:
            reports, self.reports = self.reports, []
            capability = None if self.capability_sent else self.capability
        body: dict[str, Any] = {"project": run.project, "experiment_name": run.experiment_name, "updates": reports}
        if capability is not None:
            body["capability"] = capability
        try:
            if reports or capability is not None:
                reply = self.client.request("POST", self.server.at(paths.PROFILE_REPORT), json_body=body)
                if not reply.ok:
                    logger.warning("rl-insight: the server refused a profile report: %s", reply.error())
                elif capability is not None:
                    self.capability_sent = True
            query = urllib.parse.urlencode({"project": run.project, "experiment_name": run.experiment_name})
            reply = self.client.request("GET", f"{self.server.at(paths.PROFILES)}?{query}", max_bytes=MAX_ANSWER_BYTES)
            if reply.ok:
                listed = reply.json().get("profiles", [])
                self._take(listed if isinstance(listed, list) else [])
        except Oversized as exc:
            with self.lock:
                self.reports[:0] = reports
            self._warn_once("oversized", "rl-insight: profile requests ignored: %s", exc)
        except Unreachable:
            with self.lock:  # said again next time
                self.reports[:0] = reports
        except Exception:
            logger.debug("rl-insight: profile exchange failed", exc_info=True)

    def _take(self, listed: list[object]) -> None:
        """Hold the new requests the server listed, within bounds: a request of a shape the server
        never gives is skipped (said once), and at most MAX_TAKEN are open here at once."""
        with self.lock:
            for request in listed:
                if not isinstance(request, dict) or request.get("state") != "requested":
                    continue
                why = bound_problem(request)
                if why is not None:
                    self._warn_once("shape", "rl-insight: a profile request the server listed is ignored: %s", why)
                    continue
                if request["id"] in self.requests:
                    continue
                open_here = [r for r in self.requests.values() if r["state"] not in ("finished", "missed", "refused")]
                if len(open_here) >= MAX_TAKEN:
                    self._warn_once(
                        "taken", "rl-insight: %d profile requests are open here; the others wait", MAX_TAKEN
                    )
                    break
                self.requests[request["id"]] = {key: request.get(key) for key in TAKEN_KEYS}
            while len(self.requests) > 10 * MAX_TAKEN:  # the oldest ended ones go first
                ended = [k for k, r in self.requests.items() if r["state"] in ("finished", "missed", "refused")]
                if not ended:
                    break
                del self.requests[ended[0]]

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self.warned:
            self.warned.add(key)
            logger.warning(message, *args)

    # -- at verl's step boundaries (training thread: reads and writes memory only) ----------------
    def point(self, trainer: object, phase: str, when: str, step: int) -> None:
        config = getattr(trainer, "config", None)
        if config is None:
            return
        with self.lock:
            if self.capability is None:
                self.capability = capability(config)
                self.capability_sent = False
                self.wake.set()
            if phase == "stop_profile" and when == "enter":
                self._arm(config, step)
            elif phase == "start_profile" and when == "exit":
                self._started(config, step)
            elif phase == "stop_profile" and when == "exit":
                self._stopped(step)

    def _arm(self, config: DictConfig, step: int) -> None:
        """Arm the requested steps from ``step + 1`` on: at most ``MAX_ARMED_STEPS`` to come at once
        (a request that would pass it waits for a later boundary). verl's ``global_profiler.steps``
        gets them one boundary ahead (the next step, when wanted; a passed one taken out): verl
        reads the list with ``in`` at every boundary, and OmegaConf writes a list of 2,000 steps in
        0.2 s."""
        able = self.capability or capability(config)
        self.wanted = {n for n in self.wanted if n > step}
        for request in self.requests.values():
            if request["state"] != "requested":
                continue
            why = refusal(request, able)
            if why:
                self.update(request, "refused", why)
                continue
            wanted = range(request["first_step"], request["last_step"] + 1)
            future = [n for n in wanted if n > step]
            if not future:
                waited = f" (it waited: {MAX_ARMED_STEPS} steps to come were armed)" if request.get("waited") else ""
                self.update(
                    request,
                    "missed",
                    f"step {wanted[-1]} had begun when the trainer saw the request (it was at step {step})" + waited,
                )
                continue
            if len(self.wanted | set(future)) > MAX_ARMED_STEPS:
                self._warn_once("armed", ARMED_FULL, MAX_ARMED_STEPS)
                request["waited"] = True
                continue  # still "requested": armed at a boundary once earlier steps are done
            self.wanted.update(future)
            late = f"; steps {wanted[0]}..{future[0] - 1} had begun" if future[0] > wanted[0] else ""
            roles = ", ".join(f"{r} (ranks {k})" for r, k in able["roles"].items())
            self.update(
                request,
                "armed",
                f"steps {future[0]}..{future[-1]} will be profiled by verl's {able['tool']} profiler: "
                f"every role on at launch: {roles}{late}",
                trace_dir=able["save_path"],
            )
        self._next_in_list(config, step)

    def _next_in_list(self, config: DictConfig, step: int) -> None:
        """verl's list holds the next step when it is wanted, and none of ours that has passed."""
        from omegaconf import open_dict, read_write

        passed = {n for n in self.listed if n < step}
        add = step + 1 in self.wanted and step + 1 not in self.listed
        if not passed and not add:
            return
        profiler = config.global_profiler
        with read_write(profiler), open_dict(profiler):
            if profiler.steps is None:
                profiler.steps = []
            for n in passed:
                held = list(profiler.steps)
                if n in held:
                    del profiler.steps[held.index(n)]
            if add and step + 1 not in profiler.steps:
                profiler.steps.append(step + 1)
                self.listed.add(step + 1)
        self.listed -= passed

    def _started(self, config: DictConfig, step: int) -> None:
        steps = config.global_profiler.steps or []
        ids = [
            r["id"]
            for r in self.requests.values()
            if r["state"] in ("armed", "running") and r["first_step"] <= step <= r["last_step"]
        ]
        if step in steps and ids:
            self.current[step] = (time.time_ns(), ids)
            for request_id in ids:
                request = self.requests[request_id]
                if request["state"] == "armed":
                    self.update(request, "running", f"profiling step {step}", trace_dir=request.get("trace_dir"))

    def _stopped(self, step: int) -> None:
        started = self.current.pop(step, None)
        if started is None:
            return
        start_ns, ids = started
        self.profiled_steps += 1
        for request_id in ids:
            request = self.requests[request_id]
            done = sorted(set(request.get("steps") or []) | {step})
            request["steps"] = done
            last = step >= request["last_step"]
            self.update(
                request,
                "finished" if last else "running",
                f"profiled steps {', '.join(map(str, done))}; traces in {request.get('trace_dir')}",
                trace_dir=request.get("trace_dir"),
                steps=done,
            )
        self._summarize(step, ids)
        if self.state_span is not None and self.run is not None:
            try:
                self.state_span(
                    run=self.run,
                    name="profile",
                    lane="profiler",
                    start_ns=start_ns,
                    end_ns=time.time_ns(),
                    attributes={"step": step, "requests": ",".join(ids)},
                )
            except Exception:
                pass

    def _summarize(self, step: int, ids: list[str]) -> None:
        """Read the step's traces in a process of its own, off the training thread, and send the
        per-rank summary with the requests' next report. One at a time: a step profiled while
        the last is still read goes without."""
        trace_dir = next((self.requests[i].get("trace_dir") for i in ids if self.requests[i].get("trace_dir")), None)
        if not trace_dir or not self.summarize or (self.reader is not None and self.reader.is_alive()):
            return

        def read() -> None:
            found = profile_summary.analyze(str(trace_dir), step)
            with self.lock:
                for request_id in ids:
                    request = self.requests[request_id]
                    if isinstance(found, dict):
                        self.update(request, request["state"], request["detail"], summaries=[found])
                    else:
                        note = f"{request['detail']}; step {step}'s traces not analysed: {found}"
                        self.update(request, request["state"], note[:2000])

        self.reader = threading.Thread(target=read, name="rl-insight-profile-summary", daemon=True)
        self.reader.start()

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(2.0)
        if self.run is not None:
            self._exchange()  # the last word (finished) reaches the server


class Plugin:
    def __init__(self) -> None:
        self.profiles: Profiles | None = None  # None without a server to ask

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, pm: pluggy.PluginManager, services: Services) -> None:
        settings = plugin_settings(config, "profiler")
        if services.server is not None:
            self.profiles = Profiles(services.server, float(settings.poll_interval_s), pm.hook.rl_insight_state_span)

    @hookimpl
    def rl_insight_profile_point(self, run: RunInfo, trainer: object, phase: str, when: str, step: int | None) -> None:
        if self.profiles is None or step is None or run is None:
            return
        self.profiles.start(run)
        self.profiles.point(trainer, phase, when, step)

    @hookimpl
    def rl_insight_collect(self, run: RunInfo) -> list[MetricBatch] | None:
        if self.profiles is None or not self.profiles.profiled_steps:
            return None
        return [
            MetricBatch(
                run.project,
                run.experiment_name,
                None,
                time.time(),
                {"rl_insight_profiled_steps_total": float(self.profiles.profiled_steps)},
            )
        ]

    @hookimpl
    def rl_insight_shutdown(self, timeout_s: float) -> None:
        if self.profiles is not None:
            self.profiles.close()
