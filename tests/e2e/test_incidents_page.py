"""The run explorer shows a real collapse as one incident, in a real browser (Debian's chromium,
headless, playwright) against the real server process fed the public run as its trainer sends it:
the incident's card (headline, the chain in the order its signals moved, the recommendation), its
strip on every panel, and the same incidents as `rl-insight diagnose --file` of the same run."""

import json
import time
import urllib.parse

import pytest

from tests import health_shapes as shapes
from tests.e2e import test_explorer_page
from tests.e2e.test_explorer_page import open_page, require_browser
from tests.helpers import free_port, http, rl_insight, start_hub_process, stop_group, wait_for
from tests.server.health.test_detectors_on_real_runs import PROJECT, push_run

RUN = "jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse"
browser, tab = test_explorer_page.browser, test_explorer_page.tab  # the Chromium tab fixture


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    require_browser()
    tmp = tmp_path_factory.mktemp("incidents")
    port = free_port()
    process = start_hub_process(port, tmp)
    hub = f"http://127.0.0.1:{port}"
    try:
        push_run(hub, RUN, shapes.real_run(RUN), time.time() - 5000)
        yield hub
    finally:
        stop_group(process)


def run_answer(hub):
    query = urllib.parse.urlencode({"project": PROJECT, "experiment_name": RUN})
    status, body = http("GET", f"{hub}/api/v1/explorer/run?{query}")
    assert status == 200, body
    return json.loads(body)


def test_the_run_answer_holds_the_incidents_diagnose_gives(served):
    path = next(p for p in shapes.real_run_files() if p.stem == RUN)
    offline = json.loads(rl_insight("diagnose", "--file", str(path), "--json").stdout)["incidents"]
    wait_for(lambda: run_answer(served)["incidents"], 30, what="the run's incidents")
    online = run_answer(served)["incidents"]
    keys = ("kind", "severity", "first_step", "last_step", "headline", "recommendation")
    assert [{k: i[k] for k in keys} for i in online] == [{k: i[k] for k in keys} for i in offline]
    answer = run_answer(served)
    (collapse,) = [i for i in online if i["kind"] == "policy_collapse"]
    parts = {answer["findings"][n]["detector"] for n in collapse["findings"]}
    assert parts == {f["detector"] for f in next(i for i in offline if i["kind"] == "policy_collapse")["findings"]}


def test_the_run_page_draws_the_collapse_as_one_incident_with_its_chain(served, tab):
    drawn = open_page(tab, f"{served}/runs/{PROJECT}/{RUN}", "run")["incidents"]
    cards = tab.locator("[data-testid=incident][data-kind=policy_collapse]")
    count = cards.count()
    headline = cards.locator("h3").inner_text()
    chain = cards.locator("[data-testid=incident-chain]").inner_text()
    advice = cards.locator("[data-testid=incident-recommendation]").inner_text()
    assert count == 1
    (collapse,) = [i for i in drawn if i["kind"] == "policy_collapse"]
    assert "the policy is collapsing from step" in headline and "tool calls" in headline
    signals = collapse["chain"]
    assert chain.startswith("in the order it moved: ")
    shown = [part.rsplit(" (", 1)[0] for part in chain.removeprefix("in the order it moved: ").split(" → ")]
    assert shown == signals  # each signal with the step it moved, in that order
    assert signals.index("the score fell") < signals.index("validation fell")
    assert advice.startswith("recommendation: resume from a checkpoint before step")
