"""`rl-insight profile analyze DIR`: which rank, in which RL phase, held a profiled step.

Read on the official RL-Insight repository's sample traces (real verl profiler output, see
tests/data/profiles/SOURCE.md) and on traces made here by torch.profiler through verl's own
profiler helper on a real 2-process gloo group."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e import test_explorer_page
from tests.helpers import REPO, free_port
from verl_rl_insight.commands import main

browser, tab = test_explorer_page.browser, test_explorer_page.tab  # the Chromium tab fixture

PROFILES = Path(__file__).parent.parent / "data" / "profiles"
STEP = 7


def analyze(capsys, *args):
    """The command in this process: (exit code, stdout, stderr)."""
    code = main(["profile", "analyze", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys, folder):
    code, out, err = analyze(capsys, folder, "--json")
    assert code == 0, err
    found = json.loads(out)
    return {p["phase"]: {r["rank"]: r for r in p["ranks"]} for p in found["phases"]}, found


def chrome_window_s(path):
    """What a chrome trace's own complete events span: from the first start to the last end."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events if e.get("ph") == "X"]
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1e6


def test_official_torch_samples_phases_ranks_and_durations(capsys):
    folder = PROFILES / "torch_data"
    phases, _ = as_json(capsys, folder)
    assert set(phases) == {"gen", "old_log_prob", "update_actor"}
    assert set(phases["update_actor"]) == {"0", "1"} and set(phases["old_log_prob"]) == {"0", "1"}
    assert set(phases["gen"]) == {"replica 0 rank 0", "replica 0 rank 1"}
    for ranks in phases.values():
        for rank in ranks.values():
            assert rank["duration_s"] == pytest.approx(chrome_window_s(Path(rank["file"])), rel=1e-9)
            assert rank["waiting_s"] == 0  # these samples hold no collective
    assert phases["gen"]["replica 0 rank 0"]["node"] == "huawei"  # <host>_<pid>.<ns>.pt.trace.json.gz


