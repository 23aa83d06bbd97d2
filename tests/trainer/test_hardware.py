"""Hardware sampler: every NVML field and failure path against a STAND-IN NVML (no GPU here),
host sampling for real, one sampler per node, and the data at the hub."""

import json
import logging
import os

import pytest

from tests.helpers import http, wait_for
from verl_rl_insight.trainer.plugins import hardware
from verl_rl_insight.trainer.runtime import RunInfo
from verl_rl_insight.trainer.samplers.hardware import GpuSampler, HostSampler
from verl_rl_insight.trainer.samplers.simulated_nvml import make_nvml

SAMPLER_NVML_NAMES = [
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetName",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventTypeXidCriticalError",
    "nvmlEventSetWait",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "NVML_TEMPERATURE_GPU",
    "nvmlDeviceGetClockInfo",
    "NVML_CLOCK_SM",
    "NVML_CLOCK_MEM",
    "nvmlDeviceGetPcieThroughput",
    "NVML_PCIE_UTIL_TX_BYTES",
    "NVML_PCIE_UTIL_RX_BYTES",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEccErrors",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED",
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_VOLATILE_ECC",
    "NVMLError",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_TIMEOUT",
]


def test_the_stand_in_uses_only_names_the_real_nvidia_ml_py_has():
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is in the test extra")
    assert [name for name in SAMPLER_NVML_NAMES if not hasattr(pynvml, name)] == []
    standin = make_nvml()
    assert [name for name in SAMPLER_NVML_NAMES if not hasattr(standin, name)] == []
    assert standin.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert standin.NVML_ERROR_TIMEOUT == pynvml.NVML_ERROR_TIMEOUT


def test_every_field_with_dcgm_names_units_and_labels():
    [(labels0, gpu0), (labels1, gpu1)] = GpuSampler(make_nvml(gpus=2, xid=79)).sample()
    assert (
        labels0
        == {
            "gpu": "0",
            "UUID": "GPU-00000000-stand-in",
            "device": "nvidia0",
            "modelName": "NVIDIA H200",
            "Hostname": labels0["Hostname"],
        }
        and labels0["Hostname"]
    )
    assert gpu0 == {
        "DCGM_FI_DEV_GPU_UTIL": 50.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 20.0,
        "DCGM_FI_DEV_FB_USED": 1000.0,
        "DCGM_FI_DEV_FB_FREE": 142771.0,
        "DCGM_FI_DEV_FB_TOTAL": 143771.0,  # MiB
        "DCGM_FI_DEV_POWER_USAGE": 350.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 9_000_000.0,  # W, mJ
        "DCGM_FI_DEV_GPU_TEMP": 60.0,
        "DCGM_FI_DEV_SM_CLOCK": 1980.0,
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 1000 * 1024.0,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 2000 * 1024.0,  # B/s
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4.0,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 7.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
        "DCGM_FI_DEV_XID_ERRORS": 79.0,
    }
    assert labels1["gpu"] == "1" and gpu1["DCGM_FI_DEV_GPU_UTIL"] == 51.0


def test_one_failing_field_or_gpu_does_not_stop_the_others():
    nvml = make_nvml(
        gpus=3,
        broken_handles={2},
        failures={
            (0, "nvmlDeviceGetPowerUsage"): 3,  # NOT_SUPPORTED on GPU 0: never asked again
            (1, "nvmlDeviceGetTemperature"): 999,  # a passing error on GPU 1: asked again next time
        },
    )
    sampler = GpuSampler(nvml)
    assert [labels["gpu"] for _, _, labels, _ in sampler.gpus] == ["0", "1"]  # GPU 2 skipped
    for _ in range(3):
        (l0, g0), (l1, g1) = sampler.sample()
    assert "DCGM_FI_DEV_POWER_USAGE" not in g0 and g0["DCGM_FI_DEV_GPU_UTIL"] == 50.0
    assert "DCGM_FI_DEV_GPU_TEMP" not in g1 and g1["DCGM_FI_DEV_POWER_USAGE"] == 350.001
    assert nvml.calls[(0, "nvmlDeviceGetPowerUsage")] == 1
    assert nvml.calls[(1, "nvmlDeviceGetTemperature")] == 3
    assert "DCGM_FI_DEV_XID_ERRORS" not in g0  # no XID event: nothing reported
    assert sampler.errors == 1 + 1 + 3


