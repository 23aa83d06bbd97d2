"""The demo's Prometheus links open on the Prometheus that runs here (Debian's 2.42, whose package
has only the classic UI: /graph and /alerts are not pages there): a graph of the run's expression,
percent-encoded, and the alerts page."""

import urllib.parse
import urllib.request

from tests.helpers import Prometheus, free_port
from verl_rl_insight.commands.demo.command import prometheus_links

EXPR = 'rl_insight_monitor_critic_score_mean{project="rl-insight-demo",experiment_name="a b&c"}'


def opened(url):
    """(status, final URL, page) as a browser gets it (redirects followed)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.url, answer.read().decode(errors="replace")


def test_the_demos_prometheus_links_open_on_this_prometheus_with_the_whole_expression(tmp_path):
    prom = Prometheus(tmp_path, [f"127.0.0.1:{free_port()}"])
    try:
        graph, alerts = prometheus_links(prom.url, EXPR)
        status, where, page = opened(graph)
        assert status == 200 and "graph" in page.lower(), (graph, where)
        assert urllib.parse.parse_qs(urllib.parse.urlsplit(where).query)["g0.expr"] == [EXPR]
        status, _, page = opened(alerts)
        assert status == 200 and "alert" in page.lower(), alerts
    finally:
        prom.stop()


def test_a_prometheus_that_does_not_answer_gets_the_upstream_2x_links_encoded():
    graph, alerts = prometheus_links(f"http://127.0.0.1:{free_port()}", EXPR)
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(graph).query)["g0.expr"] == [EXPR]
    assert graph.split("?")[0].endswith("/graph") and alerts.endswith("/alerts")
