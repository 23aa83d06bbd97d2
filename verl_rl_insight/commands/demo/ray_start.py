"""A local Ray cluster's start on a busy machine: the raylet waits a fixed 15 s for its dashboard
agent to report its ports (when they were not given) and ends when the agent is later, as one
importing on saturated cores is; ``ray.init`` then raises that the node timed out during startup.
A second start usually makes it (the first one's load has gone). The demo starts verl's
``run_ppo`` again on it; driver scripts call ``init``."""

from __future__ import annotations


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is Ray giving up on its own local start."""
    return "timed out during startup" in str(exc)


def init(**kwargs: object) -> None:
    """``ray.init(**kwargs)``, started once more when Ray's start timed out."""
    import ray

    try:
        ray.init(**kwargs)
    except Exception as exc:
        if not timed_out(exc):
            raise
        ray.shutdown()
        ray.init(**kwargs)
