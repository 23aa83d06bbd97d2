"""``rl-insight diagnose --file``: a finished run without a server, from verl's ``file`` logger
output or a ``runs export`` CSV: the findings, format and exit codes of the server path; a file
that is neither is one line naming the line and what was expected, exit 2."""

import csv
import json

from tests import health_shapes as shapes
from tests.helpers import rl_insight
from verl_rl_insight.server.health import detectors

GEMMA = "verldata_ppo_gemma2_2b_gsm8k"  # the verl docs' gemma-2-2b PPO baseline


def real_file(name):
    return next(p for p in shapes.real_run_files() if p.stem == name)


def diagnose_file(path, *more):
    result = rl_insight("diagnose", "--file", str(path), *more)
    return result


def test_a_null_where_the_key_had_numbers_is_non_finite(tmp_path):
    """verl's file logger writes with orjson, which writes NaN and Inf as null: a real run with
    one step's pg_loss null is broken at that step."""
    lines = real_file(GEMMA).read_text().splitlines()
    row = json.loads(lines[50])
    row["data"]["actor/pg_loss"] = None
    lines[50] = json.dumps(row)
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = diagnose_file(path)
    assert result.returncode == 1, result.stderr
    assert f"CRITICAL  non_finite  step {row['step']}  actor/pg_loss: actor/pg_loss = nan" in result.stdout
    assert result.stdout.startswith(f"{path} (steps 0-105): ")


def test_a_runs_export_csv_gives_the_same_findings_as_the_jsonl(tmp_path):
    """The CSV `rl-insight runs export` writes (step, then one column per series without the
    prefix, repr() of each value, empty where a step has none) of a run with a collapse injected."""
    base, at = shapes.FAILURES["entropy_collapse"]
    run = shapes.inject(shapes.real_run(base), "entropy_collapse", at)
    steps = detectors.steps_of(run.history)
    columns = sorted(run.history)
    path = tmp_path / "export.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *(c[len(detectors.PREFIX) :] for c in columns)])
        for step, values in steps:
            writer.writerow([step, *("" if c not in values else repr(values[c]) for c in columns)])
    jsonl = tmp_path / "run.jsonl"
    with jsonl.open("w") as f:
        keys = {name: detectors.verl_key(name) for name in columns}
        for step, values in steps:
            f.write(json.dumps({"step": step, "data": {keys[n]: v for n, v in values.items()}}) + "\n")
    from_csv, from_jsonl = diagnose_file(path, "--json"), diagnose_file(jsonl, "--json")
    assert from_csv.returncode == from_jsonl.returncode == 1, from_csv.stderr + from_jsonl.stderr
    found = json.loads(from_csv.stdout)["findings"]
    assert found == json.loads(from_jsonl.stdout)["findings"]
    assert found[0]["detector"] == "entropy_collapse" and found[0]["severity"] == "critical"


def test_a_healthy_real_run_exits_0_and_says_what_it_read():
    result = diagnose_file(real_file("diqiu_gpg_qwen2_7b_gsm8k_math_megatron"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(steps 0-105): no finding" in result.stdout


def test_a_file_that_is_not_a_run_is_one_line_naming_the_line_and_exit_2(tmp_path):
    good = json.dumps({"step": 1, "data": {"actor/pg_loss": 0.1}})
    cases = {
        "wrong-shape.jsonl": (f"{good}\n{good}\n" + '{"step": "3", "data": {}}\n', ':3: no whole "step"'),
        "not-json.jsonl": (f"{good}\n{{oops\n", ":2: not JSON; expected a verl file-logger line"),
        "notes.txt": ("my notes\n", ": no step lines (step:N - key:value - ...); expected verl's file logger JSONL"),
        "bad.csv": ("step,actor_pg_loss\n1,0.5\ntwo,0.4\n", ":3: expected a whole step and numbers"),
        "short.csv": ("step,actor_pg_loss\n1,0.5,7\n", ":2: 3 fields, the header has 2"),
        "empty.jsonl": ("", ": not a run file; expected verl's file logger JSONL"),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        result = diagnose_file(path)
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith(f"rl-insight: {path}{expected}"), (name, line)
    missing = diagnose_file(tmp_path / "nowhere.jsonl")
    assert missing.returncode == 2 and "No such file" in missing.stderr


def test_a_runs_export_csv_s_step_times_find_a_stall_where_the_run_logs_no_step_time(tmp_path):
    """The export carries each step's own time (training_step_time_seconds): a run that logs no
    timing_s/step (the verl docs' notebook PPO run) with one step that took an hour is a stall, a
    warning (issue 38: the step completed and the run carried on; critical is a step that never comes)."""
    run = shapes.real_run("verl_notebook_ppo_qwen05b_gsm8k")
    path = tmp_path / "export.csv"
    steps = detectors.steps_of(run.history)
    columns = sorted(run.history)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *(c[len(detectors.PREFIX) :] for c in columns), "training_step_time_seconds"])
        at = 1_700_000_000.0
        for step, values in steps:
            at += 3600 if step == 40 else 60
            writer.writerow([step, *("" if c not in values else repr(values[c]) for c in columns), repr(at)])
    result = diagnose_file(path, "--json")
    [stall] = [f for f in json.loads(result.stdout)["findings"] if f["detector"] == "stall"]
    assert (stall["first_step"], stall["severity"], round(stall["value"])) == (40, "warning", 3600)
    assert result.returncode == 1
