"""`rl-insight profile analyze` on real CUDA traces: which rank held a phase, by GPU work or by its
host, with the kernel, idle, communication and memory figures each checked against the trace's own
events, summed here independently of the reader (tests/data/gpu_traces/SOURCE.md says where each
file comes from: an H200 run made for this project, Holistic Trace Analysis' own NCCL traces, a
real allocator snapshot)."""

import gzip
import json
import pickle
import re
import shutil
from pathlib import Path

import pytest

from tests.e2e import test_explorer_page
from verl_rl_insight.commands import main

browser, tab = test_explorer_page.browser, test_explorer_page.tab  # the Chromium tab fixture

GPU_TRACES = Path(__file__).parent.parent / "data" / "gpu_traces"
H200 = GPU_TRACES / "h200_step7"
HTA = GPU_TRACES / "hta"
SNAPSHOT = GPU_TRACES / "memory_snapshot" / "cs336_transformer_memory_snapshot.pickle.gz"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def analyze(capsys, *args):
    code = main(["profile", "analyze", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys, *args):
    code, out, err = analyze(capsys, *args, "--json")
    assert code == 0, err
    found = json.loads(out)
    return {p["phase"]: {r["rank"]: r for r in p["ranks"]} for p in found["phases"]}, found


def merged(spans):
    out = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def overlap(spans, low, high):
    return sum(max(0.0, min(end, high) - max(start, low)) for start, end in spans)


def events(path):
    """The trace's events, every ``ts`` from its first event's: kineto's stamps (5.5e12 us) lose a
    short kernel's nanoseconds when its duration is added to them."""
    with gzip.open(path, "rt") as f:
        found = json.load(f)["traceEvents"]
    base = min(e["ts"] for e in found if isinstance(e.get("ts"), (int, float)))
    for e in found:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] -= base
    return found


def host_window(trace, phase):
    (mark,) = [e for e in trace if e.get("cat") == "user_annotation" and e["name"] == phase]
    return mark["ts"], mark["ts"] + mark["dur"]


