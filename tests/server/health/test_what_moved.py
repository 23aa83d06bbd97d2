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
    from verl_rl_insight.server.history.histories import Step

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
    sources.histories.fill(run, [Step(step, float(step), metrics) for step, metrics in sorted(by_step.items())])
    (slow,) = moved_at(sources, run, 605)
    assert (slow["series"], slow["first_step"], slow["last_step"]) == ("timing_s_step", 600, 611)
    assert slow["moved_with"][0]["series"] == "response_length_mean"
    assert moved_at(sources, run, 585) == []  # a step at the run's level (580 was a test step: its own range)


def test_engine_counters_and_histograms_are_one_value_a_step():
    """A counter is its increase over the step (a reset: its value since), a histogram its mean over
    the step (its _sum's increase over its _count's), a gauge its samples' mean; the first step has
    no window (its start is unknown). Series that differ in a label beyond the run's stay apart."""
    from verl_rl_insight.server.health import side_series

    times = [(1, 100.0), (2, 110.0), (3, 120.0), (4, 130.0)]
    labels = {"project": "p", "experiment_name": "e", "replica": "0", "model_name": "m"}
    samples = [
        ({**labels, "__name__": "vllm:num_preemptions_total"}, [(95, 1), (105, 1), (115, 4), (125, 2), (129, 3)]),
        ({**labels, "__name__": "vllm:request_queue_time_seconds_sum"}, [(99, 0), (109, 2), (119, 2), (129, 12)]),
        ({**labels, "__name__": "vllm:request_queue_time_seconds_count"}, [(99, 0), (109, 4), (119, 4), (129, 8)]),
        ({**labels, "__name__": "vllm:request_queue_time_seconds_bucket", "le": "1"}, [(99, 0), (109, 4)]),
        ({**labels, "__name__": "vllm:num_requests_waiting"}, [(105, 1), (108, 3), (115, 7)]),
        ({**labels, "__name__": "vllm:num_requests_waiting", "engine": "1"}, [(105, 5), (115, 9)]),
        ({**labels, "__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}, [(105, 1), (115, 2)]),
    ]
    asked = []

    def query(promql):
        asked.append(promql)
        return samples

    found = side_series.read(query, "p", "e", times)
    assert found == {
        "vllm:num_preemptions_total{replica=0}": [(2, 0.0), (3, 3.0), (4, 3.0)],
        "vllm:request_queue_time_seconds_mean{replica=0}": [(2, 0.5), (4, 2.5)],
        "vllm:num_requests_waiting{replica=0}": [(2, 2.0), (3, 7.0)],
        "vllm:num_requests_waiting{engine=1,replica=0}": [(2, 5.0), (3, 9.0)],  # a second engine: apart
    }
    assert len(asked) == 1 and "|vllm:num_requests_waiting|" in asked[0] and 'project="p"' in asked[0]


def test_a_slow_range_names_the_steps_in_it_that_were_profiled(capsys):
    """``diagnose`` of a server's run gives, under a slow range, the answer of each profiled step
    in it and the command of its whole analysis (``profiled`` reads them from the server: tested
    in test_profile_summary.py); a profiled step outside the range is not named."""
    import argparse

    from verl_rl_insight.commands.diagnose import Profiled, report
    from verl_rl_insight.commands.run_file import read_run

    path = RUNS / "jianghoucheng_opd_grpo_qwen3_4b_dapo_math_collapse.jsonl"
    history = read_run(path)
    command = "rl-insight profile analyze /p --step 253 -o step253.html"
    profiles = {
        253: Profiled(253, "step 253: ref held the step on rank 3: ...", command),
        40: Profiled(40, "step 40: no rank held the others", None),
    }
    args = argparse.Namespace(json=False, steps=None)
    report(args, "p/e", {"project": "p"}, (1, 300), [], history, profiles)
    out = capsys.readouterr().out
    below = out.split("timing_s_step step 253")[1]
    assert "    profiled: step 253: ref held the step on rank 3: ..." in below
    assert "      the whole analysis: rl-insight profile analyze /p --step 253 -o step253.html" in below
    assert "step 40:" not in out
    report(argparse.Namespace(json=True, steps=None), "p/e", {"project": "p"}, (1, 300), [], history, profiles)
    (slow,) = [s for s in json.loads(capsys.readouterr().out)["slow_steps"] if s["first_step"] == 253]
    assert slow["profiled"] == [profiles[253]._asdict()]
