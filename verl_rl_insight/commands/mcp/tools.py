"""The read tools' answers, made from the server's: what ``app.py`` registers as MCP tools. Each is
a function of a ``Reader`` and the tool's checked arguments; a refusal is ``Refused`` (the tool
error the agent reads)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from pydantic import JsonValue

from verl_rl_insight.commands.mcp import answers as a
from verl_rl_insight.commands.mcp.access import Refused
from verl_rl_insight.commands.mcp.curves import downsample, parted, smooth
from verl_rl_insight.commands.mcp.reader import Json, Reader
from verl_rl_insight.contract.redaction import redact_text
from verl_rl_insight.contract.run_card import card_keys
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.samples import SampleRow

STATES = ("running", "idle", "finished")
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
SINCE = re.compile(r"([1-9][0-9]{0,5})([smhdw])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
COMPARED_KEYS = 256  # keys compare_runs reads at most (both runs' shared keys, in name order)
SAMPLE_CHARS = 2000  # a prompt or response's characters kept


def _json(value: JsonValue) -> Json:
    return value if isinstance(value, dict) else {}


def _list(value: JsonValue) -> list[Json]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: JsonValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: JsonValue) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _text(value: JsonValue) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: JsonValue) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def since_seconds(since: str) -> float:
    found = SINCE.fullmatch(since)
    if found is None:
        raise Refused(f"since: {since[:40]!r} is not a duration like 30d, 12h, 90m")
    return int(found.group(1)) * UNITS[found.group(2)]


def list_runs(reader: Reader, project: str | None, state: str | None, since: str | None) -> a.RunList:
    if state is not None and state not in STATES:
        raise Refused(f"state: {state[:40]!r} is none of {', '.join(STATES)}")
    newest = time.time() - since_seconds(since) if since else None
    rows = []
    for row in reader.runs():
        if project is not None and row.get("project") != project:
            continue
        if state is not None and row.get("state") != state:
            continue
        at = _float(row.get("last_step_time"))
        if newest is not None and (at is None or at < newest):
            continue
        rows.append(a.RunRow.model_validate(row))
    return a.RunList(runs=rows, total=len(rows))


def _incidents(answer: Json) -> list[a.Incident]:
    return [a.Incident.model_validate(i) for i in _list(answer.get("incidents"))]


def _counts(findings: Sequence[Json]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITY_ORDER, 0)
    for f in findings:
        severity = str(f.get("severity"))
        counts[severity] = counts.get(severity, 0) + 1
    return counts


def _card(kept: Json) -> a.Card:
    card = _json(kept.get("card"))
    git = _json(card.get("git"))
    versions = _json(card.get("versions"))
    command = card.get("command")
    return a.Card(
        versions={str(k): str(v) for k, v in versions.items()},
        commit=_text(git.get("commit")),
        dirty=dirty if isinstance(dirty := git.get("dirty"), bool) else None,
        command=_strings(command),
        nodes=_int(card.get("nodes")),
        gpus_per_node=_int(card.get("gpus_per_node")),
        model=_text(card.get("model")),
        received=_float(kept.get("received")),
    )


def run_summary(reader: Reader, run: Run, config_filter: str | None) -> a.RunSummary:
    answer = reader.run(run)
    kept = answer.get("card")
    card, note, config = None, None, []
    if isinstance(kept, dict):
        card = _card(kept)
        flat = card_keys({"config": _json(kept.get("card")).get("config")}) if kept.get("card") else {}
        word = (config_filter or "").lower()
        config = [a.ConfigEntry(key=k, value=v) for k, v in flat.items() if word in k.lower()]
        total = len(flat)
    else:
        total = 0
        note = (
            "the run card (config, command line, versions) needs the server's token"
            if answer.get("card_needs_token")
            else "the run sent no card (its trainer sends one with its first step)"
        )
    findings = _list(answer.get("findings"))
    return a.RunSummary(
        project=run[0],
        experiment=run[1],
        state=str(answer.get("state")),
        step=_int(answer.get("step")),
        last_step_time=_last_step_time(reader, run),
        keys=len(_strings(answer.get("keys"))),
        findings=_counts(findings),
        incidents=_incidents(answer),
        marks=[a.Mark.model_validate(m) for m in _list(answer.get("marks"))],
        card=card,
        card_note=note,
        config=config,
        config_keys=total,
    )


def _last_step_time(reader: Reader, run: Run) -> float | None:
    for row in reader.runs():
        if (row.get("project"), row.get("experiment")) == run:
            return _float(row.get("last_step_time"))
    return None


def verdict(incidents: Sequence[a.Incident]) -> str:
    if not incidents:
        return "no finding: nothing the detectors know of shows in this run"
    worst = incidents[0]
    more = f"; {len(incidents) - 1} more incident(s)" if len(incidents) > 1 else ""
    return f"{worst.severity} {worst.kind} from step {worst.first_step}: {worst.headline}{more}"


def diagnose(reader: Reader, run: Run, first: int | None, last: int | None) -> a.Diagnosis:
    """The run's findings and incidents as the server's walk holds them (the detectors diagnose runs),
    those over steps ``first``..``last`` where given; each incident names its findings by place."""
    answer = reader.run(run)
    findings = _list(answer.get("findings"))
    kept = [
        i
        for i, f in enumerate(findings)
        if (first is None or (_int(f.get("last_step")) or 0) >= first)
        and (last is None or (_int(f.get("first_step")) or 0) <= last)
    ]
    place = {old: new for new, old in enumerate(kept)}
    incidents = []
    for incident in _incidents(answer):
        parts = [place[n] for n in incident.findings if n in place]
        if parts:
            incidents.append(incident.model_copy(update={"findings": parts}))
    return a.Diagnosis(
        project=run[0],
        experiment=run[1],
        step=_int(answer.get("step")),
        state=str(answer.get("state")),
        verdict=verdict(incidents),
        incidents=incidents,
        findings=[a.Finding.model_validate(findings[i]) for i in kept],
        marks=[a.Mark.model_validate(m) for m in _list(answer.get("marks"))],
    )


def get_curves(
    reader: Reader,
    run: Run,
    keys: Sequence[str],
    first: int | None,
    last: int | None,
    max_points: int,
    smoothing: float,
) -> a.Curves:
    if first is not None and last is not None and first > last:
        raise Refused(f"first_step: {first} is after last_step {last}")
    logged = set(_strings(reader.run(run).get("keys")))
    wanted = list(dict.fromkeys(keys))
    missing = [k for k in wanted if k not in logged]
    present = [k for k in wanted if k in logged]
    data = reader.curves(run, present, first, last) if present else None
    each = max(8, max_points // max(1, len(present)))
    curves, downsampled = [], bool(data and data.stride > 1)
    for key in present:
        assert data is not None
        values = data.series[key]
        shown = smooth(values, smoothing) if smoothing else values
        finite = [v for v in values if v is not None]
        points = downsample(data.steps, shown, each)
        downsampled |= len(points) < len(finite)
        curves.append(
            a.Curve(
                key=key,
                points=points,
                steps=len(finite),
                first=finite[0] if finite else None,
                last=finite[-1] if finite else None,
                low=min(finite) if finite else None,
                high=max(finite) if finite else None,
                nonfinite_steps=[data.steps[i] for i in data.nonfinite.get(key, []) if i < len(data.steps)],
            )
        )
    return a.Curves(
        project=run[0],
        experiment=run[1],
        smoothing=smoothing,
        max_points=max_points,
        points=sum(len(c.points) for c in curves),
        downsampled=downsampled,
        missing=missing,
        curves=curves,
    )


def compare_runs(reader: Reader, project: str, first: str, second: str, keys: Sequence[str], top: int) -> a.Comparison:
    """The config keys two runs were started with differently (their cards) and the logged keys whose
    curves part the most, with the step they part at."""
    one, two = (project, first), (project, second)
    answer = reader.run(two, diff_from=first)
    other = reader.run(one)
    diff = answer.get("card_diff")
    differences, note, by_nature = None, None, 0
    if isinstance(diff, dict):
        rows = diff.get("differences")
        differences = [
            a.ConfigDifference(key=str(r[0]), first=r[1], second=r[2])
            for r in (rows if isinstance(rows, list) else [])
            if isinstance(r, list) and len(r) == 3
        ]
        by_nature = _int(diff.get("by_nature")) or 0
    elif answer.get("card_needs_token"):
        note = "the configs need the server's token (the run cards hold the command lines)"
    else:
        note = "one of the runs sent no card: no config to compare"
    shared = sorted(set(_strings(other.get("keys"))) & set(_strings(answer.get("keys"))))
    chosen = [k for k in keys if k in shared] if keys else shared[:COMPARED_KEYS]
    parted_keys = []
    if chosen:
        a_data, b_data = reader.curves(one, chosen, None, None), reader.curves(two, chosen, None, None)
        parted_keys = parted(chosen, a_data.steps, a_data.series, b_data.steps, b_data.series)
    return a.Comparison(
        project=project,
        first=first,
        second=second,
        config_differences=differences,
        config_note=note,
        differ_by_nature=by_nature,
        diverging=[
            a.Divergence(key=p.key, parts_at=p.parts_at, distance=p.distance, first_last=p.a_last, second_last=p.b_last)
            for p in parted_keys[:top]
        ],
        keys_compared=len(chosen),
    )


def _spans(lane: Json) -> list[tuple[str, float, float]]:
    out = []
    for span in _list(lane.get("spans")):
        start, end = _float(span.get("start")), _float(span.get("end"))
        if start is not None and end is not None:
            out.append((str(span.get("name")), start, end))
    return out


def step_detail(reader: Reader, run: Run, step: int) -> a.StepDetail:
    answer = reader.step(run, step)
    t0 = _float(answer.get("start")) or 0.0
    phases, lanes = [], []
    for lane in _list(answer.get("lanes")):
        spans = _spans(lane)
        if lane.get("kind") == "trainer":
            phases += [a.Phase(name=n, start_s=s - t0, duration_s=e - s) for n, s, e in spans]
        lanes.append(
            a.Lane(
                lane=str(lane.get("lane")),
                kind=str(lane.get("kind")),
                node=_text(lane.get("node")),
                spans=len(spans),
                busy_s=sum(e - s for _, s, e in spans),
                end_s=max((e for _, _, e in spans), default=t0) - t0,
            )
        )
    slowest = answer.get("slowest_replica")
    profile = answer.get("profile")
    return a.StepDetail(
        project=run[0],
        experiment=run[1],
        step=step,
        duration_s=_float(answer.get("duration_s")),
        validation=bool(answer.get("validation")),
        phases=phases,
        lanes=lanes,
        slowest_replica=slowest if isinstance(slowest, dict) else None,
        long_tail_s=_float(answer.get("long_tail_s")),
        idle_share=_float(answer.get("idle_share")),
        moved_with=_list(answer.get("moved_with")),
        findings=_list(answer.get("findings")),
        hardware=_list(answer.get("hardware")),
        profile=profile if isinstance(profile, dict) else None,
        profile_analyze=_text(answer.get("profile_analyze")),
    )


def _cut(text: JsonValue, limit: int = SAMPLE_CHARS) -> str:
    """A sample's text with its secrets masked (an API key pasted into a prompt), kept to ``limit``."""
    shown = redact_text(str(text if text is not None else ""))
    return shown if len(shown) <= limit else shown[:limit] + " ..."


