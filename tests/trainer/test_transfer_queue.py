"""TransferQueue metrics: the real transferqueue package's exporter endpoint is registered (job
transfer_queue) and scraped by a real Prometheus."""

import json
import os
import subprocess
import sys
import urllib.parse

import pytest

from tests.helpers import REPO, http, wait_for

pytestmark = pytest.mark.local_ray  # starts a local Ray cluster: one at a time under -n (tests/parallel.py)


def test_transfer_queue_endpoint_is_registered_and_scraped(monitoring_server):
    hub_url, prom_url = monitoring_server
    env = dict(os.environ, RL_INSIGHT_SERVER_URL=hub_url)
    process = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "scripts" / "tq_driver.py"), "tq-run"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
    )
    try:
        ready = next((line.split() for line in process.stdout if line.startswith("READY")), None)
        assert ready, process.stderr.read()[-3000:]
        endpoint = ready[1]

        def registered():
            body = json.loads(http("GET", hub_url + "/api/v1/targets")[1])
            return [t for t in body["targets"] if t["job"] == "transfer_queue"]

        [target] = wait_for(registered, 20, what="transfer_queue target")
        assert target["address"] == endpoint
        assert target["labels"] == {"project": "tq", "experiment_name": "tq-run"}

        def scraped():
            query = urllib.parse.urlencode({"query": 'tq_controller_uptime_seconds{job="transfer_queue"}'})
            status, body = http("GET", prom_url + "/api/v1/query?" + query)
            return json.loads(body)["data"]["result"] if status == 200 else []

        [sample] = wait_for(scraped, 30, what="tq metrics in Prometheus")
        assert sample["metric"]["experiment_name"] == "tq-run" and float(sample["value"][1]) > 0
    finally:
        process.stdin.write("\n")
        process.stdin.flush()
        process.wait(60)
    assert not [
        t for t in json.loads(http("GET", hub_url + "/api/v1/targets")[1])["targets"] if t["job"] == "transfer_queue"
    ]
