"""A finding's evidence states its numbers truly (issue 38): where it says "step N: V", V is what
step N logged; a median is named as one with the steps it covers and is their median; a change is
the difference of the two medians it names, its noise ratio the change over the noise it quotes;
"within" only where the change is. Checked on every finding of every real run in the repository
and of the gradual failure shapes, with a positive control: the checker rejects a finding whose
numbers were altered.
"""

from __future__ import annotations

import dataclasses
import re
import statistics

import pytest

from tests import health_gradual as gradual
from tests import health_shapes as shapes
from tests.server.health.test_walk import offline
from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.signals import fmt

NUM = r"([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
STEP_VALUE = re.compile(rf"step (\d+): {NUM}(?![\d%.])")
MEDIAN_OF = re.compile(rf"median {NUM} (?:over|of) steps (\d+)-(\d+)")
SHIFT = re.compile(rf"median {NUM} over steps \d+-\d+ against the median {NUM} over steps \d+-\d+: {NUM} ")
RATIO = re.compile(rf": {NUM}(?: \([-+]\d+%\))?, {NUM}x the noise of that difference \(\+-{NUM}")
WITHIN = re.compile(rf"changed {NUM} over .*?within .*?\(\+-{NUM}\)")
SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")


def series(history, metric):
    name = metric if metric.startswith(detectors.PREFIX) else detectors.series_name(metric)
    return dict(history.get(name, []))


def same(text, value):
    """``text`` is ``value`` as the evidence prints it (4 significant digits)."""
    return text == fmt(value) or abs(float(text) - value) <= 5e-4 * max(abs(value), 1e-9)


def untrue(finding, history):
    """What ``finding``'s evidence misstates about ``history`` (empty: nothing)."""
    wrong = []
    score = next((dict(history[k]) for k in map(detectors.series_name, SCORE_KEYS) if k in history), {})
    for clause in finding.evidence.split("; "):
        values = score if "training score" in clause else series(history, finding.metric)
        for step, text in STEP_VALUE.findall(clause):
            if int(step) in values and not same(text, values[int(step)]):
                wrong.append(f"step {step}: {text}, logged {values[int(step)]}")
        for text, first, last in MEDIAN_OF.findall(clause):
            covered = [v for s, v in values.items() if int(first) <= s <= int(last)]
            if covered and not same(text, statistics.median(covered)):
                wrong.append(f"median {text} of steps {first}-{last}: it is {statistics.median(covered)}")
        for now, then, change in SHIFT.findall(clause):
            if abs(float(change) - (float(now) - float(then))) > 1e-3 * max(abs(float(now)), abs(float(then))):
                wrong.append(f"change {change} is not {now} - {then}")
        for change, ratio, error in RATIO.findall(clause):
            if abs(abs(float(change)) / float(error) - float(ratio)) > 0.051 + 0.001 * float(ratio):
                wrong.append(f"{change} is not {ratio}x {error}")
        for change, error in WITHIN.findall(clause):
            if abs(float(change)) > float(error):
                wrong.append(f"{change} called within +-{error}")
    return wrong


def runs():
    real = [(r.name, r.history, shapes.diagnose(r)) for r in shapes.real_runs(None)]
    made = [gradual.gradual(mode, 40, 0) for mode in sorted(gradual.GRADUAL)]
    return real + [(r.name, r.history, offline(r)) for r in made]


RUNS = runs()


@pytest.mark.parametrize("name, history, found", RUNS, ids=[r[0] for r in RUNS])
def test_every_finding_states_its_numbers_truly(name, history, found):
    for finding in found:
        assert untrue(finding, history) == [], (finding.detector, finding.evidence)


def test_the_evidence_names_what_it_checks():
    """Each kind of claim the checker reads is made somewhere (else the test above checks nothing)."""
    said = " ".join(f.evidence for _, _, found in RUNS for f in found)
    for pattern in (STEP_VALUE, MEDIAN_OF, SHIFT, RATIO, WITHIN):
        assert pattern.search(said), pattern.pattern


def test_the_checker_rejects_a_finding_whose_numbers_were_altered():
    """Positive control: the old evidence's faults, made again, are caught."""
    name, history, found = next(r for r in RUNS if r[0] == "diqiu_gpg_qwen2_7b_gsm8k_math_fsdp")
    [explosion] = [f for f in found if f.detector == "response_length_explosion"]
    step = int(STEP_VALUE.search(explosion.evidence).group(1))
    median_of_three = re.search(rf"median {NUM}", explosion.evidence).group(1)
    # "step 37: 1.884" where 1.884 was the median of three steps
    wrong_step = re.sub(rf"step {step}: {NUM}", f"step {step}: {median_of_three}", explosion.evidence)
    assert untrue(dataclasses.replace(explosion, evidence=wrong_step), history)
    # a baseline median of steps that is not their median (a quartile called the normal level)
    wrong_median = re.sub(rf"the median {NUM} of steps", "the median 176.5 of steps", explosion.evidence)
    assert untrue(dataclasses.replace(explosion, evidence=wrong_median), history)
    # "+0.055 over the last 40 steps, within its noise (+-0.0315)": a change 1.7x its noise called within it
    [plateau] = [f for _, _, fs in RUNS for f in fs if f.detector == "reward_plateau"][:1]
    wrong_within = re.sub(r"\(\+-[^)]*\)", "(+-0)", plateau.evidence)
    assert untrue(dataclasses.replace(plateau, evidence=wrong_within), history)
    [trend] = [f for _, _, fs in RUNS for f in fs if SHIFT.search(f.evidence)][:1]
    now = SHIFT.search(trend.evidence).group(1)
    altered = trend.evidence.replace(f"median {now} over", f"median {float(now) * 2:.4g} over", 1)
    assert untrue(dataclasses.replace(trend, evidence=altered), history) if float(now) else True
