"""``rl-insight report --project P --experiment E [--compare E2,E3] [--steps A:B] [--samples] -o run.html``:
the run explorer's run page and the pages of its findings' steps as ONE self-contained HTML file
(the page's HTML, JavaScript and CSS inlined, and the API's answers as ``window.RL_INSIGHT_REPORT``),
for a pull request or a chat: it opens from disk with no server and no network.

What it shares is what the page shows and nothing more: the run and the compared runs, no other
run's name (the runs list and each page's ``others`` are cut to them); no run card unless
``--card``, and with it only the keys where the runs differ (``contract/run_card.differences``);
samples (prompts and responses) only with ``--samples``: they can be private. The file is this
user's only (0600), written to a new temporary name beside ``-o`` (``O_CREAT | O_EXCL``, never
through a link) and renamed over it: a link planted at ``-o`` is replaced, not followed."""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.resources
import json
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from verl_rl_insight.commands.api import call, common_options, server
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.timeline.command import steps_range
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.run_card import ABSENT, Json, differences
from verl_rl_insight.contract.runs import Run

API = paths.EXPLORER
KEYS_PER_REQUEST = 64  # the API's bound
MAX_STEP_PAGES = 50  # step pages in one report: the findings' first and last steps, the first 50
STATIC = paths.EXPLORER_STATIC
NONE = "'none'"  # a CSP source list that allows nothing
Answer = dict[str, object]
_SCRIPT = re.compile(r'<script\b[^>]*\bsrc="' + re.escape(STATIC) + r'([\w.\-]+)"[^>]*>\s*</script>')
_STYLE = re.compile(r'<link\b[^>]*\bhref="' + re.escape(STATIC) + r'([\w.\-]+)"[^>]*>')


def asset(name: str) -> str | None:
    """A file of the page (``server/explorer/static/``), or None when the package has none."""
    folder = importlib.resources.files("verl_rl_insight.server.explorer").joinpath("static")
    item = folder.joinpath(name)
    return item.read_text(encoding="utf-8") if item.is_file() else None


def asset_names() -> list[str]:
    folder = importlib.resources.files("verl_rl_insight.server.explorer").joinpath("static")
    if not folder.is_dir():
        return []
    return sorted(item.name for item in folder.iterdir() if item.is_file())


def _shell() -> str:
    """The page's HTML shell; without one (an install without the page's files), one that loads every
    script and style of the folder."""
    shell = asset("explorer.html")
    if shell is not None:
        return shell
    names = asset_names()
    styles = "".join(f'<link rel="stylesheet" href="{STATIC}{n}">' for n in names if n.endswith(".css"))
    scripts = "".join(f'<script src="{STATIC}{n}"></script>' for n in names if n.endswith(".js"))
    head = f'<!doctype html><html><head><meta charset="utf-8">{styles}</head>'
    return f'{head}<body><div id="app"></div>{scripts}</body></html>'


def script_text(text: str) -> str:
    """Text that cannot end the <script> element it sits in (``</script>``, ``<!--``)."""
    return text.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT").replace("<!--", "<\\!--")


