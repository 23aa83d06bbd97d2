"""Write the dashboards' JSON, or ``--check`` that it is current and that every query is sound.

    python -m verl_rl_insight.dashboards.generate [--check]

What ``--check`` proves, besides the JSON being current:
- every PromQL query filters on the run (``project=~"$project"`` and ``experiment_name=~"$experiment_name"``)
  and every TraceQL query with the anchored raw-string filter, checked valid for run names with
  dots, slashes, quotes and regex characters (dashboards/traceql.py): each selects its run alone;
- every metric a query names is produced by something (dashboards/catalogue.py, and for trainer keys
  the installed verl's source, dashboards/keys.py); a name regex must match at least one known name;
- no ``traces`` panel is fed by a search: it renders one trace, so its query is a trace ID (the
  ``trace_id`` variable); searches go to tables;
- a percent panel cannot pass 100 %, by construction of each of its queries (``PERCENT_RULE``).
"""

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from verl_rl_insight.dashboards import DASHBOARDS_DIR, attempts, keys, traceql
from verl_rl_insight.dashboards.panels import PERCENT_UNITS, M, Panel, every_panel

PERCENT_RULE = """\
A panel in unit percentunit (percent) can only show values in 0-1 (0-100): each of its queries is
  1. clamp(E, 0, 1) (clamp(E, 0, 100) for percent), or
  2. a selector of a metric the catalogue declares a fraction (a percent), alone or under
     max by (...) / min by (...) / avg by (...), which cannot leave the range, or
  3. S1 / (S1 + S2): a part over its whole, S1 and S2 selectors of counts that cannot be negative."""

SELECTOR = r"[a-zA-Z_:][a-zA-Z0-9_:]*\{[^{}]*\}"
METRIC_TOKEN = re.compile(
    r"(rl_insight_[a-zA-Z0-9_]+|vllm:[a-zA-Z0-9_:]+|sglang:[a-zA-Z0-9_:]+|tq_[a-zA-Z0-9_]+|"
    r"DCGM_[A-Z0-9_]+)"
)
SERVER_WIDE = "rl_insight_hub_"  # the monitor's own series: the server's, of no run
NAME_MATCHER = re.compile(r'__name__(=~|!~)"((?:[^"\\]|\\.)*)"')
TRACE_ID = re.compile(r"\$\{?trace_id\}?|[0-9a-fA-F]{16,32}")


