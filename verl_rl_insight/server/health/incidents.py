"""Findings of one cause as one incident: the detectors each see their own number, a person reads one
story. Findings of the same family (the training's dynamics, or the systems under it) whose steps
overlap and that began within ``JOIN_STEPS`` of each other are one incident, with

- a headline that names the story (responses hitting the length limit, a policy collapse, an update
  that diverges, validation falling, the systems),
- the chain: each finding in the order its signal moved (its first step), with its evidence,
- one recommendation, and the severity of its worst part (for the length limit: by the share cut),
- the findings themselves, unchanged (``--json`` keeps each detector's finding under its incident).

Pure: findings in, incidents out. ``diagnose``, the explorer and the alerts' walk all group the same
findings the same way (``live.py`` fires one alert an incident: ``alerting``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from verl_rl_insight.contract.verl_keys import RESPONSE_LENGTH_CLIP_RATIO
from verl_rl_insight.server.health.modes import BY_NAME, SEVERITIES, Finding, series_name
from verl_rl_insight.server.health.signals import Series

History = Mapping[str, Series]
CLIP_SERIES = series_name(RESPONSE_LENGTH_CLIP_RATIO)

JOIN_STEPS = 25  # findings of one cause begin within this many steps of one another
GAP_STEPS = 5  # and their steps overlap, or lie this close
SYSTEMS = frozenset({"stall", "throughput_drop"})
LONGER = frozenset({"response_length_explosion"})  # what a slower step follows from: longer responses
COLLAPSE = frozenset({"entropy_collapse", "response_length_collapse", "reward_collapse", "no_learning_signal"})
JOINT = "joint_break"
LENGTH_SIGNALS = frozenset({"response length", "truncation", "entropy"})  # a joint break of responses at the limit
LIMIT_COMPANIONS = frozenset({"entropy_blowup", "entropy_collapse", "clip_ratio_runaway"})  # move with the limit
DIVERGENCE = frozenset({"kl_blowup", "grad_norm_spike", "clip_ratio_runaway", "entropy_blowup", "non_finite"})
VALIDATION = frozenset({"validation_drop", "train_val_divergence"})
TRUNCATION = "response_truncation"
CUT_WARNING = 0.1  # the share of responses cut at the limit from which the length-limit incident is a warning
SIGNAL = {  # what a person calls the signal of each detector, in a chain
    "entropy_collapse": "entropy fell",
    "entropy_blowup": "entropy rose",
    "reward_collapse": "the score fell",
    "reward_plateau": "the score stopped moving",
    "no_learning_signal": "no learning signal",
    "zero_variance_groups": "uniform groups",
    "kl_blowup": "the KL rose",
    "grad_norm_spike": "the gradient norm rose",
    "clip_ratio_runaway": "the clip fraction rose",
    "response_length_explosion": "responses grew",
    "response_length_collapse": "responses shrank",
    "response_truncation": "responses hit the length limit",
    "joint_break": "leading signals broke together",
    "validation_drop": "validation fell",
    "train_val_divergence": "validation fell while the score rose",
    "throughput_drop": "throughput fell",
    "logprob_mismatch": "rollout and trainer log-probs disagree",
    "non_finite": "a loss or gradient went NaN/Inf",
    "stall": "a step stalled",
}
LENGTH_LIMIT = (
    "raise data.max_response_length (and actor_rollout_ref.rollout.response_length with it) if the task needs "
    "the length; else shape the overlong responses: DAPO's overlong reward (reward.reward_manager.name=dapo with "
    "+reward.reward_kwargs.overlong_buffer_cfg.enable=True, .len, .penalty_factor and "
    "+reward.reward_kwargs.max_resp_len); check the longest samples for repetition loops"
)


@dataclass
class Link:
    """One finding in an incident's chain."""

    detector: str
    signal: str  # what moved, in words
    metric: str
    first_step: int
    severity: str
    evidence: str


