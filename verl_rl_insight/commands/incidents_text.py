"""``rl-insight diagnose``'s findings as a person reads them: one block an incident (the severity, the
steps, the headline, the recommendation), then its findings in the order their signals moved, each
with its evidence, what it means, where to look first and what people usually try."""

from __future__ import annotations

from collections.abc import Sequence

from verl_rl_insight.server.health import detectors
from verl_rl_insight.server.health.incidents import Incident


def span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def print_finding(f: detectors.Finding) -> None:
    d = detectors.BY_NAME[f.detector]
    print(f"\n{f.severity.upper():8}  {f.detector}  {span(f.first_step, f.last_step)}  {f.metric}: {f.evidence}")
    print(f"          {d.means}")
    print(f"          look first: {d.look}")
    print(f"          people usually: {d.usually}")
    print(f"          panel: {f.panel}")


def print_incidents(name: str, steps: str, incidents: Sequence[Incident]) -> None:
    """Every incident, the most severe first; a lone finding is an incident of its own."""
    findings = sum(len(i.findings) for i in incidents)
    print(f"{name} ({steps}): {len(incidents)} incident(s) from {findings} finding(s), the most severe first")
    for incident in incidents:
        steps_of = span(incident.first_step, incident.last_step)
        print(f"\n== {incident.severity.upper()} incident, {steps_of}: {incident.headline}")
        if len(incident.findings) > 1:
            print(
                "   in the order it moved: "
                + " -> ".join(f"{link.signal} ({link.first_step})" for link in incident.chain)
            )
        print(f"   recommendation: {incident.recommendation}")
        for f in incident.findings:
            print_finding(f)
