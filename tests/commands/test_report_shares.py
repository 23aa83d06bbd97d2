"""``rl-insight report`` (a file meant for a pull request or a chat) shares the run and the runs it
is compared with, nothing more: no other run's name, no run card unless ``--card`` and then only
the keys where the runs differ; ``-o`` never writes through a link another user planted; the file
carries a Content-Security-Policy that lets only its own inline scripts and styles run, and the
page still draws under it in a real Chromium. Against the real server (in this process) on loopback."""

import json
import os
import stat
import time
from html.parser import HTMLParser

import pytest

from tests.helpers import http, push, rl_insight

TOKEN = "report-t0ken-9f8e"
CARD_ONLY = "/data/only-in-the-card-5b1c"  # a value both cards hold: never in the report
CHROMIUM = "/usr/bin/chromium"


class Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.metas, self._in = [], [], False

    def handle_starttag(self, tag, attrs):
        self._in = tag == "script"
        if tag == "meta":
            self.metas.append((dict(attrs), len(self.scripts)))

    def handle_data(self, data):
        if self._in:
            self.scripts.append(data)
            self._in = False


def report_data(path):
    parser = Scripts()
    parser.feed(path.read_text())
    [data] = [s for s in parser.scripts if s.startswith("window.RL_INSIGHT_REPORT = ")]
    return json.loads(data.removeprefix("window.RL_INSIGHT_REPORT = ").removesuffix(";")), parser


@pytest.fixture
def runs(hub_server):
    """Four runs: p/a and p/b (to be reported), p/private-run-name and q/other-project-run (not)."""
    server = hub_server(token=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for project, experiment, lr in (("p", "a", 1e-6), ("p", "b", 2e-6), ("p", "private-run-name", 3e-6)):
        card = {"project": project, "experiment_name": experiment, "config": {"lr": lr, "n": 4, "data": CARD_ONLY}}
        assert http("PUT", server.url + "/api/v1/runs/card", json.dumps(card).encode(), headers=auth)[0] == 200
    for project, experiment in (("p", "a"), ("p", "b"), ("p", "private-run-name"), ("q", "other-project-run")):
        for step in (1, 2, 3):
            batch = {"project": project, "experiment_name": experiment, "step": step, "time": time.time()}
            batch["metrics"] = {"rl_insight_monitor_actor_pg_loss": 0.1 * step}
            assert push(server.url, {"batches": [batch]}, token=TOKEN)[0] == 200
    return {"RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@127.0.0.1:{server.port}", "RL_INSIGHT_TOKEN": None}


def test_a_report_names_only_the_compared_runs_and_holds_no_card_without_card(runs, tmp_path):
    out = tmp_path / "run.html"
    result = rl_insight("report", "--project", "p", "--experiment", "a", "--compare", "b", "-o", str(out), env=runs)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    for absent in ("private-run-name", "other-project-run", CARD_ONLY, TOKEN):
        assert absent not in text, absent
    assert "no card" in result.stdout
    data, _ = report_data(out)
    assert [(r["project"], r["experiment"]) for r in data["runs"]["runs"]] in (
        [("p", "a"), ("p", "b")],
        [("p", "b"), ("p", "a")],
    )
    assert data["run"]["card"] is None and data["run"]["others"] == ["b"]
    assert data["compare"]["b"]["run"]["card"] is None and data["compare"]["b"]["run"]["others"] == ["a"]


def test_with_card_the_report_holds_only_the_keys_where_the_runs_differ(runs, tmp_path):
    out = tmp_path / "card.html"
    wanted = ("--project", "p", "--experiment", "a", "--compare", "b", "--card", "-o", str(out))
    result = rl_insight("report", *wanted, env=runs)
    assert result.returncode == 0, result.stderr
    assert "1 card keys" in result.stdout
    data, _ = report_data(out)
    assert data["run"]["card"] == {"config": {"lr": 1e-6}}
    assert data["compare"]["b"]["run"]["card"] == {"config": {"lr": 2e-6}}
    assert CARD_ONLY not in out.read_text()
    refused = rl_insight("report", "--project", "p", "--experiment", "a", "--card", "-o", str(out), env=runs)
    assert refused.returncode != 0 and "needs --compare" in refused.stderr


def test_report_o_replaces_a_planted_link_and_leaves_its_target_untouched(runs, tmp_path):
    """Another user planted ``run.html -> ~/.bashrc``: the report takes the link's place, the victim
    file keeps its content and its mode."""
    victim = tmp_path / "bashrc"
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    victim.chmod(0o644)
    out = tmp_path / "run.html"
    out.symlink_to(victim)
    result = rl_insight("report", "--project", "p", "--experiment", "a", "-o", str(out), env=runs)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not out.is_symlink() and out.read_text().startswith("<!doctype html>")
    assert stat.S_IMODE(os.lstat(out).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bashrc", "run.html"]  # no temporary left behind


def test_the_report_has_a_csp_meta_tag_before_any_script_and_draws_under_it(runs, tmp_path):
    out = tmp_path / "csp.html"
    result = rl_insight("report", "--project", "p", "--experiment", "a", "--compare", "b", "-o", str(out), env=runs)
    assert result.returncode == 0, result.stderr
    _, parser = report_data(out)
    [(meta, scripts_before)] = [(m, n) for m, n in parser.metas if m.get("http-equiv") == "Content-Security-Policy"]
    policy = meta["content"]
    assert scripts_before == 0 and "default-src 'none'" in policy and "connect-src 'none'" in policy
    assert "unsafe-inline" not in policy and policy.count("'sha256-") >= len(parser.scripts)
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no {CHROMIUM}: install the Debian package `chromium` (.ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            errors = []
            page.on("console", lambda message: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(out.as_uri())
            page.wait_for_selector("body[data-ready=run]", timeout=30_000)
            assert "a" in page.inner_text("h1") and not errors, errors
            # a script the policy does not name is refused: the page's own check of the policy
            ran = page.evaluate(
                "() => { const s = document.createElement('script'); s.textContent = 'window.EVIL = 1';"
                " document.body.append(s); return window.EVIL === 1; }"
            )
            assert ran is False
        finally:
            browser.close()