def test_no_gpu_no_driver_or_no_binding_logs_one_line_and_host_goes_on(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="verl_rl_insight")
    exported = []
    run = RunInfo("p", "e")
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is in the test extra")
    # the real binding on a machine without a driver: nvmlInit raises NVMLError_LibraryNotFound
    sampler = hardware.HardwareSampler(
        lambda batch: exported.append(batch),
        lambda: run,
        interval_s=60,
        lock_dir=str(tmp_path),
        nvml_loader=lambda: pynvml,
    )
    sampler._open_gpu()
    assert sampler.gpu is None and not sampler.want_gpu
    assert caplog.text.count("no GPU metrics from this node") == 1
    batches = sampler.sample_once()
    assert [b.labels for b in batches] == [{"node": batches[0].labels["node"]}]  # host only
    missing = hardware.HardwareSampler(
        lambda batch: None, lambda: run, lock_dir=str(tmp_path), nvml_loader=lambda: None
    )
    missing._open_gpu()
    assert missing.gpu is None


def test_host_sampling_for_real():
    sampler = HostSampler()
    first = sampler.sample()
    sum(i * i for i in range(200_000))  # some CPU work between the samples
    second = sampler.sample()
    with open("/proc/meminfo") as f:
        total = float(f.readline().split()[1]) * 1024
    assert first["rl_insight_host_memory_total_bytes"] == total
    assert 0 < second["rl_insight_host_memory_available_bytes"] <= total
    assert 0.0 <= second["rl_insight_host_cpu_utilization_percent"] <= 100.0
    assert second["rl_insight_host_load1"] >= 0 and second["rl_insight_host_cpu_count"] == os.cpu_count()
    for key in ("network_receive", "network_transmit", "disk_read", "disk_written"):
        name = [k for k in second if key in k][0]
        assert second[name] >= 0
    assert "rl_insight_host_cpu_utilization_percent" not in first  # a rate needs two samples


def test_one_sampler_per_node_and_takeover(tmp_path):
    run = RunInfo("p", "e")
    a = hardware.HardwareSampler(
        lambda batch: None, lambda: run, interval_s=0.05, lock_dir=str(tmp_path), nvml_loader=lambda: make_nvml(gpus=1)
    ).start()
    wait_for(lambda: a.samples >= 2, 10, what="first sampler")
    b = hardware.HardwareSampler(
        lambda batch: None, lambda: run, interval_s=0.05, lock_dir=str(tmp_path), nvml_loader=lambda: make_nvml(gpus=1)
    ).start()
    try:
        import time

        time.sleep(0.5)
        assert b.samples == 0  # the node's GPUs are reported once
        a.close()
        wait_for(lambda: b.samples >= 2, 10, what="takeover after the first one stops")
    finally:
        a.close()
        b.close()


def test_gpu_and_host_series_reach_the_hub_with_run_labels(hub_server, monkeypatch, tmp_path):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    monkeypatch.delenv("VERL_RL_INSIGHT_CONFIG")
    monkeypatch.setattr(hardware, "load_nvml", lambda: make_nvml(gpus=2))
    import verl_rl_insight

    verl_rl_insight.init("proj", "hw", config={"plugins": {"hardware": {"interval_s": 0.2, "lock_dir": str(tmp_path)}}})
    wait_for(lambda: len(server.hub.streams()) >= 3, 10, what="gpu and host streams")
    verl_rl_insight.finish()
    text = http("GET", server.url + "/metrics")[1].decode()
    util = [x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'gpu="1"' in x][-1]
    assert 'experiment_name="hw"' in util and 'project="proj"' in util and 'UUID="GPU-00000001-stand-in"' in util
    assert any(
        x.startswith("rl_insight_host_memory_total_bytes{") and 'experiment_name="hw"' in x for x in text.splitlines()
    )


