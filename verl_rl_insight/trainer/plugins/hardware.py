"""Hardware metrics: NVIDIA GPUs through NVML (``nvidia-ml-py``, extra ``gpu``) and the host,
sampled every ``interval_s`` (default 5) by one process per node.

Every process that runs the plugin (the trainer and each Ray worker on a node) competes for
a per-node lock file; the holder samples, the others stay idle and take over if it exits,
so each GPU is reported once. No GPU, no driver or no nvidia-ml-py: one log line, and the
GPU part switches itself off; the host part goes on.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from types import ModuleType

import pluggy
from omegaconf import DictConfig

from verl_rl_insight.trainer.client.metric_batch import MetricBatch
from verl_rl_insight.trainer.config import plugin_settings
from verl_rl_insight.trainer.hook_types import RunInfo
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.samplers.hardware import HOSTNAME, GpuSampler, HostSampler, Nvml
from verl_rl_insight.trainer.samplers.simulated_nvml import SimulatedLoad

logger = logging.getLogger("verl_rl_insight")


def load_nvml() -> ModuleType | None:
    """The NVML binding (module ``pynvml`` of nvidia-ml-py), or None with the reason logged once."""
    try:
        import pynvml
    except ImportError:
        logger.info(
            "rl-insight: nvidia-ml-py is not installed (pip install 'verl-rl-insight[gpu]'): "
            "no GPU metrics from this node"
        )
        return None
    nvml: ModuleType = pynvml
    return nvml


def is_private(path: str) -> bool:
    """True for a folder (not a link) of this user that nobody else may enter or write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def private_lock_dir() -> str:
    """Where this user's node lock lives: a folder only this user may enter (0700, owned by it),
    so that another user cannot take the lock and switch this node's GPU metrics off.
    ``$XDG_RUNTIME_DIR`` when it is such a folder, else ``<temp dir>/rl-insight-<uid>`` (made
    0700). If someone else made that name first, a folder of a random name: this process then
    samples on its own (a GPU may be reported twice), rather than not at all."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and is_private(runtime):
        return runtime
    path = os.path.join(tempfile.gettempdir(), f"rl-insight-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.islink(path) and os.path.isdir(path) and os.stat(path).st_uid == os.getuid():
            os.chmod(path, 0o700)  # this user's own, made more open by hand
    except OSError:
        pass
    if is_private(path):
        return path
    logger.warning(
        "rl-insight: %s belongs to another user or is not a folder: this process's hardware sampler "
        "takes a lock of its own (its GPUs may be reported twice)",
        path,
    )
    return tempfile.mkdtemp(prefix="rl-insight-hardware-")


class NodeLock:
    """Non-blocking per-node, per-user lock: True for exactly one process of the node at a time."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self.path: str | None = None  # found at the first acquire, in the sampler's thread
        self.fd: int | None = None
        self.warned = False

    def acquire(self) -> bool:
        if self.fd is not None:
            return True
        try:
            if self.path is None:
                self.path = os.path.join(
                    self.directory or private_lock_dir(), f"rl-insight-hardware-{os.getuid()}.lock"
                )
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if not self.warned:
                logger.warning("rl-insight: no node lock for the hardware sampler (%s); it does not sample", exc)
                self.warned = True
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


class HardwareSampler:
    """``gpu_labels``: added to every GPU's labels (``simulated="true"`` for the demo's GPUs)."""

    def __init__(
        self,
        export: Callable[..., object],
        current_run: Callable[[], RunInfo | None],
        interval_s: float = 5.0,
        gpu: bool = True,
        host: bool = True,
        lock_dir: str | None = None,
        nvml_loader: Callable[[], Nvml | None] | None = None,
        gpu_labels: dict[str, str] | None = None,
    ) -> None:
        self.export = export
        self.current_run = current_run
        self.interval_s = float(interval_s)
        self.want_gpu, self.want_host = gpu, host
        self.lock = NodeLock(lock_dir)
        self.nvml_loader = nvml_loader
        self.gpu_labels = gpu_labels or {}
        self.gpu: GpuSampler | None = None
        self.host = HostSampler() if host else None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-insight-hardware", daemon=True)

    def start(self) -> HardwareSampler:
        self._thread.start()
        return self

    def _open_gpu(self) -> None:
        nvml = (self.nvml_loader or load_nvml)() if self.want_gpu else None
        if nvml is None:
            return
        try:
            self.gpu = GpuSampler(nvml, self.gpu_labels)
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            logger.info("rl-insight: no GPU metrics from this node (%s: %s)", type(exc).__name__, exc)
            self.want_gpu = False

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.lock.acquire():
                if self.gpu is None and self.want_gpu:
                    self._open_gpu()
                try:
                    self.sample_once()
                except Exception:
                    logger.exception("rl-insight: hardware sampling failed; it goes on")
            self._stop.wait(self.interval_s)

    def sample_once(self) -> list[MetricBatch]:
        """Sample and export; returns the batches (for tests and the benchmark). Nothing before the
        runtime is up: its thread starts while the runtime is being built, and a sample labelled
        ``default/default`` would be refused under a run credential."""
        run = self.current_run()
        if run is None:
            return []
        now = time.time()
        batches = []
        if self.gpu is not None:
            for labels, values in self.gpu.sample():
                batches.append(MetricBatch(run.project, run.experiment_name, None, now, values, labels=labels))
        if self.host is not None:
            batches.append(
                MetricBatch(run.project, run.experiment_name, None, now, self.host.sample(), labels={"node": HOSTNAME})
            )
        for batch in batches:
            self.export(batch=batch)
        self.samples += 1
        return batches

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        if self.gpu is not None:
            self.gpu.close()
        self.lock.release()


def current_run() -> RunInfo | None:
    """The run the running runtime logs for (None before there is one)."""
    from verl_rl_insight.trainer import runtime

    rt = runtime.get_runtime()
    return rt.current_run() if rt is not None else None


class Plugin:
    """``simulated_load``: handed by ``rl-insight demo`` alone (with ``simulate_gpus``): how busy its
    SIMULATED GPUs are; their series carry ``simulated="true"``. Without it no GPU is made up."""

    def __init__(self, simulated_load: SimulatedLoad | None = None) -> None:
        self.simulated_load = simulated_load
        self.sampler: HardwareSampler | None = None

    @hookimpl
    def rl_insight_configure(self, config: DictConfig, pm: pluggy.PluginManager) -> None:
        settings = plugin_settings(config, "hardware")
        loader = None
        if settings.simulate_gpus and self.simulated_load is not None:
            from verl_rl_insight.trainer.samplers import simulated_nvml

            loader = functools.partial(simulated_nvml.make_nvml, gpus=settings.simulate_gpus, load=self.simulated_load)
        self.sampler = HardwareSampler(
            pm.hook.rl_insight_export_batch,
            current_run,
            interval_s=settings.interval_s,
            gpu=settings.gpu,
            host=settings.host,
            lock_dir=settings.lock_dir,
            nvml_loader=loader,
            gpu_labels={"simulated": "true"} if loader is not None else None,
        ).start()

    @hookimpl
    def rl_insight_shutdown(self, timeout_s: float) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None


def sampler() -> HardwareSampler | None:
    """The running runtime's hardware sampler (None when there is none): for tests."""
    from verl_rl_insight.trainer import runtime

    rt = runtime.get_runtime()
    plugin = rt.plugin("hardware") if rt is not None else None
    return plugin.sampler if isinstance(plugin, Plugin) else None