def _masked(value: JsonValue) -> JsonValue:
    """Every text in ``value`` as ``_cut`` keeps it (a group's responses, a ground truth)."""
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


def _masked_rows(value: JsonValue) -> list[Json]:
    return [_json(_masked(row)) for row in _list(value)]


def samples(reader: Reader, run: Run, step: int) -> a.Samples:
    answer = reader.samples(run, step)
    rows = [
        SampleRow(
            kind=str(s.get("kind")),
            rank=_int(s.get("rank")),
            index=_int(s.get("index")),
            score=_float(s.get("score")),
            length=_int(s.get("length")),
            mismatch=_float(s.get("mismatch")),
            finish_reason=_text(s.get("finish_reason")),
            data_source=_text(s.get("data_source")),
            prompt=_cut(s.get("prompt")),
            response=_cut(s.get("response")),
        )
        for s in _list(answer.get("samples"))
    ]
    groups, validation = _masked_rows(answer.get("groups")), _masked_rows(answer.get("validation"))
    filtered = _masked_rows(answer.get("filtered"))
    empty = not (rows or groups or validation or filtered)
    note = (
        "no sample kept for this step (the samples plugin is off by default: plugins.samples.enabled=true)"
        if empty
        else f"texts as the trainer kept them, secrets masked, each cut to {SAMPLE_CHARS} characters"
    )
    return a.Samples(
        project=run[0],
        experiment=run[1],
        step=step,
        samples=rows,
        groups=groups,
        validation=validation,
        filtered=filtered,
        note=note,
    )


def search_keys(reader: Reader, run: Run, word: str) -> a.KeyMatches:
    words = [w for w in re.split(r"[\s,]+", word.lower()) if w]
    if not words:
        raise Refused("word: give a word to look for (entropy, clip, response_length)")
    keys = _strings(reader.run(run).get("keys"))
    found = [k for k in keys if all(w in k.lower() for w in words)]
    return a.KeyMatches(project=run[0], experiment=run[1], word=word, keys=found, total=len(keys))