def test_hardware_plugin_switched_off_by_override(hub_server, monkeypatch):
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    monkeypatch.delenv("VERL_RL_INSIGHT_CONFIG")
    import verl_rl_insight
    from verl_rl_insight.trainer import runtime

    verl_rl_insight.init("proj", "hw-off", config={"plugins": {"hardware": {"enabled": False}}})
    assert "hardware" not in dict(runtime.get_runtime().pm.list_name_plugin())
    assert hardware.sampler() is None
    verl_rl_insight.finish()
    assert json.loads(http("GET", server.url + "/api/v1/streams")[1])["streams"] == []


def test_verl_workers_start_monitoring_when_the_run_enables_it(hub_server, monkeypatch, tmp_path):
    from verl.single_controller.base.worker import Worker

    from verl_rl_insight.trainer import runtime

    assert runtime.get_runtime() is None
    server = hub_server()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    # the hardware plugin on (conftest turns it off for the other tests), its node lock here
    hardware_on = {"plugins": {"hardware": {"enabled": True, "interval_s": 0.2, "lock_dir": str(tmp_path)}}}
    monkeypatch.setenv("VERL_RL_INSIGHT_CONFIG", json.dumps(hardware_on))
    monkeypatch.setattr(hardware, "load_nvml", lambda: make_nvml(gpus=1))
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    Worker()
    assert runtime.get_runtime() is not None and hardware.sampler() is not None  # this node's sampler runs
    wait_for(
        lambda: any("gpu" in s["labels"] for s in server.hub.streams()),
        10,
        what="the worker's GPU series at the hub",
    )


SQUATTER = """
import fcntl, os, sys
temp, uid = sys.argv[1], int(sys.argv[2])
old = os.path.join(temp, f"rl-insight-hardware-{uid}.lock")  # the name the lock had in the shared temp dir
fd = os.open(old, os.O_CREAT | os.O_RDWR, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.mkdir(os.path.join(temp, f"rl-insight-{uid}"), 0o777)  # and the private folder's name, taken first
os.chmod(os.path.join(temp, f"rl-insight-{uid}"), 0o777)
print("holding", flush=True)
sys.stdin.read()
"""


