"""The run files ``rl-insight runs import`` (and ``diagnose --file``) reads, each told by its content:
a real run's wandb console capture (``files/output.log``), its wandb history export (JSON lines and
CSV, from the run's own ``.wandb`` file: benchmarks/wandb_history_export.py) and verl's file-logger
JSONL twin of the same run (converted from that ``.wandb`` file, independently of these readers)
hold the same values at the same steps; what the console cut at 4096 characters is left out, never
made up; bad files are one line naming the file and the line."""

import json
import math
import os
from pathlib import Path

import pytest

from verl_rl_insight.commands.run_formats import MAX_FILE_BYTES, RunFileError, read_file

REAL = Path(__file__).resolve().parents[1] / "data" / "real_runs"
TWIN = REAL / "jianghoucheng_opd_qwen25_3b_teacherkl0001.jsonl"
WANDB = REAL / "wandb_f6sves9c"


def twin_values():
    """The twin as verl's file logger wrote it, read with json alone: (step, key) -> the first value."""
    values = {}
    for line in TWIN.read_text().splitlines():
        row = json.loads(line)
        for key, value in row["data"].items():
            values.setdefault((row["step"], key), value)
    return values


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("output.log", "wandb-console"), ("history.jsonl", "wandb-history-jsonl"), ("history.csv", "wandb-history-csv")],
)
def test_a_wandb_run_s_console_log_and_history_export_hold_its_jsonl_twin_s_values(name, fmt):
    run = read_file(WANDB / name)
    assert run.format == fmt
    twin = twin_values()
    held = {(step, key): value for step, values in run.steps.items() for key, value in values.items()}
    shared = [at for at in held if at in twin]
    assert len(shared) >= 3761  # the console's overlap with the wandb file (tests/data/real_runs/README.md)
    assert [at for at in shared if held[at] != twin[at]] == []
    # the console printed step 51, which the committed .wandb file (cut short while the run went on) lacks
    assert {step for step, _ in set(held) - set(twin)} <= {51}
    if fmt == "wandb-console":
        assert run.times is None and run.skipped == 6  # six lines cut at 4096 characters: their last item
    else:
        assert run.times is not None and len(run.times) == len(run.steps) == 51
        times = [run.times[s] for s in sorted(run.times)]
        assert all(b > a for a, b in zip(times, times[1:])) and times[0] == pytest.approx(1764503094.28, abs=0.01)
        assert set(held) == set(twin)  # the wandb file's own records: every value, none more


def test_a_line_wandb_cut_at_4096_characters_loses_its_last_item_not_half_a_number(tmp_path):
    head = "step:3 - critic/score/mean:np.float64(0.25) - actor/entropy:0.5"
    filler = " - ".join(f"k{i:04d}/x:{i}.123456789" for i in range(400))
    line = f"(TaskRunner pid=123) {head} - {filler}"
    cut = line[:4096]
    assert cut[-1].isdigit() and line[4096].isdigit()  # the capture cut inside a number
    (tmp_path / "files").mkdir()
    capture, console = tmp_path / "files" / "output.log", tmp_path / "console.log"
    capture.write_text(f"starting\n{cut}\n")
    console.write_text(f"{cut}\n")
    kept = read_file(capture).steps[3]
    last = cut.rsplit(" - ", 1)[1].split(":")[0]
    assert last not in kept and kept["critic/score/mean"] == 0.25 and kept["actor/entropy"] == 0.5
    assert last in read_file(console).steps[3]  # a console log that is not wandb's capture was not cut: kept


def test_a_console_log_prints_nan_inf_numpy_scalars_and_a_ray_prefix_as_verl_does(tmp_path):
    log = tmp_path / "verl.log"
    log.write_text(
        "\x1b[36m(TaskRunner pid=9)\x1b[0m step:1 - actor/pg_loss:nan - actor/grad_norm:inf - "
        "critic/score/mean:np.float64(0.5) - training/global_step:1 - note:hello\n"
        "(TaskRunner pid=9) step:2 - actor/pg_loss:0.1 - critic/score/mean:np.float32(0.75)\n"
    )
    run = read_file(log)
    assert run.format == "verl-console" and run.skipped == 1  # "hello" is no number
    assert math.isnan(run.steps[1]["actor/pg_loss"]) and run.steps[1]["actor/grad_norm"] == math.inf
    assert run.steps[1]["critic/score/mean"] == 0.5 and run.steps[2]["critic/score/mean"] == 0.75


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("two-runs.log", "step:1 - a:1\nstep:2 - a:2\nstep:1 - a:3\n", ":3: step 1 again after step 2"),
        ("no-step.jsonl", '{"data": {"a": 1}}\n', ':1: no whole "step"'),
        ("history.jsonl", '{"_step": "x", "a": 1}\n', ':1: no whole "_step"'),
        ("notes.md", "# my notes\n", ": not a run file"),
        ("nothing.log", "loading model\ndone\n", ": no step lines"),
        ("strings.jsonl", '{"step": 1, "data": {"a": "x"}}\n', ": no step with a number in it"),
        ("wide.csv", "_step,a\n1,2,3\n", ":2: 3 fields, the header has 2"),
    ],
)
def test_a_file_that_is_not_one_run_is_one_line_naming_it(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RunFileError) as raised:
        read_file(path)
    assert str(raised.value).startswith(f"{path}{said}") and "\n" not in str(raised.value), str(raised.value)


def test_a_file_over_256_mib_is_refused_before_a_byte_of_it_is_read(tmp_path):
    big = tmp_path / "huge.jsonl"
    with big.open("wb") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse: a read of it would take seconds and the memory
    os.chmod(big, 0)  # unreadable: the refusal comes from its size alone
    with pytest.raises(RunFileError, match=f"1024 MiB, over the limit of {MAX_FILE_BYTES >> 20} MiB"):
        read_file(big)


def test_a_binary_file_is_not_text(tmp_path):
    png = tmp_path / "curve.log"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(RunFileError, match="not UTF-8 text"):
        read_file(png)
