"""``Tracking.log`` on the training thread only hands verl's dict over: the plugins see it on another
thread, in order, all of it by ``finish()``; and a ``Tracking`` collected late stops only its own runtime."""

import gc
import threading
import time

from tests.helpers import free_port, wait_for
from verl_rl_insight.trainer import runtime
from verl_rl_insight.trainer.hookspecs import hookimpl
from verl_rl_insight.trainer.plugins import metric_push


class SlowPlugin:
    """A third-party plugin that takes 50 ms for each log (a slow disk, a slow network)."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def rl_insight_log_metrics(self, run, metrics, step, timestamp):
        time.sleep(0.05)
        self.seen.append((step, metrics["actor/pg_loss"], threading.current_thread().name))


def test_a_slow_plugin_does_not_slow_tracking_log_and_sees_every_step_in_order(monkeypatch):
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{free_port()}")  # nobody listens
    from verl.utils.tracking import Tracking

    tracking = Tracking("proj", "slow-plugin", default_backend=["rl_insight"])
    slow = SlowPlugin()
    runtime.get_runtime().pm.register(slow, name="slow")
    started = time.perf_counter()
    for step in range(1, 21):
        tracking.log({"actor/pg_loss": 0.1 * step}, step=step)
    spent = time.perf_counter() - started
    assert spent < 0.5, f"20 logs took {spent:.2f} s: the plugin ran on the training thread (20 x 50 ms)"
    # the log thread delivers them all (finish() would deliver what is left on the calling thread: the
    # job has ended then, and a loaded machine can leave the log thread a few steps behind)
    wait_for(lambda: len(slow.seen) == 20, 30, what="the 20 steps at the slow plugin")
    assert threading.main_thread().name not in {thread for _, _, thread in slow.seen}
    tracking.finish()
    assert [(step, loss) for step, loss, _ in slow.seen] == [(s, 0.1 * s) for s in range(1, 21)]


def test_a_tracking_collected_late_does_not_stop_the_runtime_a_newer_one_started(monkeypatch):
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{free_port()}")
    from verl.utils.tracking import Tracking

    first = Tracking("proj", "first", default_backend=["rl_insight"])
    first.log({"actor/pg_loss": 1.0}, step=1)
    runtime.shutdown(timeout_s=0.5)  # a job that ended without Tracking.finish()
    second = Tracking("proj", "second", default_backend=["rl_insight"])
    del first  # verl's Tracking.__del__ calls finish(), after the second runtime started
    gc.collect()
    second.log({"actor/pg_loss": 2.0}, step=1)
    sender = metric_push.sender()
    assert sender is not None, "the first Tracking's late finish() stopped the second one's runtime"
    assert sender.pending() == 2  # run_finished 0 and the step, held for the server that is down
    second.finish()
