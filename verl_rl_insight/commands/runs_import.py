"""``rl-insight runs import FILE|DIR``: a finished run kept beside the live ones, to compare against
(the verl docs' baseline curves, last week's run, a paper's public log).

Each file is read here (``run_formats.py``: verl's file logger JSONL, verl's console log or wandb's
``files/output.log`` of it, a wandb history export, a ``runs export`` CSV), sent to the server
(``POST /api/v1/runs/import``), which writes it into its Prometheus with the run's own steps and,
where the file has them, its own times; where it has none (a verl JSONL or console log), a step a
minute ending a day before the import. A directory imports every run file in it, one run each.
The command then waits until Prometheus has loaded the run (about a minute) so that the next command
sees it; ``--no-wait`` does not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from verl_rl_insight.commands.api import SubParsers, call, common_options, server
from verl_rl_insight.commands.checks import PROBLEMS, REFUSED, CliError
from verl_rl_insight.commands.run_formats import MAX_FILE_BYTES, RunFile, RunFileError, read_file
from verl_rl_insight.contract import paths
from verl_rl_insight.contract.run_card import MAX_CARD_BYTES
from verl_rl_insight.contract.run_import import (
    MAX_IMPORT_BODY_BYTES,
    MAX_IMPORT_KEYS,
    ImportBody,
    ImportedStep,
)

SYNTHETIC_STEP_S = 60.0
SYNTHETIC_END_S = 86400.0  # synthesized times end this long before the import
WAIT_S = 150.0
RUN_SUFFIXES = (".jsonl", ".json", ".csv", ".log", ".txt")
NOT_RUNS = frozenset(("wandb-metadata.json", "wandb-summary.json", "debug.log", "debug-internal.log"))
CARD_SUFFIXES = (".config.json", ".config.yaml")  # a run's config beside its file: <name>.config.json


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    return h.hexdigest()


def default_experiment(path: Path) -> str:
    """The file's name without its suffix; wandb's ``run-<date>-<id>/files/output.log`` by its run's folder."""
    if path.name == "output.log" and path.parent.name == "files" and path.parent.parent.name.startswith("run-"):
        return path.parent.parent.name
    return path.stem


def body_of(path: Path, run: RunFile, project: str, experiment: str, now: float) -> ImportBody:
    keys = sorted({k for values in run.steps.values() for k in values})
    if len(keys) > MAX_IMPORT_KEYS:
        raise RunFileError(f"{path}: {len(keys)} keys, over the server's limit of {MAX_IMPORT_KEYS}")
    steps = list(run.steps)
    if run.times is not None:
        at, times = [run.times[s] for s in steps], "original"
        for i in range(1, len(at)):  # two steps logged within a millisecond keep their order
            at[i] = max(at[i], at[i - 1] + 0.001)
    else:
        end = math.floor((now - SYNTHETIC_END_S) / 60) * 60
        at, times = [end - (len(steps) - 1 - i) * SYNTHETIC_STEP_S for i in range(len(steps))], "synthesized"
    rows = tuple(ImportedStep(s, t, tuple(run.steps[s].get(k) for k in keys)) for s, t in zip(steps, at))
    return ImportBody(project, experiment, path.name, run.format, _digest(path), times, tuple(keys), rows)


def run_files(target: Path) -> list[Path]:
    """The file, or the run files in a directory and below (in a wandb run folder: its
    ``files/output.log``, not wandb's own logs, metadata or summary)."""
    if not target.is_dir():
        return [target]
    found = []
    for path in sorted(target.rglob("*")):
        inside = path.parts[len(target.parts) :]
        if not path.is_file() or path.suffix not in RUN_SUFFIXES or path.name in NOT_RUNS:
            continue
        if path.name.endswith((".source.json", *CARD_SUFFIXES)) or "logs" in inside[:-1]:
            continue
        found.append(path)
    return found


