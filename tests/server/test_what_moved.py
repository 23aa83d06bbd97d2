"""What moved with a slow step (`rl-insight diagnose`): on the public verl runs in
tests/data/real_runs, as verl's file logger wrote them."""

import json

from tests.helpers import REPO
from verl_rl_insight.commands import main

RUNS = REPO / "tests" / "data" / "real_runs"
PPO = RUNS / "yushengsu_amd_ppo_deepseek7b_gsm8k.jsonl"  # timing_s/* beside lengths, throughput, memory


def diagnose_json(capsys, path, *extra):
    main(["diagnose", "--file", str(path), "--json", *extra])
    return json.loads(capsys.readouterr().out)


def test_step_time_that_jumps_with_the_response_length_ranks_the_length_first(capsys, tmp_path):
    """Steps 600-611 of a real run: the step time and response_length/mean rise 60 % together,
    nothing else is touched."""
    rows = [json.loads(line) for line in PPO.read_text().splitlines()]
    jumped = range(600, 612)
    for row in rows:
        if row["step"] in jumped:
            row["data"]["timing_s/step"] *= 1.6
            row["data"]["response_length/mean"] *= 1.6
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps(row) + "\n" for row in rows))
    found = diagnose_json(capsys, run, "--steps", "590:620")
    (slow,) = [s for s in found["slow_steps"] if s["first_step"] <= 605 <= s["last_step"]]
    assert slow["series"] == "timing_s_step" and (slow["first_step"], slow["last_step"]) == (600, 611)
    first = slow["moved_with"][0]
    assert first["series"] == "response_length_mean" and first["direction"] == "up"
    assert first["association"] > 0.7
    as_it_was = diagnose_json(capsys, PPO, "--steps", "590:620")["slow_steps"]
    assert all(s["first_step"] == s["last_step"] for s in as_it_was)  # its test steps (every 10th) alone


def test_a_checkpoint_step_is_explained_by_the_checkpoint_on_a_real_run(capsys):
    """bihan's PPO run saves a checkpoint every 40 steps: its step time triples there."""
    found = diagnose_json(capsys, RUNS / "bihan_dstack_ppo_qwen25_7b_gsm8k_mi300x_resumed.jsonl", "--steps", "400:400")
    (slow,) = found["slow_steps"]
    top = slow["moved_with"][0]
    assert top["series"] == "timing_s_save_checkpoint" and top["share_of_rise"] > 0.5


def test_the_text_says_what_moved(capsys):
    main(["diagnose", "--file", str(RUNS / "jianghoucheng_opd_grpo_qwen3_4b_dapo_math_collapse.jsonl")])
    out = capsys.readouterr().out
    assert "timing_s_step step 253: 35.8 -> 42.9" in out
    assert "timing_s_ref" in out.split("timing_s_step step 253")[1].splitlines()[1]


def test_the_step_page_says_what_moved_with_the_step(tmp_path):
    """The explorer's step answer (``moved_with``) over the run's history as the hub holds it: the
    same real run with the same jump, fed to the explorer's histories."""
    from verl_rl_insight.commands.run_file import read_run
    from verl_rl_insight.server.explorer.slow import moved_at
    from verl_rl_insight.server.explorer.sources import Sources

    rows = [json.loads(line) for line in PPO.read_text().splitlines()]
    for row in rows:
        if 600 <= row["step"] <= 611:
            row["data"]["timing_s/step"] *= 1.6
            row["data"]["response_length/mean"] *= 1.6
    run_file = tmp_path / "run.jsonl"
    run_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    by_step: dict[int, dict[str, float]] = {}
    for name, points in read_run(run_file).items():
        for step, value in points:
            by_step.setdefault(step, {})[name] = value
    sources = Sources()
    run = ("p", "e")
    sources.histories.fill(run, [(step, float(step), metrics) for step, metrics in sorted(by_step.items())])
    (slow,) = moved_at(sources, run, 605)
    assert (slow["series"], slow["first_step"], slow["last_step"]) == ("timing_s_step", 600, 611)
    assert slow["moved_with"][0]["series"] == "response_length_mean"
    assert moved_at(sources, run, 585) == []  # a step at the run's level (580 was a test step: its own range)