def test_official_nvtx_samples_phases_ranks_and_durations(capsys):
    folder = PROFILES / "nvtx_data"
    phases, found = as_json(capsys, folder)
    assert list(phases) == ["old_log_prob", "values", "update_critic"]  # verl's order of a step
    for ranks in phases.values():
        assert set(ranks) == {"0", "1"}
    for path in sorted(folder.rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        names = {r["id"]: r["value"] for r in rows if r["table"] == "StringIds"}
        (marks,) = [r for r in rows if r["table"] == "NVTX_EVENTS"]
        rank = rows[-1]["value"].split('"')[1]
        phase = {"compute_log_prob": "old_log_prob", "compute_values": "values"}.get(names[marks["textId"]])
        phase = phase or names[marks["textId"]]
        assert phases[phase][rank]["duration_s"] == pytest.approx((marks["end"] - marks["start"]) / 1e9, rel=1e-12)
    assert "no rank held the others" in found["answer"]


def test_official_mstx_samples_waiting_is_the_communication_no_computation_hid(capsys):
    phases, _ = as_json(capsys, PROFILES / "mstx_data")
    assert set(phases) == {"gen", "old_log_prob", "ref", "update_actor"}
    trace = next((PROFILES / "mstx_data").rglob("actor_update/*/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    events = json.loads(trace.read_text())
    waited = sum(e["dur"] for e in events if e["name"] == "Communication(Not Overlapped)") / 1e6
    update = phases["update_actor"]["0"]
    # MSTX stamps are microseconds since 1970 (1.7e15): a float holds them to 0.25 us
    assert update["duration_s"] == pytest.approx(chrome_window_s(trace), abs=1e-6)
    assert update["waiting_s"] == pytest.approx(waited, abs=1e-6)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One step's traces of 2 gloo ranks; rank 1 sleeps 1.5 s inside actor_update."""
    out = tmp_path_factory.mktemp("traces")
    script = REPO / "tests" / "scripts" / "profile_two_ranks.py"
    done = subprocess.run(
        [sys.executable, str(script), str(out), str(STEP), str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(out.glob(f"actor_train_step{STEP}_rank*-of-2_*.json.gz"))) == 2  # verl's own names
    return out


def test_the_rank_that_slept_is_the_slowest_and_rank_0_waited_in_the_all_reduce(two_ranks, capsys):
    phases, found = as_json(capsys, two_ranks)
    update = phases["update_actor"]
    (view,) = [p for p in found["phases"] if p["phase"] == "update_actor"]
    assert view["slowest"]["rank"] == "1"
    assert update["1"]["work_s"] >= 1.5  # the sleep is its own work, not waiting
    # rank 0 sat in the all-reduce while rank 1 slept: most of its time there is waiting (the two
    # leave the barrier before the phase up to ~0.2 s apart on a loaded 2-core machine)
    assert update["0"]["waiting_s"] >= 0.75 and update["0"]["waiting_s"] > update["0"]["work_s"], update["0"]
    assert update["0"]["waiting_s"] > update["1"]["waiting_s"], update
    assert set(update["0"]["waiting_by_op"]) == {"all-reduce"}
    assert found["answer"].startswith(f"step {STEP}: update_actor took ")
    assert "on rank 1," in found["answer"] and "waiting in all-reduce" in found["answer"]


def test_the_table_and_the_html_name_the_slowest_rank(two_ranks, capsys, tmp_path):
    page = tmp_path / "step.html"
    code, out, _ = analyze(capsys, two_ranks, "-o", page)
    assert code == 0
    slowest = [line for line in out.splitlines() if "<- slowest" in line]
    assert len(slowest) == 1 and slowest[0].split()[0] == "1"
    assert out.strip().splitlines()[-2].startswith(f"step {STEP}: update_actor took")
    assert "class='slowest'><td>rank 1</td>" in page.read_text()


def test_a_cut_trace_is_one_line_naming_it_exit_2(two_ranks, capsys, tmp_path):
    folder = tmp_path / "cut"
    shutil.copytree(two_ranks, folder)
    victim = sorted(folder.glob("*rank1-of-2*"))[0]
    victim.write_bytes(gzip.compress(gzip.decompress(victim.read_bytes())[:-200]))  # JSON cut short
    code, out, err = analyze(capsys, folder)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(victim) in err and "not a whole trace" in err
    victim.write_bytes(victim.read_bytes()[:-30])  # the gzip stream itself cut short
    code, _, err = analyze(capsys, folder)
    assert code == 2 and str(victim) in err


def test_two_steps_traces_are_refused_naming_a_file_of_each(two_ranks, capsys, tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(two_ranks, folder)
    for trace in sorted(folder.glob("*rank1-of-2*")):
        trace.rename(trace.with_name(trace.name.replace(f"step{STEP}_", "step8_")))
    code, _, err = analyze(capsys, folder)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "step8_rank1" in err and f"step{STEP}_rank0" in err and "--step" in err
    code, out, _ = analyze(capsys, folder, "--step", STEP, "--json")
    assert code == 0 and list(json.loads(out)["phases"][0]["ranks"][0]["rank"]) == ["0"]


def test_no_trace_in_the_folder_exit_2(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("no trace here")
    code, out, err = analyze(capsys, tmp_path)
    assert code == 2 and out == "" and str(tmp_path) in err and "no trace" in err


def test_the_step_page_draws_the_ranks_and_names_the_slowest_in_a_real_browser(two_ranks, capsys, tmp_path, tab):
    """The summary the trainer sends (``profile_summary.compact`` of this very analysis) drawn by
    the explorer's own page in Chromium, from a report file (the page reads the same answer there
    as from the API)."""
    from tests.e2e.test_explorer_page import open_page
    from tests.step_report import step_answer, step_report
    from verl_rl_insight.trainer.plugins.profile_summary import compact

    _, found = as_json(capsys, two_ranks)
    step = step_answer(STEP, compact(found, STEP), profile_command="rl-insight profile ...")
    drawn = open_page(tab, step_report(tmp_path, step), "step")["step"]["ranks"]
    answer = tab.inner_text("[data-testid=profile-answer]")
    slowest = tab.locator("[data-testid=rank-lanes] tr.slowest")
    assert slowest.count() == 1 and slowest.get_attribute("data-rank") == "1"
    assert answer == found["answer"]
    assert {(r["rank"], r["slowest"]) for r in drawn} == {("0", False), ("1", True)}
