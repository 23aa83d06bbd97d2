"""What a finding means, for an agent to read before it explains one: made from the detectors' own
definitions (``server/health/modes.py``: what it means, where to look first, what people usually
try, its alert) and the incidents' rules, so the resource says what the running code does."""

from __future__ import annotations

from verl_rl_insight.server.health import incidents
from verl_rl_insight.server.health.modes import BY_NAME, DETECTORS, Detector

INCIDENTS = """\
# Findings and incidents (rl-insight)

Each detector reads its own keys on every logged step and reports a **finding** (severity, first and
last step, the evidence in figures). Findings of one cause are one **incident**: findings of the same
family (the training's dynamics, or the systems under it) whose steps overlap and that began within
{join} steps of one another. An incident has a headline naming the story (length_limit: responses
hitting the length limit; policy_collapse; divergence: an update that diverges; validation: validation
falling; systems), the chain (its findings in the order their signals moved), one recommendation, and
the severity of its worst part.

Severities: critical (act now), warning (look today), info (worth knowing, not a problem: a plateau).
An alert fires once an incident, and once more when it grows more severe.

"""


def detector_doc(d: Detector) -> str:
    keys = ", ".join(d.keys) + (f" (with {', '.join(d.extra)})" if d.extra else "")
    return (
        f"## {d.name} ({d.severity})\n\n"
        f"- means: {d.means}\n"
        f"- reads: {keys}\n"
        f"- look first: {d.look}\n"
        f"- people usually: {d.usually}\n"
        f"- dashboard panel: {d.panel}\n"
        f"- alert: {d.alert}{'' if d.online else ' (its own alert rule, not pushed a step at a time)'}\n"
    )


def findings_doc() -> str:
    return INCIDENTS.format(join=incidents.JOIN_STEPS) + "\n".join(detector_doc(d) for d in DETECTORS)


def one_detector(name: str) -> str:
    d = BY_NAME.get(name)
    if d is None:
        known = ", ".join(sorted(BY_NAME))
        raise KeyError(f"no detector {name[:80]!r}: the detectors are {known}")
    return detector_doc(d)
