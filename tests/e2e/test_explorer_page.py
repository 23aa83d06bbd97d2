"""The run explorer (issue 33) in a real browser: Debian's chromium, headless, driven by playwright,
against the real server (its own uvicorn app, a real Prometheus) holding the demo's SIMULATED run
(verl's real run_ppo, the real patches, the real push and span paths). Every page checks that the
browser's console has no error and that no request leaves loopback."""

import io
import json
import os
import re
import socket
import statistics
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers import REPO, http, require_prometheus, rl_insight, run_python, wait_for, write_server_config

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)

CHROMIUM = "/usr/bin/chromium"
TOKEN = "explorer-test-token-7f3a9c2e"
PROJECT = "rl-insight-demo"
EXPERIMENT = "explorer-test"
STEPS = 8
DOCS = REPO / "docs"
NAN_EXPERIMENT = "explorer-nan-loss"
NAN_RUN = f"""
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics  # what verl's trainer logs at a step
tracking = Tracking({PROJECT!r}, {NAN_EXPERIMENT!r}, default_backend=["rl_insight"])
for step in range(1, 6):
    tracking.log(step_metrics(step, 8), step=step)
tracking.log({{**step_metrics(6, 8), "actor/pg_loss": float("nan")}}, step=6)
for step in range(7, 9):
    tracking.log(step_metrics(step, 8), step=step)
tracking.finish()
print("LOGGED")
"""


def require_browser() -> None:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no {CHROMIUM}: install the Debian package `chromium` (.ci/run does)")
    pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: pip install -e '.[test]'")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    require_browser()
    require_prometheus()
    tmp = tmp_path_factory.mktemp("explorer")
    path, config = write_server_config(
        tmp, token=TOKEN, services={"tempo": {"enabled": False}, "grafana": {"enabled": False}}
    )
    env = {"VERL_RL_INSIGHT_CONFIG": None, "RL_INSIGHT_HOME": str(tmp / "home")}
    try:  # the stack is stopped also when the demo fails or runs past its time
        result = rl_insight(
            "demo", "--steps", str(STEPS), "--step-seconds", "1", "--config", str(path), "--experiment", EXPERIMENT,
            env=env, timeout=600,
        )  # fmt: skip
        base = f"http://127.0.0.1:{config['port']}"
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # a second run of the project, through verl's real Tracking: a NaN loss at step 6 (a finding)
        home = {
            "RL_INSIGHT_HOME": env["RL_INSIGHT_HOME"],
            "RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@{base[7:]}",
        }
        logged = run_python(NAN_RUN, env=home)
        assert logged.returncode == 0 and "LOGGED" in logged.stdout, logged.stderr[-2000:]
        yield {"out": result.stdout, "base": base, "env": env, "tmp": tmp}
    finally:
        rl_insight("server", "stop", env=env, timeout=60)


def api(demo, name, token=None, experiment=EXPERIMENT, **params):
    query = urllib.parse.urlencode({"project": PROJECT, "experiment_name": experiment, **params})
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return http("GET", f"{demo['base']}/api/v1/explorer/{name}?{query}", headers=headers)


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


