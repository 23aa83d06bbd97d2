"""Every way in activates the patches in a fresh interpreter; every patch can be undone."""

import json
import os
import subprocess
import sys

from tests.helpers import old_verl, run_python

PATCHED_0_8 = """
import verl.utils.tracking as t
print("PATCHED" if "rl_insight" in t.Tracking.supported_backend else "NOT_PATCHED")
"""


def test_pth_file_activates_a_plain_python_and_autoload_0_turns_it_off():
    target = old_verl("0.8.0")  # verl 0.8 knows no rl_insight: the patch is all there is
    assert "PATCHED" == run_python(PATCHED_0_8, pythonpath=target).stdout.strip()
    off = run_python(PATCHED_0_8, pythonpath=target, env={"VERL_RL_INSIGHT_AUTOLOAD": "0"})
    assert off.stdout.strip() == "NOT_PATCHED", off.stderr


def test_verl_use_external_modules_activates_when_autoload_is_off():
    target = old_verl("0.8.0")
    result = run_python(
        PATCHED_0_8,
        pythonpath=target,
        env={
            "VERL_RL_INSIGHT_AUTOLOAD": "0",
            "VERL_USE_EXTERNAL_MODULES": "verl_rl_insight.trainer.activation.activate",
        },
    )
    assert result.stdout.strip() == "PATCHED", result.stderr


def test_rl_insight_run_activates_the_command_it_starts():
    target = old_verl("0.8.0")
    env = dict(os.environ, VERL_RL_INSIGHT_AUTOLOAD="0", PYTHONPATH=str(target))
    result = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "run", "--", sys.executable, "-c", PATCHED_0_8],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert result.stdout.strip() == "PATCHED", result.stderr


def test_verl_0_9_loads_the_verl_plugins_entry_point_on_import_verl():
    code = "import sys, verl; print('verl_rl_insight.trainer.activation.verl_plugin' in sys.modules)"
    assert run_python(code).stdout.strip() == "True"
    assert run_python(code, env={"VERL_USE_EXTERNAL_PLUGINS": "none"}).stdout.strip() == "False"


def test_pth_bootstrap_imports_nothing_heavy():
    code = (
        "import sys; heavy = [m for m in ('verl', 'torch', 'requests', 'omegaconf', 'pluggy', "
        "'opentelemetry') if m in sys.modules]; print(heavy)"
    )
    assert run_python(code).stdout.strip() == "[]"


def test_instrumentor_patches_and_unpatches():
    code = """
import verl.utils.tracking as t
from verl_rl_insight.trainer.activation import bootstrap
from verl_rl_insight.trainer.activation.instrumentor import VerlInstrumentor
bootstrap.deactivate()
print("rl_insight" in t.Tracking.supported_backend, hasattr(t.Tracking.__init__, "__wrapped__"))
VerlInstrumentor().instrument()
print("rl_insight" in t.Tracking.supported_backend, hasattr(t.Tracking.__init__, "__wrapped__"))
VerlInstrumentor().uninstrument()
print("rl_insight" in t.Tracking.supported_backend, hasattr(t.Tracking.__init__, "__wrapped__"))
"""
    target = old_verl("0.8.0")
    result = run_python(code, pythonpath=target)
    assert result.stdout.split("\n")[:3] == ["False False", "True True", "False False"], result.stderr[-2000:]


MAIN_PPO = """
import json, os, verl
import verl.trainer.main_ppo as main_ppo
from omegaconf import OmegaConf
from verl_rl_insight.trainer.verl_api.propagation import prepare_driver_environment
prepare_driver_environment(OmegaConf.create({
    "trainer": {"logger": ["console", "rl_insight"], "project_name": "p", "experiment_name": "e"},
    "rl_insight": {"plugins": {"metric_push": {"timeout_s": 3}}}}))
print(os.environ.get("VERL_RL_INSIGHT_ENABLE"), os.environ.get("VERL_RL_INSIGHT_CONFIG"))
print(verl.__version__, json.dumps(main_ppo.get_ppo_ray_runtime_env()["env_vars"]))
"""


def test_main_ppo_forwards_rl_insight_env_to_ray_workers_on_0_8_and_0_9_with_a_run_credential_not_the_token():
    from verl_rl_insight.contract import run_credential

    env = {"RL_INSIGHT_SERVER_URL": "http://rl-insight:t0ken@127.0.0.1:1", "VERL_RL_INSIGHT_CONFIG": '{"token": "t"}'}
    for pythonpath, version in ((None, "0.9.1"), (old_verl("0.8.0"), "0.8.0")):
        result = run_python(MAIN_PPO, env=env, pythonpath=pythonpath, timeout=300)
        lines = result.stdout.strip().splitlines()
        enable, published = lines[-2].split(" ", 1)
        assert enable == "1" and json.loads(published)["plugins"]["metric_push"] == {"timeout_s": 3}
        shown, workers = lines[-1].split(" ", 1)
        assert shown == version, result.stderr[-2000:]
        # what verl prints (`ray init kwargs`) and every Ray worker gets: no server token anywhere
        assert "t0ken" not in workers
        workers = json.loads(workers)
        assert workers["RL_INSIGHT_SERVER_URL"] == "http://127.0.0.1:1"
        assert run_credential.verify("t0ken", workers["RL_INSIGHT_TOKEN"]) == ("p", "e")


def test_the_wheel_ships_the_pth_file_at_the_root_and_the_run_sitecustomize(tmp_path):
    import zipfile

    from tests.helpers import REPO

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    [wheel] = tmp_path.glob("verl_rl_insight-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "verl_rl_insight_autoload.pth" in names  # site-packages root: read at start-up
    assert "verl_rl_insight/trainer/activation/sitecustomize_dir/sitecustomize.py" in names
    page = ("explorer.html", "explorer.js", "explorer.css", "uPlot.iife.min.js", "uPlot.min.css", "LICENSE.uPlot")
    for asset in page:
        assert f"verl_rl_insight/server/explorer/static/{asset}" in names  # the run explorer's page, no CDN
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "rl_insight = verl_rl_insight.trainer.activation.verl_plugin" in entry_points
    assert "verl = verl_rl_insight.trainer.activation.instrumentor:VerlInstrumentor" in entry_points
