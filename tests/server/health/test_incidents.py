"""Findings of one cause as one incident, judged on the public verl runs in tests/data/real_runs (their
labels and onsets in each run's ``source.json``): each failed run's first incident comes within 8 steps
of its onset; a healthy run has no critical incident and at most one warning incident its source does
not describe; length growth with truncation is one incident that names max_response_length; a chained
collapse is one incident whose chain lists its signals in the order they moved; the alerts fire once an
incident; a validation drop needs evidence."""

import json

import pytest

from tests import health_shapes as shapes
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.incidents import incidents

SOURCES = {p.stem: json.loads(p.with_name(p.stem + ".source.json").read_text()) for p in shapes.real_run_files()}
FAILED = sorted(name for name, s in SOURCES.items() if s["label"].startswith("failure") and s.get("onset"))
HEALTHY = sorted(name for name, s in SOURCES.items() if s["label"] == "healthy")


def walk(name):
    run = shapes.real_run(name)
    walked = detectors.walked(run.history)
    return run, walked, incidents(walked.findings(), run.history)


def found_at(incident):
    return min(f.found_at for f in incident.findings)


def test_there_are_failed_runs_with_onsets_and_healthy_runs_to_judge_on():
    assert len(FAILED) >= 5 and len(HEALTHY) >= 10, (FAILED, HEALTHY)


@pytest.mark.parametrize("name", FAILED)
def test_each_failed_public_runs_first_incident_comes_within_8_steps_of_its_onset(name):
    onset = SOURCES[name]["onset"]
    _, _, found = walk(name)
    problems = [i for i in found if i.severity != "info"]
    assert problems, name
    first = min(problems, key=found_at)
    assert onset - 3 <= found_at(first) <= onset + 8, (onset, [(i.kind, found_at(i), i.headline) for i in problems])


@pytest.mark.parametrize("name", HEALTHY)
def test_each_healthy_public_run_has_no_critical_and_at_most_one_warning_incident(name):
    run, _, found = walk(name)
    assert not [i for i in found if i.severity == "critical"], [i.headline for i in found]
    # what the run's own source describes is no false alarm (the GPG run's responses at the limit, its 6 h step)
    unknown = [i for i in found if i.severity == "warning" and not any(shapes.known(run, f) for f in i.findings)]
    assert len(unknown) <= 1, [i.headline for i in unknown]


@pytest.mark.parametrize(
    "name", ["diqiu_gpg_qwen2_7b_gsm8k_math_fsdp", "jianghoucheng_opd_qwen25_3b_tokenkl002_length_truncation"]
)
def test_length_growth_with_truncation_is_one_incident_naming_max_response_length(name):
    run, walked, found = walk(name)
    parts = {f.detector for f in walked.findings()}
    assert {"response_length_explosion", "response_truncation"} <= parts
    (limit,) = [i for i in found if i.kind == "length_limit"]
    assert {"response_length_explosion", "response_truncation"} <= {f.detector for f in limit.findings}
    assert "data.max_response_length" in limit.recommendation and "overlong_buffer_cfg" in limit.recommendation
    assert limit.headline.startswith("responses are getting longer and now hit the length limit")
    # the share cut the headline gives is the largest the run logged over the incident's steps
    cut = max(
        v
        for s, v in run.history[detectors.series_name("response_length/clip_ratio")]
        if limit.first_step <= s <= limit.last_step
    )
    assert f"(up to {cut * 100:.0f} % cut)" in limit.headline and limit.severity == "warning"


def test_a_chained_collapse_is_one_incident_whose_chain_is_in_the_order_its_signals_moved():
    """The token-KL tool agent: tool calls and length break first, entropy rises, the score falls,
    validation follows tens of steps later (it is measured every 10): one incident, one story."""
    _, walked, found = walk("jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse")
    (collapse,) = [i for i in found if i.kind == "policy_collapse"]
    assert [i for i in found if i.severity != "info"] == [
        collapse
    ]  # validation is part of it, not an incident of its own
    steps = [link.first_step for link in collapse.chain]
    assert steps == sorted(steps) and collapse.first_step == steps[0]
    signals = [link.signal for link in collapse.chain]
    tools = next(i for i, s in enumerate(signals) if "tool calls" in s)
    assert tools < signals.index("the score fell") < signals.index("validation fell") == len(signals) - 1
    assert collapse.recommendation.startswith(f"resume from a checkpoint before step {collapse.first_step}")
    assert {f.detector for f in collapse.findings} == {f.detector for f in walked.findings() if f.severity != "info"}


def test_an_incident_alerts_once_and_again_only_where_it_grows_more_severe():
    """The walk's alerts (the ``rl_insight_health_findings_total`` the rules fire on): one detector's
    alert carries the incident (the part found first), a part more severe than it alerts once more;
    the other parts stay quiet."""
    _, walked, found = walk("jianghoucheng_opd_qwen25_3b_tokenkl01_toolcall_collapse")
    (collapse,) = [i for i in found if i.kind == "policy_collapse"]
    parts = sorted(collapse.findings, key=lambda f: f.found_at)
    rank = detectors.SEVERITIES.index
    expected = [parts[0].detector] + [
        f.detector for i, f in enumerate(parts[1:], 1) if rank(f.severity) < min(rank(g.severity) for g in parts[:i])
    ]
    assert sorted(walked.alerted & {f.detector for f in parts}) == sorted(expected), walked.alerted
    assert len(expected) < len(parts)  # 7 findings, 1 alert: joint_break, found first, critical from its step 18
