"""The MCP answers' bounds on their own: the byte cap's cut (the longest list loses its second half
until the answer fits; a [step, value] point is never cut in two) and the point budget's buckets."""

import json

import pytest

pytest.importorskip("pydantic", reason="the MCP answers are pydantic models (the mcp extra brings it)")

from verl_rl_insight.commands.mcp import answers
from verl_rl_insight.commands.mcp.bounded import fit
from verl_rl_insight.commands.mcp.curves import downsample


def curves(n):
    points = [(s, float(s % 7)) for s in range(n)]
    curve = answers.Curve(key="k", points=points, steps=n, first=0.0, last=points[-1][1], low=0.0, high=6.0,
                          nonfinite_steps=[])  # fmt: skip
    return answers.Curves(project="p", experiment="e", smoothing=0, max_points=n, points=n, downsampled=False,
                          missing=[], curves=[curve])  # fmt: skip


def test_an_answer_past_the_cap_keeps_its_first_points_whole_and_says_truncated():
    whole = curves(5000)
    cut = fit(whole, 8000)
    size = len(json.dumps(cut.model_dump(mode="json"), separators=(",", ":")))
    assert cut.truncated and size <= 8000
    points = cut.curves[0].points
    assert points == whole.curves[0].points[: len(points)] and all(len(p) == 2 for p in points)


def test_an_answer_within_the_cap_is_left_as_it_is():
    whole = curves(50)
    assert fit(whole, 100_000) is whole and not whole.truncated


def test_each_bucket_keeps_its_first_low_high_and_last_so_a_spike_survives():
    steps = list(range(1000))
    values = [1.0] * 1000
    values[537] = 50.0  # one step's spike
    values[912] = -3.0
    kept = downsample(steps, values, 40)
    assert len(kept) <= 40 and (537, 50.0) in kept and (912, -3.0) in kept
    assert kept[0] == (0, 1.0) and kept[-1] == (999, 1.0) and kept == sorted(kept)
