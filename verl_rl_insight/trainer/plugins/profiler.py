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
import os
import re
import threading
import time
import urllib.parse
from typing import Any

from verl_rl_insight.contract.http_client import HttpClient, Oversized, Unreachable
from verl_rl_insight.contract.wire import MAX_PROFILE_STEPS, PROFILE_ROLES
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hookspecs import hookimpl

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


def capability(config: Any) -> dict[str, Any]:
    """What the job's profiler can do, from verl's config: tool, roles on (with their ranks), traces' folder."""
    from omegaconf import OmegaConf

    tool = OmegaConf.select(config, "global_profiler.tool", default=None)
    roles = {}
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


def traces_folder(verl_config: Any, settings: Any) -> str:
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


def arm(verl_config: Any, settings: Any) -> bool:
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


class Profiles:
    """This process's view of the run's requests: what the poller found, what to report."""

    def __init__(self, server_url: str, token: str | None, interval_s: float) -> None:
        self.url = server_url.rstrip("/")
        self.interval_s = interval_s
        self.client = HttpClient(token, timeout_s=5.0)
        self.lock = threading.Lock()
        self.requests: dict[str, dict[str, Any]] = {}  # id -> request (as the server gave it, then ours)
        self.reports: list[dict[str, Any]] = []
        self.capability: dict[str, Any] | None = None
        self.capability_sent = False
        self.run: Any = None
        self.profiled_steps = 0
        self.warned: set[str] = set()
        self.current: dict[int, tuple[int, list[str]]] = {}  # step -> (start ns, request ids) while profiled
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self, run: Any) -> None:
        with self.lock:
            self.run = run
            if self.thread is None:
                self.thread = threading.Thread(target=self._loop, name="rl-insight-profiles", daemon=True)
                self.thread.start()

    def update(self, request: dict[str, Any], state: str, detail: str, **extra: Any) -> None:
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
        with self.lock:
            reports, self.reports = self.reports, []
            capability = None if self.capability_sent else self.capability
        body: dict[str, Any] = {"project": run.project, "experiment_name": run.experiment_name, "updates": reports}
        if capability is not None:
            body["capability"] = capability
        try:
            if reports or capability is not None:
                reply = self.client.request("POST", self.url + "/api/v1/profiles/report", json_body=body)
                if not reply.ok:
                    logger.warning("rl-insight: the server refused a profile report: %s", reply.error())
                elif capability is not None:
                    self.capability_sent = True
            query = urllib.parse.urlencode({"project": run.project, "experiment_name": run.experiment_name})
            reply = self.client.request("GET", f"{self.url}/api/v1/profiles?{query}", max_bytes=MAX_ANSWER_BYTES)
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
    def point(self, trainer: Any, phase: str, when: str, step: int) -> None:
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

    def _arm(self, config: Any, step: int) -> None:
        """Put requested steps from ``step + 1`` on into verl's ``global_profiler.steps``."""
        from omegaconf import open_dict, read_write

        able = self.capability or capability(config)
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
                self.update(
                    request,
                    "missed",
                    f"step {wanted[-1]} had begun when the trainer saw the request (it was at step {step})",
                )
                continue
            profiler = config.global_profiler
            with read_write(profiler), open_dict(profiler):
                profiler.steps = sorted(set(profiler.steps or []) | set(future))
            late = f"; steps {wanted[0]}..{future[0] - 1} had begun" if future[0] > wanted[0] else ""
            roles = ", ".join(f"{r} (ranks {k})" for r, k in able["roles"].items())
            self.update(
                request,
                "armed",
                f"steps {future[0]}..{future[-1]} will be profiled by verl's {able['tool']} profiler: "
                f"every role on at launch: {roles}{late}",
                trace_dir=able["save_path"],
            )

    def _started(self, config: Any, step: int) -> None:
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
        rt = runtime.get_runtime()
        if rt is not None:
            try:
                rt.hook.rl_insight_state_span(
                    run=rt.current_run(),
                    name="profile",
                    lane="profiler",
                    start_ns=start_ns,
                    end_ns=time.time_ns(),
                    attributes={"step": step, "requests": ",".join(ids)},
                )
            except Exception:
                pass

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(2.0)
        if self.run is not None:
            self._exchange()  # the last word (finished) reaches the server


_profiles: Profiles | None = None


@hookimpl
def rl_insight_configure(config: Any) -> None:
    global _profiles
    _profiles = None
    settings = plugin_settings(config, "profiler")
    if config.get("server_url"):
        _profiles = Profiles(str(config.server_url), config.get("token"), float(settings.poll_interval_s))


@hookimpl
def rl_insight_profile_point(run: Any, trainer: Any, phase: str, when: str, step: int | None) -> None:
    if _profiles is None or step is None or run is None:
        return
    _profiles.start(run)
    _profiles.point(trainer, phase, when, step)


@hookimpl
def rl_insight_collect(run: Any) -> Any:
    if _profiles is None or not _profiles.profiled_steps:
        return None
    return [
        MetricBatch(
            run.project,
            run.experiment_name,
            None,
            time.time(),
            {"rl_insight_profiled_steps_total": float(_profiles.profiled_steps)},
        )
    ]


@hookimpl
def rl_insight_shutdown(timeout_s: float) -> None:
    if _profiles is not None:
        _profiles.close()
