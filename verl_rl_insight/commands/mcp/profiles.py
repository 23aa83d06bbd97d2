"""``profile_analyze``: a folder of verl profiler traces read here (``rl-insight profile analyze``'s
own reading, hardened against hostile files), or a profiled step of a run: the summary its trainer
sent, and its traces read too where they are visible from here.

Reading files is this machine's business, not a remote agent's: over HTTP a folder is read only
under ``--traces-root`` (none by default), so a client cannot point the reader at the home folder.
One analysis runs at a time (a 200 MB trace takes a minute); another asks again later."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from verl_rl_insight.commands.mcp import answers as a
from verl_rl_insight.commands.mcp.access import Refused
from verl_rl_insight.commands.mcp.reader import Json, Reader
from verl_rl_insight.commands.traces.analysis import analyse
from verl_rl_insight.commands.traces.files import LOOKED_FOR, read_all, trace_files
from verl_rl_insight.commands.traces.schema import as_json
from verl_rl_insight.commands.traces.summary import BadTrace
from verl_rl_insight.contract.runs import Run

JOBS = 4  # reading processes at most (the machine is the user's: an agent's question is not a batch job)
_one_at_a_time = threading.Lock()


def allowed(folder: Path, root: Path | None) -> Path:
    """``folder`` resolved; refused when a root is set and the folder is outside it."""
    try:
        resolved = folder.expanduser().resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a name too long, a loop of links
        raise Refused(f"directory: {str(folder)[:200]!r} is no folder to read: {exc}") from None
    if root is not None and not resolved.is_relative_to(root.resolve()):
        raise Refused(f"directory: {str(folder)[:200]} is outside --traces-root {root}: this MCP server reads none")
    return resolved


def read_folder(folder: Path, step: int | None, root: Path | None = None) -> Json:
    """``profile analyze --json`` of ``folder`` (its step ``step`` where it holds several); under a
    root, a file that is a link to somewhere outside it is left out."""
    if not _one_at_a_time.acquire(blocking=False):
        raise Refused("another profile analysis is running here: ask again when it has answered")
    try:
        paths = [p for p in trace_files(folder) if root is None or p.resolve().is_relative_to(root.resolve())]
        if not paths:
            raise BadTrace(str(folder), f"no trace of verl's profiler in it (looked for {LOOKED_FOR})")
        view = analyse(read_all(paths, min(JOBS, os.cpu_count() or 1)), step)
    except BadTrace as exc:
        raise Refused(str(exc)) from None
    except (OSError, ValueError) as exc:  # a name too long, a folder that went away while read
        raise Refused(f"directory: {str(folder)[:200]!r} could not be read: {exc}") from None
    finally:
        _one_at_a_time.release()
    found: Json = json.loads(json.dumps(as_json(view)))  # as an agent receives it: plain JSON
    return found


def profile_analyze(
    reader: Reader,
    directory: str | None,
    run: Run | None,
    step: int | None,
    root: Path | None,
    files_allowed: bool,
) -> a.Profile:
    reader.check()  # a wrong credential reads no folder either
    # the folders under --traces-root are every run's: over HTTP only the token reads them, a run
    # credential gets its own step's summary (the server's answer) and no file
    files_allowed = files_allowed and not (reader.credential.over_http and reader.credential.is_run_credential)
    if directory is not None:
        if reader.credential.over_http and reader.credential.is_run_credential:
            raise Refused("directory: over HTTP a run credential reads no trace folder (they hold every run's)")
        if not files_allowed:
            raise Refused(
                "directory: this MCP server reads no trace folder (over HTTP: start it with --traces-root DIR)"
            )
        folder = allowed(Path(directory), root)
        read = read_folder(folder, step, root)
        return a.Profile(source="directory", where=str(folder), analysis=read, summary=None, command=None)
    if run is None or step is None:
        raise Refused("give directory, or project, experiment and step (a profiled step of a run)")
    answer = reader.step(run, step)
    summary = answer.get("profile")
    trace_dir = answer.get("trace_dir")
    command = answer.get("profile_analyze")
    if not isinstance(summary, dict):
        raise Refused(
            f"step {step} of {run[0]}/{run[1]} was not profiled (request_profile asks the running trainer for a step)"
        )
    analysis: Json | None = None
    if isinstance(trace_dir, str) and files_allowed:
        try:
            folder = allowed(Path(trace_dir), root)
            analysis = read_folder(folder, step, root) if folder.is_dir() else None
        except Refused:  # outside the root, or unreadable here: the trainer's summary still answers
            analysis = None
    return a.Profile(
        source="server",
        where=trace_dir if isinstance(trace_dir, str) else f"{run[0]}/{run[1]} step {step}",
        analysis=analysis,
        summary=summary,
        command=command if isinstance(command, str) else None,
    )
