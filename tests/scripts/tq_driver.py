"""Driver for tests/trainer/test_transfer_queue.py: the real transferqueue package with its metrics
exporter on, and verl's real Tracking with transfer_queue.metrics.enabled=True.
argv: EXPERIMENT. Prints READY <endpoint>, waits for a line on stdin."""

import os
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray

from verl_rl_insight.commands.demo import ray_start

# logical CPUs: the TQ actors each ask for one; Ray started once more if its start times out (busy cores)
ray_start.init(num_cpus=8, include_dashboard=False)
import transfer_queue as tq  # noqa: E402
from verl.utils.tracking import Tracking  # noqa: E402

tq.init({"metrics": {"enabled": True}, "backend": {"SimpleStorage": {"num_data_storage_units": 1}}})
config = {
    "trainer": {"project_name": "tq", "experiment_name": sys.argv[1]},
    "transfer_queue": {"enable": True, "metrics": {"enabled": True}},
}
tracking = Tracking("tq", sys.argv[1], default_backend=["rl_insight"], config=config)
print("READY", tq.get_metrics_endpoint(), flush=True)
sys.stdin.readline()
tracking.finish()
tq.close()
ray.shutdown()
