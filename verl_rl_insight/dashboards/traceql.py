"""TraceQL as Grafana sends it to Tempo: the run filter, the variables interpolated the way Grafana
does, and a check of the string literals Tempo's parser would refuse.

Grafana's ``${var:regex}`` escapes regex characters with a backslash (``qwen2.5`` -> ``qwen2\\.5``,
``a/b`` -> ``a\\/b``) and joins several values as ``(a|b)``. A TraceQL double-quoted string takes Go
escapes only (``\\.`` is "invalid char escape"), so the filter puts the regex in a backtick raw
string; Tempo before 2.7 matches ``=~`` as a substring, so it is anchored: experiment ``grpo`` does
not also show ``grpo_v2``. The one character such a filter cannot hold is a backtick.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

RUN_FILTER = "span.project =~ `^(${project:regex})$` && span.experiment_name =~ `^(${experiment_name:regex})$`"
# run names a check interpolates: dots, dashes, slashes, regex characters, a prefix of another, quotes
SAMPLE_RUNS = ("qwen2.5-7b", "a/b", "x+y(1)", "grpo", "grpo_v2", 'say "hi"', "back\\slash", "[x]{2}^$|?*")

_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")
_GO_ESCAPE = re.compile(r'\\(?:[abfnrtv\\\'"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3})')
_REGEX_CHARS = re.compile(r"[\\^$*+?.()|\[\]{}/]")


def grafana_regex(values: Iterable[str]) -> str:
    """What Grafana's ``regex`` format makes of the selected values."""
    escaped = [_REGEX_CHARS.sub(lambda m: "\\" + m.group(0), value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(query: str, selected: Mapping[str, list[str]]) -> str:
    """``query`` with ``${var:regex}``, ``${var}`` and ``$var`` replaced as Grafana replaces them."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        values = selected.get(name, [""])
        if match.group(2) == "regex":
            return grafana_regex(values)
        return values[0] if len(values) == 1 else "{" + ",".join(values) + "}"

    return _VARIABLE.sub(value, query)


def string_problems(query: str) -> list[str]:
    """The string literals Tempo's parser would refuse: a double-quoted string with an escape Go
    does not know, one left open, a raw string left open."""
    problems = []
    i = 0
    while i < len(query):
        quote = query[i]
        if quote == '"':
            j = i + 1
            while j < len(query) and query[j] != '"':
                if query[j] == "\\":
                    escape = _GO_ESCAPE.match(query, j)
                    if escape is None:
                        problems.append(f"invalid char escape {query[j : j + 2]!r} in a double-quoted string")
                        j += 2
                        continue
                    j = escape.end()
                    continue
                j += 1
            if j >= len(query):
                problems.append("a double-quoted string is not closed")
            i = j + 1
        elif quote == "`":
            j = query.find("`", i + 1)
            if j < 0:
                problems.append("a raw string is not closed")
                break
            i = j + 1
        else:
            i += 1
    return problems


def raw_matchers(query: str) -> dict[str, str]:
    """attribute -> regex of each ``attribute =~ `regex``` in an interpolated query."""
    return {m.group(1): m.group(2) for m in re.finditer(r"([\w.]+)\s*=~\s*`([^`]*)`", query)}


def check(query: str, runs: Iterable[str] = SAMPLE_RUNS) -> list[str]:
    """Why ``query`` is not valid for some run a user can select (empty: it is valid for all of
    them, and selecting a run matches that run and no other)."""
    if "${trace_id}" in query:
        return string_problems(query)
    if RUN_FILTER not in query:
        return [f"does not filter on the run with {RUN_FILTER}"]
    names = list(runs)
    problems = []
    for run in names:
        text = interpolate(query, {"project": [run], "experiment_name": [run]})
        problems += [f"{p} when {run!r} is selected" for p in string_problems(text)]
        for attribute, regex in raw_matchers(text).items():
            if attribute not in ("span.project", "span.experiment_name"):
                continue
            try:
                pattern = re.compile(regex)
            except re.error as exc:
                problems.append(f"{attribute}: {regex!r} is not a regex ({exc}) when {run!r} is selected")
                continue
            wrong = [other for other in names if bool(pattern.search(other)) != (other == run)]
            if wrong:
                problems.append(f"{attribute} for {run!r} also or not matches {wrong}")
    both = interpolate(query, {"project": names[:2], "experiment_name": names[:2]})
    problems += [f"{p} with two runs selected" for p in string_problems(both)]
    return problems
