"""Dashboards as code: the committed JSON is current, every query names a metric something
produces and filters on project and experiment_name, and `rl-insight dashboards export` writes them."""

import json
import subprocess
import sys

from verl_rl_insight.grafana import DASHBOARDS_DIR
from verl_rl_insight.grafana import generate
from verl_rl_insight.grafana.build import build
from verl_rl_insight.grafana.catalogue import known_names


def test_committed_dashboards_are_current_and_their_queries_check_out():
    result = subprocess.run([sys.executable, "-m", "verl_rl_insight.grafana.generate", "--check"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in DASHBOARDS_DIR.glob("*.json")) == [
        "rl_insight_hardware.json", "verl_trainer_v1_with_sglang_engine.json",
        "verl_trainer_v1_with_vllm_engine.json"]


def test_check_fails_on_a_stale_file_and_on_a_metric_nothing_produces(tmp_path):
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    path = tmp_path / "verl_trainer_v1_with_vllm_engine.json"
    path.write_text(path.read_text().replace("Grad norm", "Grad norms"))
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1
    dashboards = build()
    panel = dashboards["rl_insight_hardware.json"]["panels"][1]
    panel["targets"][0]["expr"] = 'DCGM_FI_DEV_GPU_UTILISATION{project="$project",experiment_name="$experiment_name"}'
    found = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert found == [f"rl_insight_hardware.json: DCGM_FI_DEV_GPU_UTILISATION is produced by nothing: "
                     f"{panel['targets'][0]['expr']}"]
    panel["targets"][0]["expr"] = 'rl_insight_monitor_actor_grad_normz{project="$project",experiment_name="$experiment_name"}'
    [problem] = generate.problems(dashboards, known_names(), generate.verl_keys())
    assert "rl_insight_monitor_actor_grad_normz is produced by nothing" in problem   # not a key verl logs
    panel["targets"][0]["expr"] = "DCGM_FI_DEV_GPU_UTIL"
    assert "does not filter on project and experiment_name" in generate.problems(
        dashboards, known_names(), generate.verl_keys())[0]


def test_dashboards_have_the_rows_variables_and_datasources_users_look_for():
    dashboards = build()
    vllm = dashboards["verl_trainer_v1_with_vllm_engine.json"]
    assert vllm["uid"] == "verl_trainer_v1_with_vllm_engine"
    assert [v["name"] for v in vllm["templating"]["list"]] == ["project", "experiment_name", "replica", "node", "gpu"]
    rows = [p["title"] for p in vllm["panels"] if p["type"] == "row"]
    assert rows == ["RL state timeline", "Training", "vllm engines (per replica)", "TransferQueue", "Hardware"]
    assert {p["datasource"]["uid"] for p in vllm["panels"] if "datasource" in p} == {
        "rl-insight-prometheus", "rl-insight-tempo"}
    assert any(p["type"] == "xychart" for p in vllm["panels"])           # the training-step x axis
    sglang_text = json.dumps(dashboards["verl_trainer_v1_with_sglang_engine.json"])
    assert "sglang:num_running_reqs" in sglang_text and "vllm:" not in sglang_text
    ids = [p["id"] for p in vllm["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboards_export_writes_them_for_an_existing_grafana(tmp_path):
    result = subprocess.run([sys.executable, "-m", "verl_rl_insight", "dashboards", "export", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "out").glob("*.json"))
    assert written == sorted(p.name for p in DASHBOARDS_DIR.glob("*.json"))
    for name in written:
        assert (tmp_path / "out" / name).read_text() == (DASHBOARDS_DIR / name).read_text()