def unquote(body: str) -> str:
    """What Prometheus reads in a double-quoted PromQL string's ``body`` (``\\\\`` is one backslash)."""
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def render(dashboard: Panel) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def queries(dashboard: Any) -> Iterator[tuple[str, str]]:
    """(kind, text) of every query: PromQL of panels and query variables, TraceQL of Tempo panels."""
    for panel in every_panel(dashboard):
        for t in panel.get("targets", []):
            yield ("traceql", t["query"]) if "query" in t else ("promql", t["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield "variable", variable["query"]["query"]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if "expr" in annotation:
            yield "promql", annotation["expr"]


def verl_keys() -> set[str]:
    """Metric names of every trainer key something logs: verl's (as its source spells them, or
    as it builds them at run time) and this package's."""
    from verl_rl_insight.contract.naming import metric_name

    return {metric_name(M, k) for k in keys.verl_literals() | keys.own_keys() | keys.RUNTIME_KEYS}


def bounded_names(unit: str) -> set[str]:
    """Metric names whose values the catalogue declares within the unit's range."""
    from verl_rl_insight.contract.naming import metric_name
    from verl_rl_insight.dashboards.catalogue import FRACTIONS, PERCENTS

    if unit == "percent":
        return set(PERCENTS)
    return set(FRACTIONS) | {metric_name(M, k) for k in keys.trainer_keys() | keys.own_keys() if keys.is_fraction(k)}


def percent_problem(expr: str, unit: str) -> str | None:
    """Why ``expr`` could leave the unit's range (None when it cannot), by PERCENT_RULE."""
    text = " ".join(expr.split())
    top = PERCENT_UNITS[unit]
    inner = attempts.joined(text)
    if inner is not None:  # times 1, with the attempt as a label: in range where the series is
        return percent_problem(inner, unit)
    clamp = re.fullmatch(r"clamp\((.*), 0, (\d+)\)", text)
    if clamp:
        return None if int(clamp.group(2)) == top else f"clamped to {clamp.group(2)}, not {top}"
    plain = re.fullmatch(rf"(?:(?:max|min|avg) by \([\w, ]*\) \()?({SELECTOR})\)?", text)
    if plain:
        name = plain.group(1).split("{")[0]
        return None if name in bounded_names(unit) else f"{name} is not declared a {unit} metric"
    part = re.fullmatch(rf"({SELECTOR}) / \(({SELECTOR}) \+ ({SELECTOR})\)", text)
    if part and part.group(1) == part.group(2):
        return None
    return "not of a form that stays in range"


def verl_families() -> set[str]:
    """Metric-name regexes of the key families verl names at run time (see keys.families_in_verl)."""
    from verl_rl_insight.dashboards.training import metric_regex

    return {metric_regex(regex) for _, _, regex, _ in keys.families_in_verl()}


def problems(
    dashboards: Mapping[str, Any], known: set[str], trainer_names: set[str], families: set[str] | None = None
) -> list[str]:
    found = []
    pool = known | trainer_names
    families = verl_families() if families is None else families
    for file, dashboard in dashboards.items():
        for kind, text in queries(dashboard):
            if kind == "traceql":
                if not TRACE_ID.fullmatch(text):
                    found += [f"{file}: TraceQL {text}: {problem}" for problem in traceql.check(text)]
                continue
            names = set(METRIC_TOKEN.findall(text))
            server_wide = bool(names) and all(n.startswith(SERVER_WIDE) for n in names)  # the hub's own: no run
            if (
                kind == "promql"
                and not server_wide
                and ('project=~"$project"' not in text or 'experiment_name=~"$experiment_name"' not in text)
            ):
                found.append(f"{file}: query does not filter on project and experiment_name: {text}")
            for op, quoted in NAME_MATCHER.findall(text):
                regex = unquote(quoted)
                if op == "=~" and regex not in families and not any(re.fullmatch(regex, name) for name in pool):
                    found.append(f"{file}: {regex} matches no metric anything produces: {text}")
            for name in METRIC_TOKEN.findall(NAME_MATCHER.sub("", text)):
                if name not in pool:
                    found.append(f"{file}: {name} is produced by nothing: {text}")
        for panel in every_panel(dashboard):
            if panel["type"] == "traces":
                for t in panel.get("targets", []):
                    if not TRACE_ID.fullmatch(t.get("query", "")):
                        found.append(
                            f"{file}: traces panel {panel['title']!r} is fed by a search "
                            f"({t.get('query')}); a Traces panel renders one trace by its ID"
                        )
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            if unit in PERCENT_UNITS:
                for t in panel.get("targets", []):
                    why = percent_problem(t["expr"], unit)
                    if why:
                        found.append(f"{file}: percent panel {panel['title']!r} could pass 100 %: {why}: {t['expr']}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_rl_insight.dashboards.generate")
    parser.add_argument("--check", action="store_true", help="fail when the JSON is stale or a query is wrong")
    parser.add_argument("--out", default=str(DASHBOARDS_DIR), help="folder to write the JSON to")
    args = parser.parse_args(argv)
    from verl_rl_insight.dashboards.build import build
    from verl_rl_insight.dashboards.catalogue import known_names

    dashboards = build()
    found = problems(dashboards, known_names(), verl_keys())
    out = Path(args.out)
    if args.check:
        for file, dashboard in dashboards.items():
            path = out / file
            if not path.exists() or path.read_text() != render(dashboard):
                found.append(f"{path} is stale: run python -m verl_rl_insight.dashboards.generate")
        extra = sorted(p.name for p in out.glob("*.json") if p.name not in dashboards)
        found += [f"{out / name} is generated by nothing: remove it" for name in extra]
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    if found:
        for line in found:
            print(line, file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for file, dashboard in dashboards.items():
        (out / file).write_text(render(dashboard))
    print(f"wrote {len(dashboards)} dashboards to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
