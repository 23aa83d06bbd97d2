"""`rl-insight profile analyze` given hostile files, as a helper session attacked it: each is a
clear line and exit 2, or a true answer, in bounded time and memory; never a traceback, a hang,
NaN in the JSON, a pickle that runs, or a control character obeyed by the terminal. Each case is a
file a few bytes or kilobytes long that cost gigabytes or minutes before its fix."""

import gzip
import json
import pickle
import subprocess
import sys
import time

import pytest

EVENT = {"ph": "X", "cat": "kernel", "name": "k", "ts": 10.0, "dur": 5.0, "args": {"correlation": 1}}


def command(folder, *more):
    """The command in a process of its own, as a user runs it: (exit code, stdout, stderr, seconds)."""
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "verl_rl_insight", "profile", "analyze", str(folder), "--jobs", "1", *more],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - t


def trace(folder, *events, raw=None):
    body = (
        raw
        or json.dumps(
            {
                "distributedInfo": {"rank": 0},
                "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "update_actor", "ts": 0.0, "dur": 100.0}]
                + list(events),
            }
        ).encode()
    )
    path = folder / "actor_train_step3_rank0.json.gz"
    path.write_bytes(gzip.compress(body))
    return path


def strict(text):
    """JSON with no NaN or Infinity in it (what a strict parser takes)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_a_trace_nested_100000_deep_is_one_line_not_24_gb(tmp_path):
    nested = b"[" * 100_000 + b"]" * 100_000
    path = trace(tmp_path, raw=b'{"traceEvents": [{"ph": "X", "args": ' + nested + b"}]}")
    assert path.stat().st_size < 1000
    code, out, err, took = command(tmp_path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "nested deeper" in err, err
    assert took < 30


def test_nan_and_inf_stamps_are_no_stamps_and_the_json_stays_strict(tmp_path):
    trace(
        tmp_path,
        {**EVENT, "ts": "nan"},
        {**EVENT, "cat": "cpu_op", "name": "aten::mm", "ts": "-inf"},
        {**EVENT, "ts": 30.0, "dur": "inf"},
        {**EVENT, "ts": 40.0, "dur": 5.0},
        {**EVENT, "ts": 50.0, "args": {"correlation": 1e300}},  # a correlation id past any integer
        {**EVENT, "cat": ["kernel"], "ts": 60.0},  # a category that is not a name
        {"ph": "i", "name": "[memory]", "ts": 45.0, "args": {"Device Type": 1, "Total Allocated": 1e9,
                                                             "Total Reserved": "nan"}},
    )  # fmt: skip
    code, out, err, _ = command(tmp_path, "--json")
    assert code == 0, err
    (phase,) = strict(out)["phases"]
    gpu = phase["ranks"][0]["gpu"]
    assert gpu["kernels"] == 2 and gpu["busy_s"] == pytest.approx(10e-6)  # the two whole kernels, at 40 and 50
    assert gpu["memory"] == {"peak_allocated_bytes": 1e9, "peak_reserved_bytes": 0.0}


def test_distinct_names_of_a_megabyte_are_kept_short(tmp_path):
    events = [{**EVENT, "name": f"{i}" + "k" * 100_000, "ts": 10.0 + i} for i in range(50)]
    events += [{**EVENT, "cat": "cpu_op", "name": f"{i}" + "c" * 100_000, "ts": 10.0 + i} for i in range(50)]
    trace(tmp_path, *events)
    code, out, err, _ = command(tmp_path, "--json")
    assert code == 0, err
    names = [k["name"] for k in strict(out)["phases"][0]["ranks"][0]["gpu"]["top_kernels"]]
    assert names and all(len(n) <= 120 for n in names)


def test_a_control_character_in_a_kernel_name_is_shown_never_obeyed(tmp_path):
    trace(tmp_path, {**EVENT, "name": "\x1b[2J\x1b]0;owned\x07rl-insight: all good\nrank 0"})
    code, out, _, _ = command(tmp_path)
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out
    assert "\nrl-insight: all good" not in out


def snapshot_file(folder, data):
    step = folder / "step3"
    step.mkdir(exist_ok=True)
    path = step / "torch_memory_rank0_pid1.pickle"
    path.write_bytes(data)
    return path


def test_a_23_byte_pickle_asking_for_gigabytes_is_refused_in_bounds(tmp_path):
    bomb = b"\x80\x04}\x94(\x8c\x08segments]u" + b"r" + (2**29 - 1).to_bytes(4, "little") + b"."  # a memo index: 8 GB
    path = snapshot_file(tmp_path, bomb)
    code, out, err, took = command(tmp_path)
    assert code == 2 and out == "" and str(path) in err and "bounds" in err and len(err.strip().splitlines()) == 1
    assert took < 60


def test_a_small_pickle_of_shared_references_is_refused_not_walked_for_minutes(tmp_path):
    block = {"state": "active_allocated", "address": 1, "size": 1}
    path = snapshot_file(tmp_path, pickle.dumps({"segments": [{"blocks": [block] * 20_000}] * 20_000}))
    code, _, err, took = command(tmp_path)
    assert code == 2 and str(path) in err and "blocks" in err and took < 60


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x04}(\x8c\x08segments]u}b.",  # BUILD on a dict
        b"\x80\x04}K\x01a.",  # APPEND to a dict
        b"\x80\x04\x8e" + b"\xff" * 7 + b"\x7f.",  # bytes of 2**63
        pickle.dumps({"segments": [{"blocks": [{"state": "active_allocated", "address": 1, "size": 10**400}]}]}),
    ],
    ids=["build", "append", "huge-bytes", "huge-size"],
)
def test_a_broken_pickle_is_one_line_never_a_traceback(tmp_path, data):
    snapshot_file(tmp_path, data)
    code, _, err, _ = command(tmp_path)
    assert code in (0, 2) and "Traceback" not in err and "unexpected error" not in err, err
    assert code == 0 or len(err.strip().splitlines()) == 1


def test_an_address_allocated_again_without_a_free_is_not_counted_twice(tmp_path):
    history = [{"action": "alloc", "addr": 7, "size": 1, "time_us": i} for i in range(1000)]
    snapshot_file(tmp_path, pickle.dumps({"segments": [], "device_traces": [history]}))
    code, out, err, _ = command(tmp_path, "--json")
    assert code == 0, err
    (found,) = json.loads(out)["snapshots"]
    assert found["peak_allocated_bytes"] == 1.0


def test_an_absurd_rank_in_mstx_or_nvtx_is_one_line(tmp_path):
    mstx = tmp_path / "mstx" / "actor_update" / "x_ascend_pt"
    (mstx / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (mstx / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(json.dumps([{**EVENT, "cat": None}]))
    (mstx / "profiler_info_0.json").write_text('{"rank_id": 1e400}')
    code, _, err, _ = command(tmp_path / "mstx")
    assert code == 2 and "no rank" in err and len(err.strip().splitlines()) == 1
    nvtx = tmp_path / "nvtx"
    nvtx.mkdir()
    rows = [
        {"table": "META_DATA_CAPTURE", "name": "ENVIRONMENT_VARIABLE", "value": "RANK=\u00b2"},
        {"table": "NVTX_EVENTS", "eventType": 59, "text": "update_actor", "start": 0, "end": 10},
    ]
    (nvtx / "worker_process_1.1.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    code, _, err, _ = command(nvtx)
    assert code == 2 and "RANK" in err and len(err.strip().splitlines()) == 1