def loopback(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("data", "about", "blob", "file"):
        return True
    return parts.hostname in ("127.0.0.1", "localhost", "::1")


@pytest.fixture
def tab(browser):
    """A fresh tab (its own sessionStorage); after the test, its console held no error and every
    request it made stayed on loopback (one that would not is refused and named)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    errors, outside = [], []
    context.route(lambda url: not loopback(url), lambda route: (outside.append(route.request.url), route.abort()))
    page = context.new_page()
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: loopback(request.url) or outside.append(request.url))
    yield page
    context.close()
    assert not errors, errors
    assert not outside, outside


def open_page(page, url, view):
    page.goto(url)
    page.wait_for_selector(f"body[data-ready={view}]", timeout=30_000)
    assert not page.locator("[data-testid=error]").count(), page.inner_text("main")
    return page.evaluate("window.RL_INSIGHT_PAGE")


def run_url(demo):
    """The run page's URL as the demo prints it: the first place it names to look."""
    lines = demo["out"].split("Where to look:", 1)[1].strip().splitlines()
    name, url = lines[0].split()
    assert name == "explorer", lines[:3]
    assert url == f"{demo['base']}/runs/{PROJECT}/{EXPERIMENT}"
    return url


def test_the_runs_list_shows_the_demo_run_with_its_step(demo, tab):
    open_page(tab, demo["base"] + "/", "runs")
    row = tab.locator(f"[data-testid=run-row][data-experiment='{EXPERIMENT}']")
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == PROJECT and cells[1] == EXPERIMENT and cells[2] == str(STEPS), cells
    tab.fill("input[aria-label=name]", "no-such-run")
    assert tab.locator("[data-testid=run-row]").count() == 0
    assert "q=no-such-run" in tab.url  # the filter is in the URL a person pastes


def test_the_run_page_draws_each_key_curve_with_a_point_per_step(demo, tab):
    status, body = api(demo, "run")
    assert status == 200, body
    run = json.loads(body)
    drawn = open_page(tab, run_url(demo), "run")
    keys = [k for panel in run["panels"] for k in panel["keys"]]
    assert "critic/score/mean" in keys and "actor/entropy" in keys
    for key in keys:
        if not key.startswith("val-"):  # validation runs on its own steps
            assert drawn["curves"].get(key) == STEPS, (key, drawn["curves"].get(key))
    assert len(tab.locator("[data-testid=panel] canvas").all()) >= len(run["panels"])


def test_a_finding_is_drawn_as_a_band_on_its_curve_where_diagnose_puts_it(demo, tab):
    def diagnosed():
        result = rl_insight("diagnose", "--project", PROJECT, "--experiment", NAN_EXPERIMENT, "--json", env=demo["env"])
        return result.returncode == 1 and json.loads(result.stdout)["findings"]

    findings = wait_for(diagnosed, 60, interval=2, what="diagnose's finding of the NaN loss")
    assert any(f["detector"] == "non_finite" and f["first_step"] == 6 for f in findings), findings
    drawn = open_page(tab, f"{demo['base']}/runs/{PROJECT}/{NAN_EXPERIMENT}?compare={EXPERIMENT}", "run")
    bands = {(b["detector"], b["first_step"], b["last_step"]): b for b in drawn["bands"]}
    for finding in findings:
        band = bands[(finding["detector"], finding["first_step"], finding["last_step"])]
        assert finding["metric"] in ("", band["key"]), (finding, band)  # on its curve
    assert len(tab.locator("[data-testid=finding]").all()) == len(findings)
    assert drawn["curves"]["actor/pg_loss"] == STEPS - 1  # the NaN is not a point


def test_clicking_a_point_of_a_curve_opens_that_step(demo, tab):
    open_page(tab, run_url(demo), "run")
    point = tab.evaluate("window.RL_INSIGHT_PAGE.pointAt(0, 5)")
    tab.mouse.move(point["x"], point["y"])
    tab.mouse.click(point["x"], point["y"])
    tab.wait_for_url(re.compile(r"/steps/5$"))
    assert tab.url == f"{demo['base']}/runs/{PROJECT}/{EXPERIMENT}/steps/5"
    tab.wait_for_selector("body[data-ready=step]")


def test_the_step_page_shows_every_lane_with_its_generate_calls_and_the_slowest_replica_timeline_summary_names(
    demo, tab
):
    summary = rl_insight(
        "timeline", "summary", "--project", PROJECT, "--experiment", EXPERIMENT, "--steps", "4", "--json",
        env=demo["env"],
    )  # fmt: skip
    assert summary.returncode == 0, summary.stdout + summary.stderr
    [row] = json.loads(summary.stdout)["steps"]
    status, body = api(demo, "step", step=4)
    assert status == 200, body
    lanes = json.loads(body)["lanes"]
    drawn = open_page(tab, f"{run_url(demo)}/steps/4", "step")["step"]
    assert [lane["lane"] for lane in drawn["lanes"]] == [lane["lane"] for lane in lanes]
    replicas = [lane for lane in drawn["lanes"] if lane["kind"] == "replica"]
    assert {lane["lane"].split(" ")[0] for lane in replicas} >= {"replica_0", "replica_1"}, replicas
    for lane, given in zip(drawn["lanes"], lanes, strict=True):
        assert lane["spans"] == len(given["spans"])
        shown = tab.locator(f"[data-testid=swimlane] g[data-lane='{lane['lane']}'] rect.span")
        assert shown.count() == len(given["spans"]), lane
    assert all(lane["generate"] > 0 for lane in replicas), replicas
    assert drawn["slowest"] == row["slowest_replica"]
    assert row["slowest_replica"] in tab.inner_text("[data-testid=slowest]")
    profile = tab.inner_text("[data-testid=profile]")  # the demo run has finished: no coming step is offered
    assert profile == "The run has finished: it has no coming step to profile.", profile
    legend = tab.locator("[data-testid=phase-legend] .phase")  # every phase named, the shortest bars' too
    assert legend.count() == len({span for lane in lanes for span in (s["name"] for s in lane["spans"])})
    assert "SW Power Cap" in tab.inner_text("[data-testid=hardware]")


def test_samples_need_the_token_which_the_page_asks_for_once_and_sends_as_a_header(demo, tab):
    status, _ = api(demo, "samples", step=4)
    assert status == 401
    sent = []
    tab.on("request", lambda request: sent.append((request.url, request.headers.get("authorization"))))
    open_page(tab, f"{run_url(demo)}/steps/4", "step")
    tab.wait_for_selector("body[data-samples]")
    assert tab.locator("[data-testid=token-form]").count() == 1
    assert tab.locator("[data-testid=sample]").count() == 0 and TOKEN not in tab.content()
    tab.fill("[data-testid=token-form] input", TOKEN)
    with tab.expect_navigation():
        tab.click("[data-testid=token-form] button")
    tab.wait_for_selector("body[data-samples]")
    assert tab.locator("[data-testid=sample]").count() > 0
    # a rollout picked for its log-prob mismatch shows that mismatch (a number), as `rl-insight samples` does
    picked = tab.locator("[data-testid=sample][data-kind=mismatch] [data-testid=mismatch]").all_inner_texts()
    assert picked and all(float(text) >= 0 for text in picked), picked
    assert api(demo, "samples", token=TOKEN, step=4)[0] == 200
    assert all(TOKEN not in url for url, _ in sent), "the token went into a URL"
    assert any(url.split("?")[0].endswith("/samples") and auth == f"Bearer {TOKEN}" for url, auth in sent)
    log = Path(demo["tmp"] / "data" / "logs")
    assert not any(TOKEN in p.read_text(errors="replace") for p in log.glob("*") if p.is_file())


def test_the_pages_are_served_with_a_strict_policy_and_the_static_folder_keeps_its_files(demo):
    # a name with a slash in it is one escaped segment of its page's path (the page's links encode it)
    slashed = (f"/runs/{PROJECT}/qwen%2Fgrpo", "/runs/team%2Fa/qwen%2Fgrpo/steps/3")
    for path in ("/", "/runs", f"/runs/{PROJECT}/{EXPERIMENT}", f"/runs/{PROJECT}/{EXPERIMENT}/steps/3", *slashed):
        status, body = http("GET", demo["base"] + path)
        assert status == 200 and b"/static/explorer/explorer.js" in body and b"<script>" not in body, path
    for name, kind in (("uPlot.iife.min.js", "text/javascript"), ("explorer.css", "text/css")):
        with socket.create_connection(("127.0.0.1", int(demo["base"].rsplit(":", 1)[1])), 10) as sock:
            sock.sendall(f"GET /static/explorer/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            head = _read_all(sock).split(b"\r\n\r\n")[0].decode().lower()
        assert " 200 " in head.splitlines()[0] and f"content-type: {kind}" in head, head
        assert "connect-src 'self'" in head and "script-src 'self';" in head and "unsafe-inline" not in head
    for sneaky in ("../runs.py", "..%2fruns.py", "%2e%2e/__init__.py", ".hidden.js", "LICENSE.uPlot/../x.js"):
        with socket.create_connection(("127.0.0.1", int(demo["base"].rsplit(":", 1)[1])), 10) as sock:
            sock.sendall(f"GET /static/explorer/{sneaky} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = _read_all(sock)
        assert answer.split(b"\r\n")[0].split()[1] == b"404" and b"import " not in answer, sneaky


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_the_report_file_opened_from_disk_with_the_network_off_draws_the_same_curves(demo, tab, tmp_path):
    if not (REPO / "verl_rl_insight" / "commands" / "report.py").exists():
        pytest.skip("rl-insight report is not on this branch yet (branch explorer-api builds it)")
    served = open_page(tab, f"{demo['base']}/runs/{PROJECT}/{NAN_EXPERIMENT}", "run")
    report = tmp_path / "run.html"
    made = rl_insight(
        "report", "--project", PROJECT, "--experiment", NAN_EXPERIMENT, "-o", str(report), env=demo["env"]
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    tab.context.set_offline(True)  # and the tab's routing refuses all but loopback and file: (see `tab`)
    drawn = open_page(tab, report.as_uri(), "run")
    assert drawn["curves"] == served["curves"] and drawn["bands"] == served["bands"] and drawn["bands"]
    assert not tab.context.pages[0].evaluate("performance.getEntriesByType('resource').length")  # nothing fetched


def canvas_variance(page, selector) -> float:
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(page.locator(selector).first.screenshot())).convert("L")
    return ImageStat.Stat(image).var[0]


def test_screenshots_of_the_run_page_and_a_step_page_are_not_blank(demo, tab, tmp_path):
    """The README's pictures: written under the test's own folder, and into docs/ only when asked
    (RL_INSIGHT_UPDATE_SCREENSHOTS=1), so a test run leaves the checkout as it was."""
    pytest.importorskip("PIL", reason="pillow is in the test extra: pip install -e '.[test]'")
    shots = DOCS if os.environ.get("RL_INSIGHT_UPDATE_SCREENSHOTS") == "1" else tmp_path
    open_page(tab, run_url(demo), "run")
    tab.screenshot(path=str(shots / "explorer-run.png"))
    charts = [canvas_variance(tab, f"[data-testid=panel] >> nth={i} >> canvas") for i in range(3)]
    assert statistics.fmean(charts) > 100 and min(charts) > 20, charts
    open_page(tab, f"{run_url(demo)}/steps/4", "step")
    tab.wait_for_selector("body[data-samples]")
    tab.fill("[data-testid=token-form] input", TOKEN)  # as a person would: the samples show in the picture
    with tab.expect_navigation():
        tab.click("[data-testid=token-form] button")
    tab.wait_for_selector("body[data-samples]")
    tab.screenshot(path=str(shots / "explorer-step.png"), full_page=True)
    assert canvas_variance(tab, "[data-testid=swimlane]") > 100


def test_each_explorer_picture_is_shown_by_the_docs_and_remade_by_the_script():
    """docs/explorer-*.png: each referenced by a page of the docs, each a picture
    scripts/make_screenshots.py writes (so none goes stale beyond remaking), none referenced missing."""
    pictures = {p.name for p in DOCS.glob("explorer-*.png")}
    referenced = {m for page in DOCS.glob("*.md") for m in re.findall(r"\((explorer-[\w-]+\.png)\)", page.read_text())}
    script = (REPO / "scripts" / "make_screenshots.py").read_text()
    made = set(re.findall(r'"(explorer-[\w-]+\.png)"', script))
    assert pictures == referenced == made == {"explorer-run.png", "explorer-step.png", "explorer-compare.png"}


class Collected:
    """What a page handler sends (the ASGI messages), as the API's Request would pass them on."""

    def __init__(self):
        self.messages = []

    async def send(self, message):
        self.messages.append(message)


def served(path):
    import asyncio
    import concurrent.futures

    from verl_rl_insight.server.api import explorer_pages as pages

    answer = Collected()
    with concurrent.futures.ThreadPoolExecutor(1) as thread:  # playwright's sync API holds this thread's loop
        thread.submit(asyncio.run, pages.serve(answer, path)).result()
    start, body = answer.messages
    return start["status"], dict(start["headers"]), body["body"]


def test_the_pages_module_answers_the_shell_and_its_files_and_nothing_else_without_a_browser():
    shell = served(f"/runs/{PROJECT}/{EXPERIMENT}/steps/12")
    assert shell[0] == 200 and shell[1][b"content-type"] == b"text/html; charset=utf-8"
    assert b"connect-src 'self'" in shell[1][b"content-security-policy"] and b"<script src=" in shell[2]
    assert served("/")[2] == served("/runs")[2] == shell[2]
    script = served("/static/explorer/explorer.js")
    assert script[0] == 200 and script[1][b"content-type"].startswith(b"text/javascript")
    assert b"RL_INSIGHT_REPORT" in script[2]
    for path in ("/static/explorer/../runs.py", "/static/explorer/.hidden.js", "/static/explorer/x/../../runs.py",
                 "/runs/p", "/runs/p/e/steps/x", "/static/explorer/runs.py"):  # fmt: skip
        status, headers, body = served(path)
        assert status == 404 and b"import" not in body, path
