"""The compare view as a W&B user reads it (issue 37), in Debian's chromium driven by playwright,
against the real server (its uvicorn app, a real Prometheus) holding two runs that verl's real
``Tracking`` logged, each started from verl's own Hydra config (a run card each, differing in two
keys): the card diff lists what ``rl-insight runs diff`` lists; a colour per run and a legend of a
row per run; values on hover and one cursor across panels; the log-prob mismatch on its own scale
with verl's 0.005 / 0.01 lines; integer step ticks; a NaN breaks its line; the keys named as the
trainer logged them; and the list's state of each run is ``runs list``'s, across a server restart."""

import json
import urllib.parse

import pytest

from tests.e2e.test_explorer_page import browser as browser
from tests.e2e.test_explorer_page import open_page, require_browser
from tests.e2e.test_explorer_page import tab as tab
from tests.helpers import REPO, require_prometheus, rl_insight, run_python, wait_for, write_server_config

TOKEN = "compare-test-token-4b8d1e"
PROJECT = "cards"  # (tests/server/stores/test_run_card.py's verl_config names it)
FIRST, SECOND = "lr1e-6-n4", "lr3e-6-n8"
STEPS = 12
NAN_STEP = 7
RUN = """
import math, sys
from omegaconf import OmegaConf
from verl.utils.tracking import Tracking
from tests.server.stores.test_run_card import verl_config
from verl_rl_insight.commands.demo.verl_step import step_metrics
experiment, lr, n, nan_step = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
config = verl_config(experiment, lr, n)
tracking = Tracking(project_name={project!r}, experiment_name=experiment, default_backend=["rl_insight"],
                    config=OmegaConf.to_container(config, resolve=True))
for step in range(1, {steps} + 1):
    metrics = step_metrics(step, {steps}, test_freq=4)
    if n == 8:  # the second run learns a little faster: its curves apart from the first's
        for key in ("critic/score/mean", "critic/rewards/mean", "actor/entropy", "val-core/openai/gsm8k/reward/mean@1"):
            if key in metrics:
                metrics[key] = metrics[key] * (1.15 if key != "actor/entropy" else 0.8)
    if step == nan_step:
        metrics["actor/pg_loss"] = float("nan")
    if step % 4 == 0:  # keys whose Prometheus names lose the slashes and the @; the second run's falls by 95 %
        metrics["val-aux/num_turns/max"] = 3.0
        if n == 8:
            metrics["val-aux/math/reward/mean@4"] = 0.6 if step == 4 else 0.03
    tracking.log(metrics, step=step)
tracking.finish()
print("LOGGED")
"""
VALIDATION_KEY = "val-core/openai/gsm8k/reward/mean@1"
FALLING_KEY = "val-aux/math/reward/mean@4"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_browser()
    require_prometheus()
    tmp = tmp_path_factory.mktemp("compare")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}
    started = rl_insight("server", "start", "--detach", "--config", str(path), env=env, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    base = f"http://127.0.0.1:{config['port']}"
    try:
        trainer = {
            "RL_INSIGHT_HOME": env["RL_INSIGHT_HOME"],
            "RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@127.0.0.1:{config['port']}",
        }
        for experiment, lr, n, nan_step in ((FIRST, "1e-6", 4, NAN_STEP), (SECOND, "3e-6", 8, 0)):
            code = RUN.format(project=PROJECT, steps=STEPS)
            logged = run_python(
                f"import sys; sys.argv = ['run', {experiment!r}, {lr!r}, {n}, {nan_step}]\n{code}",
                env=trainer, pythonpath=str(REPO), timeout=300,
            )  # fmt: skip
            assert logged.returncode == 0 and "LOGGED" in logged.stdout, logged.stderr[-3000:]
        yield {"base": base, "env": env, "config": path}
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def page_url(runs, experiment=FIRST, **query):
    return f"{runs['base']}/runs/{PROJECT}/{experiment}" + (f"?{urllib.parse.urlencode(query)}" if query else "")


def with_token(tab, runs):
    """The token as a person gives it: typed into the page's prompt once, kept in the tab."""
    open_page(tab, page_url(runs), "run")
    tab.fill("[data-testid=token-form] input", TOKEN)
    with tab.expect_navigation():
        tab.click("[data-testid=token-form] button")
    tab.wait_for_selector("body[data-ready=run]")


def test_a_wrong_token_in_the_pages_prompt_is_said_to_be_refused(runs, tab):
    open_page(tab, page_url(runs), "run")
    assert not tab.locator("[data-testid=token-refused]").count()  # no token yet: only asked for
    tab.fill("[data-testid=token-form] input", "not-the-token")
    with tab.expect_navigation():
        tab.click("[data-testid=token-form] button")
    tab.wait_for_selector("body[data-ready=run]")
    assert "was refused by the server" in tab.inner_text("[data-testid=token-refused]")
    assert tab.locator("[data-testid=token-form]").count() == 1  # asked again


def test_the_card_diff_on_the_run_page_lists_what_runs_diff_lists(runs, tab):
    diff = rl_insight("runs", "diff", f"{PROJECT}/{FIRST}", f"{PROJECT}/{SECOND}", "--json", env=runs["env"])
    assert diff.returncode == 0, diff.stdout + diff.stderr
    listed = json.loads(diff.stdout)["differences"]
    keys = [row["key"] for row in listed]
    assert "actor_rollout_ref.actor.optim.lr" in keys and "actor_rollout_ref.rollout.n" in keys, keys
    with_token(tab, runs)
    open_page(tab, page_url(runs, compare=SECOND), "run")
    rows = tab.locator(f"[data-testid=config-diff][data-with='{SECOND}'] tbody tr")
    assert [rows.nth(i).get_attribute("data-key") for i in range(rows.count())] == keys
    heading = tab.inner_text("[data-testid=run-card]")
    assert f"config that differs from {SECOND} ({len(keys)} keys)" in heading, heading
    lr = tab.locator("[data-testid=config-diff] tr[data-key='actor_rollout_ref.actor.optim.lr'] td").all_inner_texts()
    assert lr[1:] == ["1e-06", "3e-06"], lr  # as the CLI prints them


def test_two_compared_runs_draw_a_colour_each_with_a_legend_of_a_row_per_run_values_on_hover_one_cursor(
    runs, tab, tmp_path
):
    drawn = open_page(tab, page_url(runs, compare=SECOND, smooth="0.6"), "run")
    legend = tab.locator("[data-testid=legend] .run")
    assert legend.all_inner_texts() == [FIRST, SECOND]  # a row per run, not run x key x raw/smoothed
    for title, panel in drawn["panels"].items():
        by_run = {}
        for run, _key, color in panel["colors"]:
            by_run.setdefault(run, set()).add(color)
        if len(by_run) == 2:
            assert all(len(colors) == 1 for colors in by_run.values()), (title, by_run)  # one colour a run
            assert by_run[FIRST] != by_run[SECOND], (title, by_run)
    score = tab.locator("[data-testid=panel][data-title='Score and reward']")
    assert score.locator(".key-legend .key").count() == len(drawn["panels"]["Score and reward"]["keys"]) <= 6
    box = score.locator("canvas").first.bounding_box()
    tab.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    readout = score.locator("[data-testid=readout]").inner_text()
    at = tab.evaluate("window.RL_INSIGHT_PAGE.cursorSteps()")
    assert len(set(at)) == 1 and at[0] is not None, at  # every panel's cursor on the same step
    assert readout.startswith(f"step {at[0]}") and FIRST in readout and SECOND in readout, readout
    height = tab.evaluate("document.documentElement.scrollHeight")
    tab.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
    assert height < 4000, height  # the page was 5,200 px of legends


def test_the_probs_diff_mean_has_its_own_scale_with_verls_thresholds_and_steps_are_whole(runs, tab):
    drawn = open_page(tab, page_url(runs), "run")
    mismatch = drawn["panels"]["Log-prob mismatch"]
    assert "training/rollout_probs_diff_mean" in mismatch["keys"]
    assert not {"training/rollout_actor_probs_pearson_corr", "training/rollout_probs_diff_valid"} & set(
        mismatch["keys"]
    )
    assert mismatch["keys"] == ["training/rollout_probs_diff_mean"] and mismatch["thresholds"] == [0.005, 0.01]
    assert mismatch["yrange"][1] > 0.01 and mismatch["yrange"][1] < 0.05, mismatch["yrange"]  # not pearson's ~1
    for title, panel in drawn["panels"].items():
        assert panel["xticks"] and all(float(t).is_integer() for t in panel["xticks"]), (title, panel["xticks"])


def test_a_nan_step_breaks_its_line_rather_than_bridging_it(runs, tab):
    open_page(tab, page_url(runs), "run")
    drawn = tab.evaluate("window.RL_INSIGHT_PAGE")
    [title] = [t for t, panel in drawn["panels"].items() if "actor/pg_loss" in panel["keys"]]
    gaps = tab.evaluate("([title, key]) => window.RL_INSIGHT_PAGE.gapsOf(title, key)", [title, "actor/pg_loss"])
    assert gaps == [NAN_STEP], gaps


def test_the_keys_are_named_as_the_trainer_logged_them(runs, tab):
    drawn = open_page(tab, page_url(runs), "run")
    text = tab.inner_text("main")
    assert VALIDATION_KEY in text and "perf/mfu/actor" in text
    assert "openai_gsm8k_reward_mean_1" not in text and "perf/mfu_actor" not in text
    validation = [p for p in drawn["panels"].values() if VALIDATION_KEY in p["keys"]]
    assert validation and drawn["curves"][VALIDATION_KEY] == 3  # test_freq 4: steps 4, 8 and 12


def test_the_report_keeps_the_overlay_says_which_steps_it_holds_and_refuses_an_empty_range(runs, tab, tmp_path):
    report = tmp_path / "run.html"
    made = rl_insight("report", "--project", PROJECT, "--experiment", FIRST, "--compare", SECOND, "--samples",
                      "-o", str(report), env=runs["env"])  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert "no samples: the run kept none" in made.stdout, made.stdout  # the runs kept no samples: said
    drawn = open_page(tab, report.as_uri(), "run")
    assert tab.locator("[data-testid=legend] .run").all_inner_texts() == [FIRST, SECOND]  # the overlay is on
    assert any(len(p["runs"]) == 2 for p in drawn["panels"].values())
    point = tab.evaluate("window.RL_INSIGHT_PAGE.pointAt(0, 3)")  # step 3: no finding there, no page
    tab.mouse.move(point["x"], point["y"])
    tab.mouse.click(point["x"], point["y"])
    tab.wait_for_selector("body[data-ready=step]")
    said = tab.inner_text("[data-testid=no-step-page]")
    assert "holds no page of step 3" in said and str(NAN_STEP) in said and "{" not in said, said
    empty = tmp_path / "empty.html"
    refused = rl_insight("report", "--project", PROJECT, "--experiment", FIRST, "--steps", "100:200",
                         "-o", str(empty), env=runs["env"])  # fmt: skip
    assert refused.returncode == 2 and not empty.exists(), refused.stdout + refused.stderr
    assert f"has no step in --steps 100:200 (its newest step is {STEPS})" in refused.stderr, refused.stderr


def states_in_the_list(tab, runs):
    open_page(tab, runs["base"] + "/", "runs")
    found = {}
    for row in tab.locator("[data-testid=run-row]").all():
        cells = row.locator("td").all_inner_texts()
        points = int(row.locator("canvas.sparkline").get_attribute("data-points"))
        found[row.get_attribute("data-experiment")] = (cells[4], cells[2], points)
    return found


def states_in_runs_list(runs):
    listed = rl_insight("runs", "list", "--json", env=runs["env"])
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return {
        r["experiment_name"]: ("finished" if r["finished"] else "?", str(r["step"])) for r in json.loads(listed.stdout)
    }


def test_the_lists_state_of_each_run_is_runs_lists_across_a_server_restart(runs, tab):
    expected = {FIRST: ("finished", str(STEPS)), SECOND: ("finished", str(STEPS))}
    assert states_in_runs_list(runs) == expected
    before = states_in_the_list(tab, runs)
    assert {e: s[:2] for e, s in before.items()} == expected and all(s[2] > 2 for s in before.values()), before
    stopped = rl_insight("server", "stop", env=runs["env"], timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    started = rl_insight("server", "start", "--detach", "--config", str(runs["config"]), env=runs["env"], timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    wait_for(lambda: states_in_runs_list(runs) == expected, 60, interval=2, what="runs list after the restart")
    after = states_in_the_list(tab, runs)
    assert after == before, (before, after)  # finished stays finished, the sparklines filled


def test_the_keys_keep_their_logged_names_across_a_server_restart_on_the_page_and_in_diagnose(runs, tab):
    stopped = rl_insight("server", "stop", env=runs["env"], timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    started = rl_insight("server", "start", "--detach", "--config", str(runs["config"]), env=runs["env"], timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    drawn = open_page(tab, page_url(runs, SECOND), "run")  # nothing logged since the restart
    text = tab.inner_text("main")
    for key in (VALIDATION_KEY, "perf/mfu/actor", "val-aux/num_turns/max", FALLING_KEY):
        assert key in text, key
    for flat in ("openai_gsm8k_reward_mean_1", "perf/mfu_actor", "num_turns_max", "math_reward_mean_4"):
        assert flat not in text, flat
    assert any(FALLING_KEY in p["keys"] for p in drawn["panels"].values()), drawn["panels"]
    follow = ("--validation-key", FALLING_KEY)  # followed first (else verl's val-core key is)
    found = rl_insight("diagnose", "--project", PROJECT, "--experiment", SECOND, *follow, "--json", env=runs["env"])
    [drop] = [f for f in json.loads(found.stdout)["findings"] if f["detector"] == "validation_drop"]
    assert drop["metric"] == FALLING_KEY, drop
    said = rl_insight("diagnose", "--project", PROJECT, "--experiment", SECOND, *follow, env=runs["env"])
    assert f"{FALLING_KEY}: " in said.stdout and "math_reward_mean_4" not in said.stdout, said.stdout
