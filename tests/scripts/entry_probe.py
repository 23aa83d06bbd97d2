"""Test support for tests/test_entry_points.py, loaded into the Ray workers of that test's cluster
through verl's own ``VERL_USE_EXTERNAL_MODULES`` (set in the cluster's environment, never the
driver's): the first Ray worker that imports verl (verl's TaskRunner) does here what verl's
rollout manager and replicas do in their workers, through verl's own ``RLInsightLogger``: it
registers a replica's metrics address. The server then shows which run that worker believed it
was in. It also writes what the driver handed it (its RL_INSIGHT_* variables), then holds the
worker until the test has looked (the file ``release``, at most 2 minutes) and ends it, so the
TaskRunner never loads a model."""

import json
import os
import time
from pathlib import Path

OUT = Path(os.environ["ENTRY_PROBE_DIR"])
REPLICA = os.environ["ENTRY_PROBE_REPLICA"]  # an address the test chose, as a replica's ip:port


def _probe() -> None:
    from verl.utils.tracking import RLInsightLogger

    RLInsightLogger.register_rollout_metrics([REPLICA], "vllm", [{"replica": "0"}])
    seen = {k: v for k, v in os.environ.items() if k.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_"))}
    (OUT / f"{os.getpid()}.tmp").write_text(json.dumps(seen))
    os.replace(OUT / f"{os.getpid()}.tmp", OUT / f"{os.getpid()}.json")
    deadline = time.monotonic() + 120
    while not (OUT / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(0)


_probe()
