"""The MCP server: every tool with its typed arguments and the description an agent chooses it by,
the resources (the run card, what each finding means), on the official SDK (``mcp``: its
``MCPServer`` makes the JSON schemas from the signatures and the answer models, checks the
arguments, runs each tool in a worker thread and turns a ``ToolError`` into a tool error result).

Each call builds its ``Reader`` from the credential of that call (``access.py``), checks it, and
bounds its answer (``bounded.py``); a refusal is a tool error with the CLI's one line."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from verl_rl_insight import __version__
from verl_rl_insight.commands.mcp import answers as a
from verl_rl_insight.commands.mcp import docs, profiles, tools, writes
from verl_rl_insight.commands.mcp.access import Checks, Credential, Refused, from_header
from verl_rl_insight.commands.mcp.bounded import fit
from verl_rl_insight.commands.mcp.reader import Reader

Answer = TypeVar("Answer", bound=BaseModel)
log = logging.getLogger("verl_rl_insight.mcp")
Project = Annotated[str, Field(min_length=1, max_length=256, description="the run's project (trainer.project_name)")]
Experiment = Annotated[
    str, Field(min_length=1, max_length=256, description="the run's experiment_name (trainer.experiment_name)")
]
Step = Annotated[int, Field(ge=0, le=10**12, description="a trainer step")]
MaybeStep = Annotated[int | None, Field(ge=0, le=10**12)]
Key = Annotated[str, Field(min_length=1, max_length=256)]
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

INSTRUCTIONS = """\
rl-insight watches verl RL training runs. Start with list_runs; run_summary gives a run's state, card
and incidents; diagnose the findings with their steps, evidence and recommendation (read the resource
rl-insight://docs/findings for what each detector means). get_curves reads logged keys by step
(search_keys finds the key names); compare_runs puts two runs side by side; step_detail says why a
step was slow (phases, replicas, what moved with it); samples shows a step's rollouts;
profile_analyze reads a profiled step's GPU traces."""
READ_ONLY = " This server is read-only: mark_step and request_profile come with `rl-insight mcp --allow-write`."


@dataclass(frozen=True)
class Settings:
    base: str  # the rl-insight server, without credentials
    secret: str | None  # over stdio: the user's token or run credential; over HTTP: None (each request's own)
    over_http: bool
    allow_write: bool
    traces_root: Path | None  # over HTTP, the only folder trace directories are read under
    max_bytes: int
    debug: bool = False  # a tool's unexpected error logs its traceback (rl-insight --debug, RL_INSIGHT_DEBUG=1)


def build(settings: Settings) -> MCPServer:
    instructions = INSTRUCTIONS + ("" if settings.allow_write else READ_ONLY)
    server: MCPServer = MCPServer("rl-insight", instructions=instructions, version=__version__, log_level="WARNING")
    checks = Checks()

    def reader(ctx: Context) -> Reader:
        secret = settings.secret
        if settings.over_http:
            headers = ctx.headers or {}
            secret = from_header(headers.get("authorization") or headers.get("Authorization"))
        return Reader(settings.base, Credential(secret, settings.over_http), checks)

    def answer(make: Callable[[], Answer]) -> Answer:
        try:
            return fit(make(), settings.max_bytes)
        except Refused as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # a bug: one line for the agent, the traceback only with --debug
            log.warning("unexpected error in a tool", exc_info=settings.debug)
            raise ToolError(f"unexpected error: {type(exc).__name__}: {str(exc)[:300]}") from None

    @server.tool(annotations=READ)
    def list_runs(
        ctx: Context,
        project: Annotated[str | None, Field(max_length=256, description="only this project's runs")] = None,
        state: Annotated[Literal["running", "idle", "finished"] | None, Field(description="only runs in it")] = None,
        since: Annotated[
            str | None, Field(max_length=8, description="only runs with a step this recent: 30d, 12h")
        ] = None,
    ) -> a.RunList:
        """The runs the server knows, newest first: project, experiment, newest step, state, findings
        by severity. A run credential sees its own run only."""
        return answer(lambda: tools.list_runs(reader(ctx), project, state, since))

    @server.tool(annotations=READ)
    def run_summary(
        ctx: Context,
        project: Project,
        experiment: Experiment,
        config_filter: Annotated[
            str | None, Field(max_length=256, description="only the config keys holding this text (lr, clip)")
        ] = None,
    ) -> a.RunSummary:
        """One run at a glance: state, newest step, its incidents (headline, steps, recommendation),
        marks, how it was started (versions, commit, command, nodes x GPUs, model) and verl's resolved
        config (needs the server's token)."""
        return answer(lambda: tools.run_summary(reader(ctx), (project, experiment), config_filter))

    @server.tool(annotations=READ)
    def diagnose(
        ctx: Context,
        project: Project,
        experiment: Experiment,
        first_step: Annotated[MaybeStep, Field(description="only findings over steps from this one")] = None,
        last_step: Annotated[MaybeStep, Field(description="only findings over steps up to this one")] = None,
    ) -> a.Diagnosis:
        """Why a run went wrong: its incidents, the worst first (kind, steps, headline, the chain of
        signals in the order they moved, one recommendation) and their findings (detector, steps,
        evidence in figures, where to look), as `rl-insight diagnose` gives them."""
        return answer(lambda: tools.diagnose(reader(ctx), (project, experiment), first_step, last_step))

    @server.tool(annotations=READ)
    def get_curves(
        ctx: Context,
        project: Project,
        experiment: Experiment,
        keys: Annotated[
            list[Key], Field(min_length=1, max_length=256, description="verl's logged keys: critic/score/mean")
        ],
        first_step: MaybeStep = None,
        last_step: MaybeStep = None,
        max_points: Annotated[int, Field(ge=16, le=20_000, description="points in the answer, all keys")] = 2000,
        smoothing: Annotated[float, Field(ge=0, lt=1, description="EMA weight as the explorer's slider; 0: raw")] = 0,
    ) -> a.Curves:
        """Logged keys by step, within a point budget: each key's first, low, high and last values per
        bucket of steps survive downsampling (a spike is kept); says whether it was downsampled and
        which keys the run never logged (search_keys finds the names)."""
        run = (project, experiment)
        return answer(lambda: tools.get_curves(reader(ctx), run, keys, first_step, last_step, max_points, smoothing))

    @server.tool(annotations=READ)
    def compare_runs(
        ctx: Context,
        project: Project,
        first: Annotated[str, Field(min_length=1, max_length=256, description="the baseline's experiment_name")],
        second: Annotated[str, Field(min_length=1, max_length=256, description="the other experiment_name")],
        keys: Annotated[
            list[Key] | None, Field(max_length=256, description="keys to compare (default: all shared)")
        ] = None,
        top: Annotated[int, Field(ge=1, le=100, description="diverging keys returned")] = 10,
    ) -> a.Comparison:
        """Two runs of a project side by side: the config keys they were started with differently, and
        the logged keys whose curves diverge most, each with the step from which they stay apart."""
        return answer(lambda: tools.compare_runs(reader(ctx), project, first, second, keys or [], top))

    @server.tool(annotations=READ)
    def step_detail(ctx: Context, project: Project, experiment: Experiment, step: Step) -> a.StepDetail:
        """Why a step was slow: the trainer's phases with their times, every lane (trainer, each
        rollout replica), the slowest replica and the long tail, the keys that moved with its time,
        its GPUs' faults, the findings over it, and its profile when it was profiled."""
        return answer(lambda: tools.step_detail(reader(ctx), (project, experiment), step))

    @server.tool(annotations=READ)
    def samples(ctx: Context, project: Project, experiment: Experiment, step: Step) -> a.Samples:
        """A step's rollouts (prompts and responses, secrets masked): the worst and best scored, the
        largest log-prob mismatch, full GRPO groups, a validation step's generations, DAPO's dropped
        groups. Needs the token or the run's credential, and the samples plugin on."""
        return answer(lambda: tools.samples(reader(ctx), (project, experiment), step))

    @server.tool(annotations=READ)
    def profile_analyze(
        ctx: Context,
        directory: Annotated[str | None, Field(max_length=4096, description="a folder of verl profiler traces")] = None,
        project: Annotated[str | None, Field(max_length=256)] = None,
        experiment: Annotated[str | None, Field(max_length=256)] = None,
        step: MaybeStep = None,
    ) -> a.Profile:
        """A profiled step's GPU story: per RL phase and rank the GPU work, communication, host time
        and idle causes, the slowest rank and what held it, top kernels, memory peaks. Give a
        directory of traces, or a run's profiled step (its trainer's summary, and its traces when
        they are readable here)."""
        run = (project, experiment) if project is not None and experiment is not None else None
        files = not settings.over_http or settings.traces_root is not None
        return answer(lambda: profiles.profile_analyze(reader(ctx), directory, run, step, settings.traces_root, files))

    @server.tool(annotations=READ)
    def search_keys(
        ctx: Context,
        project: Project,
        experiment: Experiment,
        word: Annotated[str, Field(min_length=1, max_length=256, description="entropy, clip, response_length")],
    ) -> a.KeyMatches:
        """Which keys a run logged that hold every word given (entropy; clip; val-core reward)."""
        return answer(lambda: tools.search_keys(reader(ctx), (project, experiment), word))

    if settings.allow_write:

        @server.tool(annotations=WRITE)
        def mark_step(
            ctx: Context,
            project: Project,
            experiment: Experiment,
            step: Step,
            text: Annotated[str, Field(min_length=1, max_length=500, description="what happened there")],
            reset_baseline: Annotated[
                bool | None, Field(description="the detectors start their baselines again here")
            ] = None,
        ) -> a.MarkMade:
            """Mark a step (a planned data or curriculum change): drawn on the dashboards, listed by
            diagnose; with reset_baseline the detectors start their baselines again there. Logged."""
            return answer(lambda: writes.mark_step(reader(ctx), (project, experiment), step, text, reset_baseline))

        @server.tool(annotations=WRITE)
        def request_profile(
            ctx: Context,
            project: Project,
            experiment: Experiment,
            first_step: Step,
            last_step: MaybeStep = None,
            role: Literal["actor", "rollout", "ref", "critic"] | None = None,
            ranks: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(max_length=1024)] = None,
        ) -> a.ProfileRequested:
            """Ask the running trainer to profile coming steps with verl's profiler (needs the
            server's token); profile_analyze reads the step once made. Logged."""
            run = (project, experiment)
            return answer(lambda: writes.request_profile(reader(ctx), run, first_step, last_step, role, ranks))

    @server.resource(
        "rl-insight://docs/findings",
        name="findings",
        description="what each detector's finding means, where to look first, what people usually try",
        mime_type="text/markdown",
    )
    def findings_doc() -> str:
        return docs.findings_doc()

    @server.resource(
        "rl-insight://docs/detector/{name}",
        name="detector",
        description="one detector: what it means, the keys it reads, where to look, its alert",
        mime_type="text/markdown",
    )
    def detector_doc(name: str) -> str:
        try:
            return docs.one_detector(name)
        except KeyError as exc:
            raise ResourceError(str(exc.args[0])) from None

    @server.resource(
        "rl-insight://runs/{project}/{experiment}/card",
        name="run card",
        description="how a run was started: versions, commit, command, nodes x GPUs, model, verl's whole config",
        mime_type="application/json",
    )
    def run_card(project: str, experiment: str, ctx: Context) -> str:
        try:
            summary = fit(tools.run_summary(reader(ctx), (project, experiment), None), settings.max_bytes)
        except Refused as exc:
            raise ResourceError(str(exc)) from None
        return summary.model_dump_json(include={"project", "experiment", "card", "card_note", "config", "truncated"})

    return server