def card_beside(path: Path) -> Path | None:
    """The run's config kept with its file: ``<name>.config.json`` or ``.config.yaml`` beside it, or in a
    wandb run folder the ``files/config.yaml`` beside its ``output.log``; None when there is none."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    near = [path.with_name(stem + suffix) for suffix in CARD_SUFFIXES]
    if path.name == "output.log" and path.parent.name == "files":
        near.append(path.with_name("config.yaml"))
    return next((card for card in near if card.is_file()), None)


def card_of(path: Path, project: str, experiment: str) -> bytes:
    """The run's card from ``path``: a run card as verl-rl-insight keeps it, or verl's resolved config
    (YAML or JSON; wandb's ``files/config.yaml``, each key ``{value: ...}``, unwrapped)."""
    try:
        if path.stat().st_size > 4 * MAX_CARD_BYTES:
            raise CliError(f"card {path}: over {4 * MAX_CARD_BYTES >> 10} KiB, not a run's config", code=REFUSED)
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CliError(f"card {path}: not a readable YAML or JSON file ({str(exc)[:200]})", code=REFUSED) from None
    if not isinstance(loaded, dict):
        raise CliError(f"card {path}: expected a mapping (verl's config, or a run card)", code=REFUSED)
    if "config" in loaded and isinstance(loaded["config"], dict):
        card = dict(loaded)
    else:
        config = {
            k: v["value"] if isinstance(v, dict) and set(v) <= {"value", "desc"} else v
            for k, v in loaded.items()
            if k != "_wandb"
        }
        card = {"config": config}
    card.update({"project": project, "experiment_name": experiment})
    return json.dumps(card, default=str).encode()


def _wait(base: str, token: str | None, project: str, experiment: str) -> bool:
    query = urllib.parse.urlencode({"project": project, "experiment_name": experiment})
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        rows = call("GET", f"{base}{paths.RUN_IMPORTS}?{query}", token)["runs"]
        if rows and rows[0].get("loaded"):
            return True
        time.sleep(2.0)
    return False


def _line(answer: dict[str, Any], path: Path) -> str:
    run = answer["imported"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run["first_time"]))
    times = {"original": "its own times", "synthesized": "no times in the file: a step a minute"}.get(
        run["times"], f"its own times {run['times']} (older than Prometheus keeps)"
    )
    head = "already imported" if answer["added"] == 0 else "imported"
    return (
        f"{head} {run['project']}/{run['experiment_name']} from {path} ({run['format']}): steps "
        f"{run['first_step']}..{run['last_step']} ({run['steps']}), {run['keys']} keys, {answer['added']} values; "
        f"{times}, from {when}"
    )


def import_runs(args: argparse.Namespace) -> int:
    base, token = server(args)
    files = run_files(Path(args.path))
    if not files:
        raise CliError(f"{args.path}: no run files in it", code=REFUSED)
    if len(files) > 1 and args.experiment:
        raise CliError("--experiment names one run; a directory imports one run a file, each by its name", code=REFUSED)
    answers: list[dict[str, Any]] = []
    now = time.time()
    bodies = []
    stems = [default_experiment(path) for path in files]
    for path, stem in zip(files, stems):  # every file read before one is sent: a bad one stops them all
        # two files of one name (history.jsonl, history.csv): each by its whole name
        experiment = args.experiment or (stem if stems.count(stem) == 1 else path.name)
        try:
            body = body_of(path, read_file(path), args.project, experiment, now)
        except RunFileError as exc:
            raise CliError(str(exc), code=REFUSED) from None
        config = Path(args.card) if args.card else card_beside(path)
        bodies.append((path, body, card_of(config, args.project, experiment) if config is not None else None))
    for path, body, card in bodies:
        raw = json.dumps(body.as_json(), allow_nan=False).encode()
        if len(raw) > MAX_IMPORT_BODY_BYTES:
            raise CliError(
                f"{path}: {len(raw) >> 20} MiB to send, over the server's {MAX_IMPORT_BODY_BYTES >> 20} MiB",
                code=REFUSED,
            )
        answer = call("POST", base + paths.RUN_IMPORT, token, raw, timeout_s=360)
        if card is not None:
            answer["card_bytes"] = call("PUT", base + paths.RUN_CARD, token, card).get("bytes")
        answers.append(answer)
        if not args.json:
            print(_line(answer, path), flush=True)
    loaded = True
    if not args.no_wait:
        for answer in answers:
            run = answer["imported"]
            loaded = _wait(base, token, run["project"], run["experiment_name"]) and loaded
    if args.json:
        print(json.dumps({"runs": answers, "loaded": loaded if not args.no_wait else None}))
    elif not args.no_wait:
        print(
            "Prometheus has loaded them: compare on the run page (its compare boxes) or rl-insight runs diff"
            if loaded
            else f"Prometheus has not loaded them after {WAIT_S:.0f} s (it looks for new blocks about once a minute)"
        )
    return 0 if loaded else PROBLEMS


def add_parser(runs_sub: SubParsers) -> argparse.ArgumentParser:
    parser = runs_sub.add_parser(
        "import",
        help="a finished run from a file (verl's file or console log, a wandb export) kept beside the live ones",
        description="Keep a finished run beside the live ones: verl's file or console log, "
        "wandb's output.log or history export, a runs export.",
    )
    parser.add_argument("path", help=f"the run's file, or a folder of them (a file at most {MAX_FILE_BYTES >> 20} MiB)")
    parser.add_argument(
        "--project",
        required=True,
        help="its project: the live runs' it is compared with (the run page compares within one)",
    )
    parser.add_argument("--experiment", help="its experiment_name (default: the file's name)")
    parser.add_argument(
        "--card",
        help="its config: verl's resolved config (YAML/JSON, wandb's config.yaml) or a run card (default: "
        "<name>.config.json or .config.yaml beside the file, a wandb run's files/config.yaml)",
    )
    parser.add_argument("--no-wait", action="store_true", help="do not wait for Prometheus to load it")
    parser.set_defaults(func=import_runs)
    common_options(parser, top=True)
    return parser
