"""A real Ray head on loopback, started apart from the driver (``ray start --head --block``, a
session of its own) with no RL_INSIGHT_* variable: what its workers know of the run, they got from
the driver through verl's runtime_env. Every port is chosen free (the real run's ray_head_ports),
so it runs beside another test's Ray cluster."""

import contextlib
import os
import subprocess
import tempfile

from tests.helpers import kill_session, wait_for
from verl_rl_insight.commands.demo.real.runner import ray_head_ports

RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@contextlib.contextmanager
def ray_head(extra_env=None, num_cpus=2):
    """Yields the head's address (127.0.0.1:PORT); ``extra_env`` goes to the cluster's processes."""
    flags, port = ray_head_ports()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RL_INSIGHT_", "VERL_RL_INSIGHT_"))}
    env.update(RAY_ENV, **(extra_env or {}))
    temp_dir = tempfile.mkdtemp(prefix="rlray")
    log_path = os.path.join(temp_dir, "ray-start.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                "ray",
                "start",
                "--head",
                "--block",
                "--node-ip-address=127.0.0.1",
                *flags,
                f"--num-cpus={num_cpus}",
                "--include-dashboard=false",
                f"--temp-dir={temp_dir}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: b"block forever" in open(log_path, "rb").read() or process.poll() is not None,
            90,
            interval=0.5,
            what="ray head",
        )
        assert process.poll() is None, open(log_path, "rb").read()[-3000:].decode(errors="replace")
        yield f"127.0.0.1:{port}"
    finally:
        kill_session(process.pid)