def test_another_user_cannot_take_the_node_lock_and_switch_the_gpu_metrics_off(tmp_path, monkeypatch):
    """User nobody takes the lock file and the folder names first, in the temp dir every user
    shares: the sampler still gets its lock, in a folder only its user may enter."""
    import stat
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root, to be another user (CI runs as root)")
    temp = tempfile.mkdtemp(prefix="rl-insight-test-shared-tmp-", dir="/tmp")  # like /tmp: 1777
    os.chmod(temp, 0o1777)
    squatter = subprocess.Popen(
        ["/usr/bin/python3", "-c", SQUATTER, temp, str(os.getuid())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, user=65534, group=65534, extra_groups=[],
        cwd="/", env={},
    )  # fmt: skip
    try:
        assert squatter.stdout.readline().strip() == "holding"
        monkeypatch.setenv("TMPDIR", temp)
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again
        run = RunInfo("p", "e")
        sampler = hardware.HardwareSampler(
            lambda batch: None, lambda: run, interval_s=0.05, nvml_loader=lambda: make_nvml(gpus=1)
        ).start()
        try:
            wait_for(lambda: sampler.samples >= 2, 10, what="the sampler holding its lock")
            folder = os.path.dirname(sampler.lock.path)
            st = os.lstat(folder)
            assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700
            assert folder != os.path.join(temp, f"rl-insight-{os.getuid()}")  # nobody's folder is not used
        finally:
            sampler.close()
    finally:
        squatter.stdin.close()
        squatter.wait(10)
        tempfile.tempdir = None
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def test_simulated_gpus_are_refused_outside_the_demo_with_an_error_naming_the_key(monkeypatch, tmp_path, caplog):
    """A training run that sets simulate_gpus gets a config error naming the key (strict: raised;
    else logged) and no made-up GPU under the DCGM names and its labels."""
    import verl_rl_insight
    from verl_rl_insight.contract.errors import ConfigError
    from verl_rl_insight.trainer import runtime

    monkeypatch.delenv("VERL_RL_INSIGHT_CONFIG")
    simulated = {"plugins": {"hardware": {"simulate_gpus": 2, "interval_s": 0.1, "lock_dir": str(tmp_path)}}}
    with pytest.raises(ConfigError, match=r"plugins\.hardware\.simulate_gpus=2 is refused.*rl-insight demo"):
        verl_rl_insight.init("proj", "real", config=simulated)
    monkeypatch.setattr(hardware, "load_nvml", lambda: None)  # this node has no GPU
    with caplog.at_level(logging.ERROR, logger="verl_rl_insight"):
        rt = runtime.start(trainer_config={"rl_insight": simulated})
    assert any("plugins.hardware.simulate_gpus=2 is refused" in r.getMessage() for r in caplog.records)
    wait_for(lambda: hardware.sampler() is not None and hardware.sampler().samples > 0, 10, what="a sample")
    batches = hardware.sampler().sample_once()
    assert batches and all("gpu" not in b.labels for b in batches)  # the host only: no GPU made up
    assert rt is runtime.get_runtime()
    runtime.shutdown(1)


def test_the_demos_simulated_gpus_follow_the_load_it_hands_over_and_say_they_are_simulated(tmp_path, monkeypatch):
    """The demo passes its load to the hardware plugin it registers: the GPU series move with it
    and carry simulated="true"."""
    from verl_rl_insight.trainer import runtime
    from verl_rl_insight.trainer.samplers.simulated_nvml import SimulatedLoad

    monkeypatch.delenv("VERL_RL_INSIGHT_CONFIG")
    load = SimulatedLoad(0.1)
    settings = {"simulate_gpus": 2, "interval_s": 60, "lock_dir": str(tmp_path), "host": False}
    runtime.start(
        trainer_config={"rl_insight": {"plugins": {"hardware": settings}}},
        plugins={"hardware": hardware.Plugin(simulated_load=load)},
    )
    sampler = hardware.sampler()
    wait_for(lambda: sampler.gpu is not None, 10, what="the simulated GPUs")
    idle = {b.labels["gpu"]: b for b in sampler.sample_once()}
    load.set(0.9)
    busy = {b.labels["gpu"]: b for b in sampler.sample_once()}
    assert sorted(busy) == ["0", "1"] and all(b.labels["simulated"] == "true" for b in busy.values())
    assert busy["0"].samples()[0]["DCGM_FI_DEV_GPU_UTIL"] > idle["0"].samples()[0]["DCGM_FI_DEV_GPU_UTIL"]
    runtime.shutdown(1)


def test_a_sample_taken_while_the_runtime_is_being_built_is_not_labelled_with_a_made_up_run(monkeypatch, tmp_path):
    """The sampler's thread starts while the runtime is built (its plugins' configure), before the
    runtime is published: a sample then had no run and went out as ``default/default``, which a run
    credential's server refuses. Before the runtime is up, nothing is sampled."""
    from verl_rl_insight.trainer import runtime

    monkeypatch.setattr(runtime, "get_runtime", lambda: None)
    exported = []
    sampler = hardware.HardwareSampler(
        lambda batch: exported.append(batch), hardware.current_run, interval_s=60, lock_dir=str(tmp_path)
    )
    assert sampler.sample_once() == [] and exported == []
    up = type("Up", (), {"current_run": lambda self: RunInfo("p", "e")})()
    monkeypatch.setattr(runtime, "get_runtime", lambda: up)
    batches = sampler.sample_once()  # the positive control: with a runtime, the host is sampled for its run
    assert batches and {(b.project, b.experiment_name) for b in batches} == {("p", "e")}
    assert exported == batches
