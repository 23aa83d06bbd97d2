"""The explorer's kept curves answers are bounded by bytes (a share of memory_limit_mb), not by a
count of runs alone: asking for the curves of more runs than fit keeps the newest answers within
the bound, each answer still whole; an answer larger than the whole bound is still given, not kept."""

import json

from tests.server.history.test_histories import batch
from verl_rl_insight.server.explorer.curves import cached_curves_body
from verl_rl_insight.server.explorer.sources import Sources

KEYS = [f"actor/loss_{i}" for i in range(8)]
STEPS = 200


def test_kept_curves_answers_stay_within_their_bytes_and_every_answer_is_whole():
    sources = Sources()
    for run in range(6):
        sources.histories.observe(
            [
                batch(s, {f"rl_insight_monitor_actor_loss_{i}": s + i / 7 for i in range(8)}, f"r{run}")
                for s in range(STEPS)
            ]
        )
    one = len(cached_curves_body(sources, ("p", "r0"), KEYS))
    sources.curves.clear()
    sources.max_curves_bytes = int(2.5 * one)  # room for two answers: the server's share is set alike
    for run in range(6):
        answer = json.loads(cached_curves_body(sources, ("p", f"r{run}"), KEYS))
        assert answer["steps"] == list(range(STEPS)) and answer["series"][KEYS[3]][10] == 10 + 3 / 7
        held = sum(len(body) for _, body in sources.curves.values())
        assert held <= sources.max_curves_bytes, f"{len(sources.curves)} answers kept: {held} bytes"
    assert list(sources.curves) == [("p", "r4"), ("p", "r5")]  # the newest, the older ones gone first
    sources.max_curves_bytes = one // 2  # one answer is larger than the whole bound: given, not kept
    assert json.loads(cached_curves_body(sources, ("p", "r0"), KEYS))["steps"] == list(range(STEPS))
    assert ("p", "r0") not in sources.curves
