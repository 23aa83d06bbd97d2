"""``rl-insight demo``: the server stack (whatever is installed), then a SIMULATED verl run
through verl's real ``run_ppo`` and the real patches; at the end, where to look."""

import contextlib
import os
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from verl_rl_insight.commands.demo import ray_start, verl_step
from verl_rl_insight.contract import environment, paths
from verl_rl_insight.contract.naming import METRIC_PREFIX, metric_name
from verl_rl_insight.contract.verl_keys import SCORE_MEAN

if TYPE_CHECKING:
    from omegaconf import DictConfig

PROJECT = "rl-insight-demo"


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return bool(count > 0)
    except Exception:
        return False


def compose(
    experiment: str | None,
    steps: Any,
    step_seconds: Any,
    engine: str,
    replicas: Any,
    gpus: Any,
    linger_s: Any,
    transfer_queue: Any,
    profile_dir: str | None = None,
) -> Any:
    """verl's own ppo_trainer config for the demo's run; ``profile_dir``: where `rl-insight profile`
    traces go (the server's data dir; else the profiler plugin's default, under RL_INSIGHT_HOME)."""
    import verl.trainer.main_ppo as main_ppo
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(main_ppo.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(
            config_name="ppo_trainer",
            overrides=[
                "trainer.logger=[rl_insight]",
                f"trainer.project_name={PROJECT}",
                f"trainer.experiment_name={experiment}",
                f"trainer.total_training_steps={steps}",
                f"data.train_batch_size={verl_step.PROMPTS}",  # the card says the batch the demo trains
                f"actor_rollout_ref.rollout.n={verl_step.ROLLOUT_N}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={verl_step.PROMPTS}",
                "actor_rollout_ref.rollout.disable_log_stats=False",
                f"actor_rollout_ref.rollout.name={engine}",
                f"transfer_queue.metrics.enabled={transfer_queue}",
                "++ray_kwargs.ray_init.num_cpus=8",
                "++ray_kwargs.ray_init.include_dashboard=False",
                f"+rl_insight_demo.engine={engine}",
                f"+rl_insight_demo.replicas={replicas}",
                f"+rl_insight_demo.step_seconds={step_seconds}",
                f"+rl_insight_demo.linger_s={linger_s}",
                f"+rl_insight_demo.transfer_queue={transfer_queue}",
                f"+rl_insight.plugins.hardware.simulate_gpus={gpus}",
                "+rl_insight.plugins.hardware.interval_s=1",
                "+rl_insight.collect_interval_s=2",
                "+rl_insight.plugins.profiler.arm=torch",  # `rl-insight profile` works on the demo
                "+rl_insight.plugins.profiler.poll_interval_s=1",
                "+rl_insight.plugins.samples.enabled=True",  # synthetic prompts: `rl-insight samples` shows them
                *([f"+rl_insight.plugins.profiler.save_path={profile_dir}"] if profile_dir else []),
            ],
        )


class Progress:
    """The run's progress as the hub sees it (the step it was last pushed), drawn by this process:
    one line redrawn in place on a terminal, a line per quarter of the run otherwise (a log)."""

    def __init__(self, hub_url: str, experiment: str | None, steps: int, out: TextIO, interval_s: float = 0.5) -> None:
        import threading

        self.hub_url, self.experiment, self.steps, self.out = hub_url, experiment, steps, out
        self.interval_s = interval_s
        self.in_place = hasattr(out, "isatty") and out.isatty()
        self.shown = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-progress", daemon=True)
        self._thread.start()

    def _step(self) -> int | None:
        return self.step_of(self.hub_url, self.experiment)

    @staticmethod
    def step_of(hub_url: str, experiment: str | None) -> int | None:
        """The newest step the hub holds of the demo's project / ``experiment`` (None: no such run)."""
        from verl_rl_insight.commands.http_fetch import NoAnswer, fetch_json

        try:
            streams = fetch_json(hub_url + paths.STREAMS, timeout_s=2)["streams"]
        except (NoAnswer, KeyError, TypeError):
            return None
        steps = [
            s.get("step") or 0
            for s in streams
            if s["labels"].get("project") == PROJECT and s["labels"].get("experiment_name") == experiment
        ]
        return max(steps, default=None)

    def _draw(self, step: int) -> None:
        done = min(30, max(0, int(30 * step / max(self.steps, 1))))
        line = (
            f"[demo] SIMULATED step {step}/{self.steps} [{'#' * done}{'.' * (30 - done)}] {time.strftime('%H:%M:%S')}"
        )
        if self.in_place:
            print("\r" + line, end="", file=self.out, flush=True)
        elif (
            not self.shown
            or step == self.steps
            or step * 4 // max(self.steps, 1) > self.shown * 4 // max(self.steps, 1)
        ):
            print(line, file=self.out, flush=True)
        self.shown = step

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            step = self._step()
            if step is not None and step != self.shown:
                self._draw(step)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        step = self._step()
        if step is not None and step != self.shown:
            self._draw(step)
        if self.in_place and self.shown:
            print(file=self.out, flush=True)


def prometheus_links(url: str, expr: str, probe: str | None = None) -> tuple[str, str]:
    """(a graph of ``expr``, the alerts page) that open on the Prometheus at ``url``: 3.x has its query
    page at /query and alerts at /alerts; 2.x has /graph and /alerts, or only its classic UI
    (/classic/graph, /classic/alerts: Debian's package, whose build leaves the React UI out). The
    version comes from /api/v1/status/buildinfo (asked at ``probe``: the URL with its login, which
    the links do not show); the expression is percent-encoded."""
    from verl_rl_insight.commands.http_fetch import NoAnswer, fetch, fetch_json

    asked = (probe or url).rstrip("/")
    try:
        version = str(fetch_json(asked + paths.PROMETHEUS_BUILD_INFO, timeout_s=2)["data"]["version"])
        major = int(version.split(".")[0])
        classic = major < 3 and fetch("GET", asked + "/alerts", timeout_s=2).status == 404
    except (NoAnswer, KeyError, TypeError, ValueError):
        major, classic = 2, False
    if major >= 3:
        return f"{url}/query?{urllib.parse.urlencode({'g0.expr': expr, 'g0.tab': 'graph'})}", f"{url}/alerts"
    root = f"{url}/classic" if classic else url
    return f"{root}/graph?{urllib.parse.urlencode({'g0.expr': expr, 'g0.tab': '0'})}", f"{root}/alerts"


def where_to_look(state: dict[str, Any], experiment: str | None, engine: str, out: TextIO) -> None:
    urls = state["public_urls"]
    query = f'{{project="{PROJECT}",experiment_name="{experiment}"}}'
    print("\nThis was a SIMULATION (no model was trained). Where to look:", file=out)
    print(
        f"  explorer    {state['hub_url']}{paths.PAGE_RUNS}/{PROJECT}/{urllib.parse.quote(str(experiment), safe='')}",
        file=out,
    )
    if "grafana" in state["services"]:
        print(
            f"  Grafana     {urls['grafana']}/d/verl_trainer_v1_with_{engine}_engine?var-project={PROJECT}"
            f"&var-experiment_name={experiment}   (login {state['grafana_admin_user']}, password: "
            "rl-insight server status --secrets)",
            file=out,
        )
    if "prometheus" in state["services"]:
        from verl_rl_insight.commands.server import control

        graph, alerts = prometheus_links(
            urls["prometheus"],
            metric_name(METRIC_PREFIX, SCORE_MEAN) + query,
            probe=control.with_login(urls["prometheus"]),
        )
        print(f"  Prometheus  {graph}", file=out)
        print(f"              {alerts}", file=out)
        print("              (login: rl-insight, password: rl-insight server url --prometheus)", file=out)
    if "tempo" in state["services"]:
        print(f'  Tempo       {urls["tempo"]} (TraceQL: {{ span.experiment_name = "{experiment}" }})', file=out)
    print(f"  metric hub  {state['hub_url']}{paths.METRICS}", file=out)
    run = f"--project {PROJECT} --experiment {experiment}"
    print(f"  terminal    rl-insight watch {run}", file=out)
    print(f"  timeline    rl-insight timeline export {run} -o trace.json   (Perfetto UI, chrome://tracing)", file=out)
    from verl_rl_insight.commands.server.control import optional_absent

    for name, (what, fix) in state["missing"].items():
        if optional_absent(name, state):
            print(f"  {name:<11} not installed (optional): {fix}", file=out)
        else:
            print(f"  {name:<11} not running: {what}" + (f"; fix: {fix}" if fix else ""), file=out)


def run(
    steps: int = 20,
    step_seconds: float = 2.0,
    engine: str = "vllm",
    replicas: int = 2,
    experiment: str | None = None,
    server_config: str | None = None,
    linger_s: float = 3.0,
    transfer_queue: bool = True,
    out: TextIO = sys.stdout,
) -> int:
    from verl_rl_insight.commands.server import control

    experiment = experiment or time.strftime("simulated-%Y%m%d-%H%M%S")
    state = _server(server_config, out)
    if state is None or _name_taken(state, experiment, out):
        return 2
    os.environ[environment.SERVER_URL] = control.trainer_url(state, local=True)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a single-node demo: loopback
    os.environ.setdefault("TQ_METRICS_COLLECT_INTERVAL", "1")  # a short run: TransferQueue's figures each second
    gpus = 0 if has_gpu() else 8
    print(
        f"\n[demo] SIMULATED verl run: project={PROJECT} experiment_name={experiment}, {steps} steps, "
        f"{replicas} simulated {engine} replicas" + (f", {gpus} simulated GPUs" if gpus else ""),
        file=out,
        flush=True,
    )
    log_path = Path(state["settings"]["data_dir"]) / "logs" / f"demo-{experiment}.log"
    print(f"[demo] what verl and Ray print goes to {log_path}", file=out, flush=True)
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # no colour codes in the log file
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # its "[repeated Nx]" notes are coloured whatever the setting
    with output_to(log_path, out) as shown:
        import ray

        traces = Path(state["settings"]["data_dir"]) / "profiles" / PROJECT / str(experiment)
        config = compose(experiment, steps, step_seconds, engine, replicas, gpus, linger_s, transfer_queue, str(traces))
        progress = Progress(state["local_hub_url"], experiment, steps, shown)
        try:
            _run_ppo(config, shown)
        except KeyboardInterrupt:  # Ctrl+C: a person stopping the demo, not a failure to explain
            interrupted = True
        except BaseException:
            progress.stop()
            print(f"[demo] the run failed; the end of {log_path}:\n{_tail(log_path)}", file=shown, flush=True)
            raise
        else:
            interrupted = False
        finally:
            ray.shutdown()  # here, not at exit: its last words go to the log too
        progress.stop()
        if interrupted:
            marked = mark_finished(control.trainer_url(state, local=True), str(experiment))
            _say_interrupted(progress.shown or 0, steps, marked, log_path, shown)
            return 130
    where_to_look(state, experiment, engine, out)
    return 0


RAY_AGAIN = (
    "[demo] Ray's local cluster did not start in time (its agents start slowly on a busy machine); "
    "starting it once more"
)


def _run_ppo(config: "DictConfig", shown: TextIO) -> None:
    """verl's ``run_ppo`` with the simulated task runner; once more when Ray's start timed out."""
    import ray
    from verl.trainer.main_ppo import run_ppo

    from verl_rl_insight.commands.demo.simulation import SimulatedTaskRunner

    try:
        run_ppo(config, task_runner_class=SimulatedTaskRunner)
    except Exception as exc:
        if not ray_start.timed_out(exc):
            raise
        ray.shutdown()
        print(RAY_AGAIN, file=shown, flush=True)
        run_ppo(config, task_runner_class=SimulatedTaskRunner)


def _name_taken(state: dict[str, Any], experiment: str, out: TextIO) -> bool:
    """Whether the server has steps of the demo's project / ``experiment`` (said on ``out``): one run,
    one answer: a second run under the name would be the first one's new attempt (contract.attempts),
    its steps replaced by this one's."""
    taken = Progress.step_of(state["local_hub_url"], experiment)
    if taken is None:
        return False
    print(
        f"rl-insight demo: the name {experiment!r} is taken: {PROJECT}/{experiment} has logged up to step "
        f"{taken} on this server. A run's name is the run (verl resumes a run under its name, steps going "
        f"on); give the demo another --experiment (e.g. {experiment}-2), or none for a fresh name",
        file=out,
    )
    return True


def _server(server_config: str | None, out: TextIO) -> dict[str, Any] | None:
    """The running server's state: the one running, else one started now (detached); None, said on
    ``out``, when none could be had."""
    from verl_rl_insight.commands.server import control
    from verl_rl_insight.server.settings.server import ServerSettings

    state = control.read_state()
    if state is not None:
        print(control.panel(state, reveal_token=False), file=out)  # as `server status` shows it: no token
        return state
    try:
        settings = ServerSettings.load(server_config)
    except (OSError, ValueError, TypeError) as exc:
        print(f"rl-insight demo: bad server config: {exc}", file=out)
        return None
    if control.start(settings, detach=True, out=out, reveal_token=False) == 2:
        print("rl-insight demo: the server did not start (see above)", file=out)
        return None
    state = control.read_state()
    if state is None:  # started, and gone again before the demo began
        print("rl-insight demo: the server stopped right after it started (see above)", file=out)
    return state


def _say_interrupted(at: int, steps: int, marked: bool, log_path: Path, out: TextIO) -> None:
    finished = "marked finished (rl-insight runs list)" if marked else "not marked finished: the server did not answer"
    print(
        f"[demo] interrupted at step {at} of {steps}; the run is {finished}; "
        f"what verl and Ray printed is in {log_path}",
        file=out,
        flush=True,
    )


def mark_finished(trainer_url: str, experiment: str) -> bool:
    """Say to the server that the demo's run has ended (``rl_insight_run_finished`` 1, what a run's
    ``finish()`` says): its trainer, a Ray actor, was stopped before it could. True when delivered."""
    from verl_rl_insight.contract import server_url
    from verl_rl_insight.trainer.client.metric_batch import MetricBatch
    from verl_rl_insight.trainer.client.sender import BatchSender
    from verl_rl_insight.trainer.plugins.trainer_metrics import FINISHED

    base, token = server_url.split(trainer_url)
    sender = BatchSender(base + paths.PUSH, token=token, linger_s=0.01)
    sender.submit(MetricBatch(PROJECT, experiment, None, time.time(), {FINISHED: 1.0}))
    delivered = sender.flush(5.0) and sender.stats["sent_batches"] == 1
    sender.close(1.0)
    return bool(delivered)


@contextlib.contextmanager
def output_to(log_path: Path, out: TextIO) -> Iterator[TextIO]:
    """Everything this process and its Ray workers write to stdout and stderr goes to ``log_path``
    (file descriptors 1 and 2: also what C code and subprocesses write) while the block runs; it
    yields a stream to what ``out`` showed, for the demo's own lines."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    shown = os.fdopen(os.dup(saved[0]), "w", buffering=1) if out is sys.stdout else out
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield shown
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)
        if shown is not out:
            shown.close()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(cannot read it)"
