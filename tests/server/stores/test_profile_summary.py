"""The per-rank summary a trainer sends of a profiled step (POST /api/v1/profiles/report,
``updates[].summaries``): bounded and typed, a bad one is a 400 naming the field and changes
nothing; a good one is kept on its request for the step page."""

import json

import pytest

from tests.helpers import free_port, http, start_hub_process, stop_group

TOKEN = "summary-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RANK = {"rank": "1", "duration_s": 0.55, "waiting_s": 0.02, "waiting_op": "all-reduce"}
SUMMARY = {"step": 3, "answer": "step 3: update_actor took 0.555 s on rank 1", "phases": [
    {"phase": "update_actor", "slowest": "1", "spread": 1.66, "ranks": [RANK, {**RANK, "rank": "0"}]}
]}  # fmt: skip


@pytest.fixture
def request_id(tmp_path):
    port = free_port()
    process = start_hub_process(port, tmp_path, token=TOKEN)
    base = f"http://127.0.0.1:{port}"
    body = json.dumps({"project": "p", "experiment_name": "e", "first_step": 3}).encode()
    status, text = http("POST", base + "/api/v1/profiles", body, AUTH)
    assert status == 200, text
    yield base, json.loads(text)["id"]
    stop_group(process)


def report(base, request_id, summary):
    update = {"id": request_id, "state": "finished", "steps": [3], "summaries": [summary]}
    body = {"project": "p", "experiment_name": "e", "updates": [update]}
    return http("POST", base + "/api/v1/profiles/report", json.dumps(body).encode(), AUTH)


def listed(base):
    return json.loads(http("GET", base + "/api/v1/profiles?project=p&experiment_name=e", headers=AUTH)[1])


@pytest.mark.parametrize(
    "summary, field",
    [
        ({**SUMMARY, "step": 0}, "summaries[0].step"),
        ({**SUMMARY, "answer": "x" * 501}, "summaries[0].answer"),
        ({**SUMMARY, "phases": [{**SUMMARY["phases"][0], "ranks": [{**RANK, "duration_s": -1}]}]}, "duration_s"),
        (
            {**SUMMARY, "phases": [{"phase": "gen", "ranks": [{"rank": "1", "duration_s": 0, "waiting_s": 0}] * 1025}]},
            "ranks",
        ),
        ({**SUMMARY, "trace": "the whole trace"}, "unknown field 'trace'"),
    ],
)
def test_a_bad_summary_is_a_400_naming_the_field_and_changes_nothing(request_id, summary, field):
    base, rid = request_id
    status, text = report(base, rid, summary)
    assert status == 400 and field in json.loads(text)["error"], text
    [record] = listed(base)["profiles"]
    assert record["state"] == "requested" and "summaries" not in record


def test_a_summary_is_kept_on_its_request_by_step(request_id):
    base, rid = request_id
    status, text = report(base, rid, SUMMARY)
    assert status == 200, text
    [record] = listed(base)["profiles"]
    assert record["summaries"] == {"3": SUMMARY}


def test_a_cuda_steps_summary_carries_each_ranks_gpu_and_where_its_traces_are(request_id, capsys):
    """The summary the trainer makes of real CUDA traces (the H200 step: ``compact`` of this very
    analysis) is accepted whole, GPU parts included; the step answer and ``diagnose`` then give
    the command of the step's whole analysis, from the trace folder the trainer reported."""
    from tests.commands.test_profile_analyze_gpu import H200
    from verl_rl_insight.commands import main
    from verl_rl_insight.commands.diagnose import profiled
    from verl_rl_insight.contract.profile_summary import analyze_command
    from verl_rl_insight.trainer.plugins.profile_summary import compact

    base, rid = request_id
    assert main(["profile", "analyze", str(H200), "--json"]) == 0
    summary = compact(json.loads(capsys.readouterr().out), 3)
    update = {"id": rid, "state": "finished", "steps": [3], "summaries": [summary], "trace_dir": "/data/profile run"}
    body = {"project": "p", "experiment_name": "e", "updates": [update]}
    status, text = http("POST", base + "/api/v1/profiles/report", json.dumps(body).encode(), AUTH)
    assert status == 200, text
    [record] = listed(base)["profiles"]
    (update_actor,) = [p for p in record["summaries"]["3"]["phases"] if p["phase"] == "update_actor"]
    assert update_actor["slowest"] == "1" and update_actor["judged_by"] == "GPU work"
    rank1 = next(r for r in update_actor["ranks"] if r["rank"] == "1")
    assert rank1["verdict"] == "GPU-bound" and rank1["kernels"] == 800 and 0.07 < rank1["gpu_busy_s"] < 0.08
    found = profiled(base, TOKEN, "p", "e")
    assert found[3].answer == summary["answer"] and found[3].command == analyze_command("/data/profile run", 3)
    assert found[3].command == "rl-insight profile analyze '/data/profile run' --step 3 -o step3.html"


def test_a_gpu_part_out_of_its_bounds_is_a_400_naming_it(request_id):
    base, rid = request_id
    for bad, field in (
        ({"verdict": "fast"}, "verdict"),
        ({"kernels": -1}, "kernels"),
        ({"gpu_busy_s": -2}, "gpu_busy_s"),
    ):
        phases = [{**SUMMARY["phases"][0], "ranks": [{**RANK, **bad}]}]
        status, text = report(base, rid, {**SUMMARY, "phases": phases})
        assert status == 400 and field in json.loads(text)["error"], text


def test_a_summary_of_a_thousand_ranks_with_long_names_fits_the_report(request_id):
    """``compact`` keeps fewer of a phase's ranks (the busiest) until the summary fits its byte
    budget: the route takes it, and the phase says how many ranks it had."""
    from verl_rl_insight.trainer.plugins.profile_summary import compact

    base, rid = request_id
    gpu = {"verdict": "GPU-bound", "busy_s": 0.07, "host_s": 0.005, "kernels": 123456, "memory": None}
    ranks = [
        {"rank": f"replica 12 rank {i}", "node": "n" * 256, "duration_s": 12.3 + i / 1e3, "waiting_s": 1.2,
         "work_s": 11.1 + i / 1e3, "waiting_by_op": {"all-reduce": 1.2}, "gpu": gpu}
        for i in range(1000)
    ]  # fmt: skip
    slowest = {"rank": "replica 12 rank 999"}
    phases = [{"phase": f"phase{j}", "spread": 1.5, "slowest": slowest, "ranks": ranks} for j in range(4)]
    summary = compact({"answer": "x" * 500, "phases": phases}, 3)
    status, text = report(base, rid, summary)
    assert status == 200, text
    kept = summary["phases"][0]
    assert kept["ranks_total"] == 1000 and "replica 12 rank 999" in {r["rank"] for r in kept["ranks"]}