@dataclass
class Incident:
    kind: str  # length_limit, policy_collapse, divergence, validation, systems, or the first finding's detector
    severity: str
    first_step: int
    last_step: int
    headline: str
    recommendation: str
    chain: list[Link]
    findings: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "headline": self.headline,
            "recommendation": self.recommendation,
            "chain": [vars(link) for link in self.chain],
            "findings": [f.as_json() for f in self.findings],
        }


def _family(finding: Finding) -> str:
    if finding.severity == "info":
        return "info"  # worth knowing (a plateau): never part of a problem's story
    return "systems" if finding.detector in SYSTEMS else "dynamics"


def _story_class(finding: Finding) -> str:
    """The story a finding belongs to on its own: findings of one story join whenever they overlap."""
    name = finding.detector
    if name in (TRUNCATION, *LONGER) or (name == JOINT and set(finding.signals) <= LENGTH_SIGNALS):
        return "length"
    if name in COLLAPSE or name == JOINT:
        return "collapse"
    return "divergence" if name in DIVERGENCE else name


def _related(a: Finding, b: Finding) -> bool:
    """Whether two findings are one cause: one family (or a slower step beside longer responses),
    their steps overlapping or within ``GAP_STEPS``, and one story, or begun within ``JOIN_STEPS``
    of each other, or a validation that follows the training's own (validation lags: it is measured
    every few steps)."""
    families = {_family(a), _family(b)}
    if "info" in families:
        return False
    pair = {a.detector, b.detector}
    if len(families) > 1 and not (pair & LONGER and pair & SYSTEMS):
        return False
    if "stall" in pair:  # a stalled step is a fact of its own step
        return pair == {"stall"} and abs(a.first_step - b.first_step) <= GAP_STEPS
    if not (a.first_step <= b.last_step + GAP_STEPS and b.first_step <= a.last_step + GAP_STEPS):
        return False
    same_story = _story_class(a) == _story_class(b)
    return same_story or bool(pair & VALIDATION) or abs(a.first_step - b.first_step) <= JOIN_STEPS