def data_json(data: Mapping[str, object]) -> str:
    """JSON for inside <script>: every ``<`` escaped (``</script>`` in a response is text, not the end)."""
    return (
        json.dumps(data, allow_nan=False)
        .replace("<", "\\u003c")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def html(data: Mapping[str, object]) -> str:
    """The page with its styles inlined where they were, its scripts inlined at the end of the body
    in their order (where ``defer`` would have run them: after the page is parsed), the data first."""
    missing: list[str] = []
    scripts: list[str] = []

    def inline(name: str) -> str:
        text = asset(name)
        if text is None:
            missing.append(name)
            return ""
        return text

    def style(match: re.Match[str]) -> str:
        return "<style>" + inline(match.group(1)).replace("</style", "<\\/style") + "</style>"

    def script(match: re.Match[str]) -> str:
        scripts.append("<script>" + script_text(inline(match.group(1))) + "</script>")
        return ""

    page = _SCRIPT.sub(script, _STYLE.sub(style, _shell()))
    if missing:
        raise CliError(f"the explorer page's files are missing from this install: {', '.join(missing)}", code=PROBLEMS)
    tail = f"<script>window.RL_INSIGHT_REPORT = {data_json(data)};</script>" + "".join(scripts)
    at = page.rfind("</body>")
    page = page[:at] + tail + page[at:] if at >= 0 else page + tail
    meta = f'<meta http-equiv="Content-Security-Policy" content="{report_csp(page)}">'
    head = re.search(r"<head\b[^>]*>", page)
    return page[: head.end()] + meta + page[head.end() :] if head else meta + page


def report_csp(page: str) -> str:
    """The report's Content-Security-Policy: its own inline scripts and styles only (each by its
    SHA-256), no request anywhere (``default-src 'none'``, ``connect-src 'none'``), images from
    ``data:`` only: text a run logged cannot run or load anything, also opened from disk."""

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(t.encode()).digest()).decode()}'" for t in found)

    return (
        f"default-src 'none'; script-src {hashes('script') or NONE}; style-src {hashes('style') or NONE}; "
        "img-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )


def _list(answer: object, name: str) -> list[object]:
    found = answer.get(name) if isinstance(answer, dict) else None
    return found if isinstance(found, list) else []


def _object(answer: object, name: str) -> dict[str, object]:
    found = answer.get(name) if isinstance(answer, dict) else None
    return found if isinstance(found, dict) else {}


def _get(base: str, token: str | None, path: str, **query: str) -> Answer:
    answer = call("GET", f"{base}{API}/{path}?{urllib.parse.urlencode(query)}", token, timeout_s=60)
    if not isinstance(answer, dict):
        raise CliError(f"the server's {path} answer is not an object", code=PROBLEMS)
    return answer


def curves(base: str, token: str | None, run: Run, keys: list[str], steps: str) -> Answer:
    """Every key's curve, 64 keys a request, joined on the run's steps."""
    merged: Answer = {"steps": [], "times": [], "series": {}}
    series: dict[str, object] = {}
    nonfinite: dict[str, object] = {}
    for i in range(0, len(keys), KEYS_PER_REQUEST):
        part = _get(base, token, "curves", project=run[0], experiment_name=run[1],
                    keys=",".join(keys[i : i + KEYS_PER_REQUEST]), steps=steps)  # fmt: skip
        merged["steps"], merged["times"] = _list(part, "steps"), _list(part, "times")
        series.update(_object(part, "series"))
        nonfinite.update(_object(part, "nonfinite"))
    merged["series"] = series
    if nonfinite:
        merged["nonfinite"] = nonfinite
    return merged


def finding_steps(findings: Iterable[object], first: int | None, last: int | None) -> list[int]:
    """The first and last step of each finding, within --steps, the first MAX_STEP_PAGES."""
    steps: set[int] = set()
    for finding in findings:
        if isinstance(finding, dict):
            for name in ("first_step", "last_step"):
                step = finding.get(name)
                if isinstance(step, int) and (first is None or step >= first) and (last is None or step <= last):
                    steps.add(step)
    return sorted(steps)[:MAX_STEP_PAGES]


def profiled_steps(base: str, token: str | None, run: Run, first: int | None, last: int | None) -> list[int]:
    """The steps of the run whose per-rank profile summary the server holds (rl-insight profile),
    within --steps, the newest 10: their pages show the ranks."""
    query = urllib.parse.urlencode({"project": run[0], "experiment_name": run[1]})
    try:
        listed = call("GET", f"{base}{paths.PROFILES}?{query}", token)
    except CliError:  # a server without profile requests: the report goes on without
        return []
    steps = {
        int(step)
        for record in listed.get("profiles", [])
        if isinstance(record, dict)
        for step in (record.get("summaries") or {})
        if str(step).isdigit() and (first is None or int(step) >= first) and (last is None or int(step) <= last)
    }
    return sorted(steps)[-10:]


def collect(args: argparse.Namespace, base: str, token: str | None) -> Answer:
    """The API's answers the page draws the report from (EXPLORER_API.md says the shape)."""
    first, last = args.steps or (None, None)
    window = f"{'' if first is None else first}:{'' if last is None else last}" if args.steps else ""
    run = (args.project, args.experiment)
    page = _get(base, token, "run", project=run[0], experiment_name=run[1])
    keys = [k for k in _list(page, "keys") if isinstance(k, str)]
    data: Answer = {"runs": _get(base, token, "runs"), "run": page, "curves": curves(base, token, run, keys, window)}
    compared: Answer = {}
    for other in args.compare or []:
        other_page = _get(base, token, "run", project=run[0], experiment_name=other)
        other_keys = [k for k in _list(other_page, "keys") if isinstance(k, str) and k in keys]
        compared[other] = {"run": other_page, "curves": curves(base, token, (run[0], other), other_keys, window)}
    if compared:
        data["compare"] = compared
    confine(data, run, args.compare or [], args.card)
    steps: Answer = {}
    samples: Answer = {}
    wanted = finding_steps(_list(page, "findings"), first, last)
    wanted = sorted(set(wanted) | set(profiled_steps(base, token, run, first, last)))[: MAX_STEP_PAGES + 10]
    for step in wanted:
        steps[str(step)] = _get(base, token, "step", project=run[0], experiment_name=run[1], step=str(step))
        if args.samples:
            samples[str(step)] = _get(base, token, "samples", project=run[0], experiment_name=run[1], step=str(step))
    data["steps"] = steps
    if args.samples:
        data["samples"] = samples
    return data


def _card_of(page: object) -> Mapping[str, Json]:
    """The card a run answer carries (``{"card": {...}, "received": ...}``), or an empty one."""
    stored = page.get("card") if isinstance(page, dict) else None
    card = stored.get("card") if isinstance(stored, dict) else None
    return card if isinstance(card, dict) else {}


def confine(data: Answer, run: Run, compared: list[str], card: bool) -> None:
    """``data`` cut to what the report shares: the run and the compared runs only (the runs list,
    each page's ``others``), and their cards only with ``card``, as the keys where they differ."""
    allowed = {run[1], *compared}
    listed = _list(data.get("runs"), "runs")
    kept = [r for r in listed if isinstance(r, dict) and r.get("project") == run[0] and r.get("experiment") in allowed]
    data["runs"] = {"runs": kept}
    pages: dict[str, dict[str, object]] = {run[1]: _object(data, "run")}
    pages.update({name: _object(_object(data, "compare").get(name), "run") for name in compared})
    differ: dict[str, dict[str, Json]] = {name: {} for name in pages}
    if card:
        mine = _card_of(pages[run[1]])
        for name in compared:
            for d in differences(mine, _card_of(pages[name]))[0]:
                for owner, value in ((run[1], d.first), (name, d.second)):
                    if value is not ABSENT:
                        differ[owner][d.key] = value  # type: ignore[assignment]  # ABSENT left out above
    for name, page in pages.items():
        page["others"] = [e for e in _list(page, "others") if e in allowed]
        page["card"] = {"config": differ[name]} if card else None
        page["card_needs_token"] = False


def write_private(path: Path, text: str) -> int:
    """``text`` into ``path``, readable by this user only (0600): written to a new file of a
    random name in ``path``'s folder (``O_CREAT | O_EXCL | O_NOFOLLOW``: never an existing file or
    a link) and renamed over ``path``; a link at ``path`` is replaced, what it points to untouched."""
    data = text.encode("utf-8")
    folder = path.parent
    temporary = folder / f".{path.name[:100]}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return len(data)


def _sample_count(samples: object) -> int:
    """Samples, groups and validation generations the report holds."""
    answers = samples.values() if isinstance(samples, dict) else []
    return sum(len(_list(a, "samples")) + len(_list(a, "groups")) + len(_list(a, "validation")) for a in answers)


def run(args: argparse.Namespace) -> int:
    if args.card and not args.compare:
        raise CliError("--card shares the card's keys where the runs differ: it needs --compare E2")
    base, token = server(args)
    data = collect(args, base, token)
    if args.steps and not _list(data["curves"], "steps"):
        first, last = args.steps
        newest = _object(data, "run").get("step")
        raise CliError(
            f"{args.project}/{args.experiment} has no step in --steps {'' if first is None else first}:"
            f"{'' if last is None else last} (its newest step is {newest}); no report written",
            fix="give a range of its steps, or leave --steps out for all of them",
        )
    size = write_private(Path(args.output), html(data))
    n_steps, n_keys = len(_list(data["curves"], "steps")), len(_object(data["curves"], "series"))
    findings, pages = len(_list(data["run"], "findings")), len(_object(data, "steps"))
    samples = f"samples of {pages} steps" if args.samples else "no samples (--samples adds them)"
    samples += f", {len(_object(_object(data['run'], 'card'), 'config'))} card keys" if args.card else ", no card"
    if args.samples and not _sample_count(data.get("samples")):
        samples = (
            "no samples: the run kept none for its findings' steps (the trainer keeps them with "
            "+plugins.samples.enabled=true)"
            if pages
            else "no samples: the report has no step page (samples come with its findings' steps)"
        )
    print(
        f"{args.output}: {args.project}/{args.experiment}, {n_steps} steps, {n_keys} curves, {findings} findings, "
        f"{pages} step pages, {samples}, {size / 1e6:.1f} MB; opens from disk with no server"
    )
    return 0


def _experiments(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give experiments as E2,E3")
    return names


class Subcommands(Protocol):
    def add_parser(self, name: str, *, help: str) -> argparse.ArgumentParser: ...


def add_parsers(sub: Subcommands) -> None:
    parser = sub.add_parser(
        "report",
        help="one self-contained HTML file of a run: its curves, findings and their steps (opens with no server)",
    )
    parser.add_argument("--project", required=True)
    parser.add_argument("--experiment", required=True, help="the experiment_name")
    parser.add_argument("--compare", type=_experiments, help="other experiments of the project to overlay: E2,E3")
    parser.add_argument("--steps", type=steps_range, help="only these steps: A:B (both included), A:, :B")
    parser.add_argument("--samples", action="store_true", help="add the steps' samples (prompts and responses)")
    parser.add_argument(
        "--card", action="store_true", help="add the run cards' keys where the runs differ (needs --compare)"
    )
    parser.add_argument("-o", "--output", required=True, help="the HTML file to write (0600)")
    common_options(parser, top=True)
    parser.set_defaults(func=run)