def test_h200_update_actor_held_by_rank_1s_gpu_work_5x_the_other_rank(capsys):
    phases, found = as_json(capsys, H200)
    busy = {}
    for rank in (0, 1):
        trace = events(H200 / f"actor_train_step7_rank{rank}.json.gz")
        low, high = host_window(trace, "update_actor")
        device = [e for e in trace if e.get("cat") in DEVICE]
        kernels = [e for e in trace if e.get("cat") == "kernel"]
        ours = phases["update_actor"][str(rank)]["gpu"]
        # the kernels' time inside the phase's window on the host, summed from the trace itself
        kernel_s = sum(overlap([(e["ts"], e["ts"] + e["dur"])], low, high) for e in kernels) / 1e6
        assert ours["kernel_time_s"]["compute"] == pytest.approx(kernel_s, rel=1e-9)
        busy[rank] = overlap(merged([e["ts"], e["ts"] + e["dur"]] for e in device), low, high) / 1e6
        assert ours["busy_s"] == pytest.approx(busy[rank], rel=1e-9)
        assert ours["kernels"] == sum(1 for e in kernels if low <= e["ts"] < high)
        assert ours["window_s"] == pytest.approx((high - low) / 1e6, rel=1e-9)
    assert (phases["update_actor"]["1"]["gpu"]["kernels"], phases["update_actor"]["0"]["gpu"]["kernels"]) == (800, 80)
    (update,) = [p for p in found["phases"] if p["phase"] == "update_actor"]
    assert update["slowest"]["rank"] == "1" and update["held"] and update["judged_by"] == "GPU work"
    # two ranks: the ratio is against the other rank itself, not the median (mean) of both
    assert update["ratio"] == pytest.approx(busy[1] / busy[0], rel=1e-9) and 5.0 < update["ratio"] < 5.5
    assert phases["update_actor"]["1"]["gpu"]["verdict"] == "GPU-bound"
    assert phases["update_actor"]["0"]["gpu"]["verdict"] == "communication-bound"  # in gloo's all-reduce, GPU idle
    answer = found["answer"]
    assert answer.startswith("step 7: update_actor held the step on rank 1: 75.9 ms of GPU work, 5.2x the other")
    assert (
        "GPU-bound" in answer and "800 kernels against 80" in answer and "waited 81 % of theirs in all-reduce" in answer
    )
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT (400 launches" in answer  # the kernel that differs


def test_h200_gen_is_host_bound_on_both_ranks_the_gpu_waiting_on_launches(capsys):
    """gen is the first phase after the profiler started: cuBLAS' first launches take milliseconds
    on the host (a cudaLaunchKernel of 3.8 ms), so the GPU sits idle most of the phase."""
    phases, found = as_json(capsys, H200)
    for rank in ("0", "1"):
        gpu = phases["gen"][rank]["gpu"]
        assert gpu["verdict"] == "host-bound" and gpu["shares"]["host"] > 0.8, gpu["shares"]
        causes = gpu["idle_causes_s"]
        assert causes["host_wait"] > 0.9 * sum(causes.values())  # the next kernel not launched yet
        assert sum(causes.values()) == pytest.approx(gpu["idle_s"], rel=1e-9)
    (gen,) = [p for p in found["phases"] if p["phase"] == "gen"]
    assert not gen["held"]  # both ranks alike: no rank held the other


def test_h200_idle_causes_follow_each_kernels_launch_in_the_trace(capsys):
    """A gap before a kernel is host wait exactly when its runtime call (same correlation id)
    started after the GPU went idle: recomputed here from the trace's own launches."""
    phases, _ = as_json(capsys, H200)
    trace = events(H200 / "actor_train_step7_rank1.json.gz")
    launched = {e["args"]["correlation"]: e["ts"] for e in trace if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    device = sorted((e["ts"], e["ts"] + e["dur"], e["args"]["correlation"]) for e in trace if e.get("cat") in DEVICE)
    low, high = host_window(trace, "old_log_prob")
    host_wait = end = 0.0
    end = low
    for start, stop, correlation in device:
        if stop <= low or start >= high:
            continue
        if start > end and launched[correlation] > end:
            host_wait += start - end
        end = max(end, stop)
    following = next(c for s, _, c in device if s >= high)
    if end < high and launched[following] > end:
        host_wait += high - end
    ours = phases["old_log_prob"]["1"]["gpu"]["idle_causes_s"]["host_wait"]
    assert ours == pytest.approx(host_wait / 1e6, rel=1e-6)


def test_cpu_only_traces_keep_their_figures_and_say_no_gpu_events(capsys):
    folder = Path(__file__).parent.parent / "data" / "profiles" / "torch_data"
    phases, found = as_json(capsys, folder)
    assert all(rank["gpu"] is None for ranks in phases.values() for rank in ranks.values())
    assert all(trace["gpu"] is None for trace in found["traces"])
    code, out, _ = analyze(capsys, folder)
    assert code == 0 and out.count("no GPU events") == 6  # one a rank a phase


def test_nccl_kernels_hidden_by_compute_are_not_waiting_exposed_ones_are(capsys):
    """HTA's two ranks of a 128-rank job: NCCL send/recv on streams of their own, partly under
    compute kernels. Overlap and exposed communication recomputed from the kernels."""
    phases, _ = as_json(capsys, HTA / "sampled_rank-0.json.gz")
    trace = events(HTA / "sampled_rank-0.json.gz")
    steps = merged([e["ts"], e["ts"] + e["dur"]] for e in trace if e.get("name", "").startswith("ProfilerStep#"))
    kernels = [e for e in trace if e.get("cat") == "kernel"]
    comm = merged([e["ts"], e["ts"] + e["dur"]] for e in kernels if "nccl" in e["name"].lower())
    compute = merged([e["ts"], e["ts"] + e["dur"]] for e in kernels if "nccl" not in e["name"].lower())
    hidden = sum(overlap(compute, *c) for c in comm if any(overlap([c], *s) for s in steps))
    gpu = phases["ProfilerStep"]["0"]["gpu"]
    assert gpu["overlap_s"] == pytest.approx(hidden / 1e6, rel=1e-6) and gpu["overlap_s"] > 0
    assert gpu["exposed_communication_s"] == pytest.approx(gpu["communication_busy_s"] - hidden / 1e6, rel=1e-6)
    assert gpu["exposed_communication_s"] > 0.2  # most of the send/recv is not hidden


def test_peak_memory_of_a_phase_is_the_allocators_highest_point_in_it(capsys):
    phases, _ = as_json(capsys, HTA / "df_index_resolver.json.gz")
    trace = events(HTA / "df_index_resolver.json.gz")
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("name", "").startswith("ProfilerStep#")]
    points = [e for e in trace if e.get("name") == "[memory]" and e["args"]["Device Type"] != 0]
    inside = [p for p in points if any(low <= p["ts"] < high for low, high in steps)]
    memory = phases["ProfilerStep"]["1"]["gpu"]["memory"]
    assert memory["peak_allocated_bytes"] == max(p["args"]["Total Allocated"] for p in inside)
    assert memory["peak_reserved_bytes"] == max(p["args"]["Total Reserved"] for p in inside)
    code, out, _ = analyze(capsys, HTA / "df_index_resolver.json.gz")
    assert code == 0 and f"{memory['peak_allocated_bytes'] / 2**30:.3g} GiB" in out


@pytest.fixture
def snapshot_step(tmp_path):
    """The real snapshot where verl's torch_memory tool writes its own."""
    folder = tmp_path / "step3"
    folder.mkdir()
    target = folder / "torch_memory_rank0_pid4242.pickle"
    target.write_bytes(gzip.decompress(SNAPSHOT.read_bytes()))
    return tmp_path, target


def test_a_snapshots_peak_and_what_was_alive_at_it(capsys, snapshot_step):
    folder, target = snapshot_step
    data = pickle.loads(target.read_bytes())  # the test's own file, known to be data only
    history = data["device_traces"][0]
    # the bytes asked for, as the history records them (a block's own size is rounded up)
    alive_at_dump = sum(
        b["requested_size"] for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
    )
    # the live bytes over the history: what was alive before it plus each allocation, less each free
    net = sum(e["size"] for e in history if e["action"] == "alloc")
    net -= sum(e["size"] for e in history if e["action"] == "free_completed")
    now = alive_at_dump - net
    peak = now
    for e in history:
        now += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
        peak = max(peak, now)
    _, found = as_json(capsys, folder)
    (snap,) = found["snapshots"]
    assert snap["peak_allocated_bytes"] == peak and snap["events"] == len(history) and snap["rank"] == "0"
    told = sum(site["bytes"] for site in snap["sites"]) + snap["before_history"]["bytes"]
    assert told <= peak and snap["sites"][0]["where"].endswith("cs336_basics/optimizer.py:78 step")
    assert snap["during"] == ["Optimizer.step#AdamW.step"]  # the record_function open at the peak
    assert found["answer"].startswith("step 3: memory snapshots only (no trace); rank 0's allocated memory peaked at")


class _Marker:
    def __reduce__(self):
        return (Path.touch, (Path(self.path),))

    def __init__(self, path):
        self.path = str(path)


def test_a_hostile_or_cut_snapshot_is_one_line_and_runs_nothing(capsys, tmp_path):
    folder = tmp_path / "step3"
    folder.mkdir()
    marker = tmp_path / "ran"
    victim = folder / "torch_memory_rank0_pid1.pickle"
    victim.write_bytes(pickle.dumps({"segments": [], "x": _Marker(marker)}))
    code, out, err = analyze(capsys, tmp_path)
    assert code == 2 and out == "" and not marker.exists()
    assert len(err.strip().splitlines()) == 1 and str(victim) in err and "data only" in err
    victim.write_bytes(gzip.decompress(SNAPSHOT.read_bytes())[:5000])
    code, _, err = analyze(capsys, tmp_path)
    assert code == 2 and "not a memory snapshot" in err and len(err.strip().splitlines()) == 1
    with victim.open("wb") as f:  # sparse: no disk taken
        f.truncate((1 << 30) + 1)
    code, _, err = analyze(capsys, tmp_path)
    assert code == 2 and "snapshots over 1.1 GB are not read" in err


def test_a_cut_cuda_trace_and_traces_of_two_jobs_are_one_line_each(capsys, tmp_path):
    cut = tmp_path / "cut"
    shutil.copytree(H200, cut)
    victim = cut / "actor_train_step7_rank1.json.gz"
    victim.write_bytes(victim.read_bytes()[:-500])
    code, out, err = analyze(capsys, cut)
    assert code == 2 and out == "" and str(victim) in err and len(err.strip().splitlines()) == 1

    sizes = tmp_path / "sizes"  # a 2-rank job's rank 0 beside a 128-rank job's rank 1
    sizes.mkdir()
    shutil.copy(H200 / "actor_train_step7_rank0.json.gz", sizes)
    shutil.copy(HTA / "sampled_rank-1.json.gz", sizes)
    code, _, err = analyze(capsys, sizes)
    assert code == 2 and "traces of two jobs" in err and "128 ranks" in err and len(err.strip().splitlines()) == 1

    apart = tmp_path / "apart"  # two 2-rank jobs, years apart on the wall clock
    apart.mkdir()
    shutil.copy(H200 / "actor_train_step7_rank0.json.gz", apart)
    shutil.copy(HTA / "df_index_resolver.json.gz", apart)
    code, _, err = analyze(capsys, apart)
    assert code == 2 and "traces of two jobs" in err and " h after " in err


def test_the_page_draws_a_gpu_lane_under_each_ranks_host_lane(capsys, tmp_path):
    page = tmp_path / "step.html"
    code, _, _ = analyze(capsys, H200, "-o", page)
    assert code == 0
    text = page.read_text()
    phases, _ = as_json(capsys, H200)
    lanes = text.split("<div class='lanes' data-phase='update_actor'>")[1].split("</div></div>")[0]
    assert lanes.count("data-lane='gpu'") == 2 and "rank 1 GPU (GPU-bound)" in lanes
    # the compute rectangles of rank 1 cover its GPU's compute time, on the scale of the longest rank
    rank1 = lanes.split("rank 1 GPU (GPU-bound)")[-1]  # its lane's title, then its rectangles
    widths = [float(w) for w in re.findall(r"<rect class='compute' x='[0-9.]+' y='0' width='([0-9.]+)'", rank1)]
    longest = max(r["duration_s"] for r in phases["update_actor"].values())
    drawn = sum(widths) / 1000 * longest
    assert drawn == pytest.approx(phases["update_actor"]["1"]["gpu"]["compute_busy_s"], rel=0.05)


def _same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def test_the_figures_do_not_depend_on_where_the_sweep_cuts_the_events(capsys, monkeypatch):
    """The sweep reads a window's events 65,536 at a time, carrying each union's reach and each
    lane's open piece across the cut; cut every 5 events, every figure stays the same."""
    from verl_rl_insight.commands.traces import sweep

    for traces in (H200, HTA / "df_index_resolver.json.gz", HTA / "sampled_rank-0.json.gz"):
        _, whole = as_json(capsys, traces)
        monkeypatch.setattr(sweep, "CHUNK", 5)
        _, cut = as_json(capsys, traces)
        monkeypatch.undo()
        _same(whole, cut)


def test_the_step_page_shows_each_ranks_gpu_and_the_whole_analysis_in_a_real_browser(capsys, tmp_path, tab):
    """The summary the trainer sends of the H200 step (``compact`` of this very analysis), drawn by
    the explorer's own page in Chromium from a report file: each rank's verdict and GPU share,
    the phase judged by GPU work, and the command of the step's whole analysis."""
    from tests.e2e.test_explorer_page import open_page
    from tests.step_report import step_answer, step_report
    from verl_rl_insight.contract.profile_summary import analyze_command
    from verl_rl_insight.trainer.plugins.profile_summary import compact

    _, found = as_json(capsys, H200)
    step = step_answer(7, compact(found, 7), profile_analyze=analyze_command(str(H200), 7))
    open_page(tab, step_report(tmp_path, step), "step")
    cells = tab.locator("[data-testid=rank-lanes] tr.slowest [data-testid=rank-gpu]").all_inner_texts()
    headings = tab.locator("[data-testid=rank-lanes] h3").all_inner_texts()
    command = tab.inner_text("[data-testid=profile-analyze]")
    assert "GPU-bound · GPU busy 93 %, host 6 % · 800 kernels" in cells
    assert any(h.startswith("update_actor · slowest rank 1 (by its GPU work)") for h in headings), headings
    assert command == f"rl-insight profile analyze {H200} --step 7 -o step7.html"


def _keys(value, found):
    """Every key of the JSON, except those that are data (a collective's name in waiting_by_op)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            found.add(key)
            if key != "waiting_by_op":
                _keys(inner, found)
    elif isinstance(value, list):
        for inner in value:
            _keys(inner, found)
    return found


def test_every_key_of_the_json_is_documented_and_every_documented_key_is_there(capsys, snapshot_step):
    folder, _ = snapshot_step
    for trace in H200.glob("*.json.gz"):
        shutil.copy(trace, folder / "step3" / trace.name.replace("step7", "step3"))
    keys = _keys(as_json(capsys, folder)[1], set())  # the H200 step and a snapshot
    keys = _keys(as_json(capsys, HTA / "df_index_resolver.json.gz")[1], keys)  # [memory] events
    docs = (Path(__file__).parents[2] / "docs" / "profile-analyze.md").read_text()
    section = docs.split("### The JSON (`--json`)")[1].split("\n### ")[0]
    documented = set(re.findall(r"`([a-z_]+)(?:\[\])?`", section)) - {"null", "gpu_user_annotation", "work"}
    assert keys <= documented, keys - documented
    assert documented <= keys, documented - keys


def test_a_rank_whose_extra_time_is_its_host_is_judged_by_host_time_not_gpu_work(capsys):
    """H200 old_log_prob: rank 1's phase is the longer, its GPU work is not (0.9x rank 0's): the
    extra is its GPU waiting on its host, so it is judged, and its ratio taken, by host time."""
    phases, found = as_json(capsys, H200)
    (view,) = [p for p in found["phases"] if p["phase"] == "old_log_prob"]
    mine, theirs = phases["old_log_prob"]["1"]["gpu"], phases["old_log_prob"]["0"]["gpu"]
    assert view["slowest"]["rank"] == "1" and view["held"] and mine["busy_s"] < theirs["busy_s"]
    assert view["judged_by"] == "host time"
    assert view["ratio"] == pytest.approx(mine["host_s"] / theirs["host_s"], rel=1e-9) and view["ratio"] > 2
    code, out, _ = analyze(capsys, H200)
    assert "slowest rank 1: host time 3.29 ms, 3.3x the other ranks' median" in out