def _groups(findings: Sequence[Finding]) -> list[list[Finding]]:
    parent = list(range(len(findings)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(findings)):
        for j in range(i + 1, len(findings)):
            if _related(findings[i], findings[j]):
                parent[root(i)] = root(j)
    groups: dict[int, list[Finding]] = {}
    for i, finding in enumerate(findings):
        groups.setdefault(root(i), []).append(finding)
    return [sorted(g, key=lambda f: (f.first_step, SEVERITIES.index(f.severity), f.detector)) for g in groups.values()]


def _worst(findings: Sequence[Finding]) -> str:
    return min((f.severity for f in findings), key=SEVERITIES.index)


def _cut_share(parts: Sequence[Finding], history: History) -> float | None:
    """The largest share of responses cut at the limit over the incident's steps: from the run's
    history where given, else the truncation finding's own value."""
    first, last = min(f.first_step for f in parts), max(f.last_step for f in parts)
    logged = [v for step, v in history.get(CLIP_SERIES, ()) if first <= step <= last and math.isfinite(v)]
    shares = logged or [f.value for f in parts if f.detector == TRUNCATION and f.value is not None]
    return max(shares) if shares else None


def _said(f: Finding) -> str:
    """What moved, in words: the detector's signal, or the leading signals a joint break names."""
    if f.signals:
        return " and ".join(f.signals) + " broke together"
    return SIGNAL.get(f.detector, f.detector)


def _chain_text(parts: Sequence[Finding]) -> str:
    """The first four signals in the order they moved, each named once."""
    said: list[str] = []
    for f in parts:
        if _said(f) not in said:
            said.append(_said(f))
    return ", then ".join(said[:4])


def _story(parts: Sequence[Finding], history: History) -> tuple[str, str, str, str]:
    """(kind, headline, recommendation, severity) of a group of findings."""
    names = {f.detector for f in parts}
    first = parts[0]
    steps = (
        f"from step {first.first_step}" if first.first_step != parts[-1].last_step else f"at step {first.first_step}"
    )
    severity = _worst(parts)
    lengthy = all(set(f.signals) <= LENGTH_SIGNALS for f in parts if f.detector == JOINT)
    if TRUNCATION in names and lengthy and names <= {TRUNCATION, JOINT, *LONGER, *LIMIT_COMPANIONS, *SYSTEMS}:
        cut = _cut_share(parts, history)
        longer = (
            "responses are getting longer and now hit the length limit"
            if names & LONGER
            else ("more and more responses hit the length limit")
        )
        share = f" (up to {cut * 100:.0f} % cut)" if cut is not None else ""
        # by the share cut: a warning from a tenth, worth knowing below; never critical by length alone
        severity = "warning" if cut is None or cut >= CUT_WARNING else "info"
        return "length_limit", f"{longer} {steps}{share}", LENGTH_LIMIT, severity
    if names & COLLAPSE or JOINT in names:
        lead = next(f for f in parts if f.detector in COLLAPSE | {JOINT})
        return (
            "policy_collapse",
            f"the policy is collapsing {steps}: {_chain_text(parts)}",
            f"resume from a checkpoint before step {first.first_step}; "
            + BY_NAME[lead.detector].usually.split("; resume from")[0],
            severity,
        )
    if names & DIVERGENCE:
        lead = next(f for f in parts if f.detector in DIVERGENCE)
        return (
            "divergence",
            f"the update is diverging {steps}: {_chain_text(parts)}",
            BY_NAME[lead.detector].usually,
            (severity),
        )
    kind = "validation" if names <= VALIDATION else "systems" if names <= SYSTEMS | LONGER else first.detector
    return kind, f"{_chain_text(parts)} {steps}", BY_NAME[first.detector].usually, severity


def incidents(findings: Sequence[Finding], history: History | None = None) -> list[Incident]:
    """The findings grouped into incidents, the most severe first, then the earliest; ``history``
    (the run's series, by series name) gives the largest share cut at the length limit."""
    found = []
    for parts in _groups(findings):
        kind, headline, recommendation, severity = _story(parts, history or {})
        chain = [Link(f.detector, _said(f), f.metric, f.first_step, f.severity, f.evidence) for f in parts]
        found.append(
            Incident(
                kind,
                severity,
                min(f.first_step for f in parts),
                max(f.last_step for f in parts),
                headline,
                recommendation,
                chain,
                list(parts),
            )
        )
    return sorted(found, key=lambda i: (SEVERITIES.index(i.severity), i.first_step, i.kind))


class Alerting(NamedTuple):
    """Which detectors' alerts the open incidents fire: one an incident (its first found part, and a
    part more severe than every part found before it), the others quiet while the incident is open."""

    carriers: frozenset[str]  # detectors whose alert stands for an open incident
    quiet: frozenset[str]  # detectors whose finding is part of an open incident another's alert carries


def alerting(findings: Sequence[Finding], going_on: Sequence[Finding]) -> Alerting:
    """The alerts of the incidents that hold a finding ``going_on`` (its detector flags the newest step)."""
    carriers: set[str] = set()
    quiet: set[str] = set()
    for group in _groups([f for f in findings if f.severity != "info"]):
        if not any(any(f is g for g in going_on) for f in group):
            continue
        worst = len(SEVERITIES)
        for f in sorted(group, key=lambda f: (f.found_at if f.found_at is not None else f.first_step, f.first_step)):
            rank = SEVERITIES.index(f.severity)
            if rank < worst:
                carriers.add(f.detector)
                worst = rank
            elif any(f is g for g in going_on):
                quiet.add(f.detector)
    return Alerting(frozenset(carriers), frozenset(quiet - carriers))
