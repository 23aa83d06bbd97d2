"""What each tool returns, as typed models: the SDK publishes their JSON schemas as the tools'
output schemas, so an agent knows the fields before it calls. The parts the server's answers hold
in richer shapes than an agent needs to choose by (a finding's evidence, a lane's figures) stay
JSON (``JsonValue``), as the server sent them.

Every answer has ``truncated``: the byte cap (``bounded.py``) cut one of its lists to fit."""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue

from verl_rl_insight.contract.samples import SampleRow

Json = dict[str, JsonValue]


class Answer(BaseModel):
    truncated: bool = Field(default=False, description="a list in this answer was cut to fit the answer's byte cap")


class RunRow(BaseModel):
    project: str
    experiment: str
    step: int | None = Field(description="the run's newest logged step")
    state: str = Field(description="running, idle (no step for 10 minutes) or finished")
    age_s: float | None = Field(description="seconds since its newest step")
    last_step_time: float | None = Field(description="its newest step's time (Unix seconds, the trainer's clock)")
    findings: dict[str, int] = Field(description="findings by severity: critical, warning, info")


class RunList(Answer):
    runs: list[RunRow]
    total: int = Field(description="runs matching the filters, before any cut")


class Link(BaseModel):
    signal: str = Field(description="what moved, in words")
    detector: str
    first_step: int
    severity: str


class Incident(BaseModel):
    kind: str = Field(description="length_limit, policy_collapse, divergence, validation or systems")
    severity: str
    first_step: int
    last_step: int
    headline: str
    recommendation: str
    chain: list[Link] = Field(description="its signals in the order they moved")
    findings: list[int] = Field(description="its findings: their places in the answer's findings")


class Finding(BaseModel):
    detector: str
    severity: str
    title: str
    summary: str
    first_step: int | None
    last_step: int | None
    key: str | None = Field(description="the logged key it read, as the trainer logged it")
    evidence: Json = Field(description="the figures: text, value, baseline, what people usually do")
    where_to_look: str | None


class Mark(BaseModel):
    step: int
    text: str
    reset_baseline: bool


class Diagnosis(Answer):
    project: str
    experiment: str
    step: int | None
    state: str
    verdict: str = Field(description="one line: the incidents, the worst first, or that nothing was found")
    incidents: list[Incident]
    findings: list[Finding]
    marks: list[Mark] = Field(description="what people said happened at steps (rl-insight runs mark)")


class ConfigEntry(BaseModel):
    key: str = Field(description="a dotted key of verl's resolved config")
    value: JsonValue


class Card(BaseModel):
    versions: dict[str, str]
    commit: str | None
    dirty: bool | None
    command: list[str] = Field(description="the command line, secrets masked by the trainer")
    nodes: int | None
    gpus_per_node: int | None
    model: str | None
    received: float | None


class RunSummary(Answer):
    project: str
    experiment: str
    state: str
    step: int | None
    last_step_time: float | None
    keys: int = Field(description="how many keys the run logged (search_keys finds them)")
    findings: dict[str, int]
    incidents: list[Incident]
    marks: list[Mark]
    card: Card | None = Field(description="how the run was started; None without the token or before its first step")
    card_note: str | None
    config: list[ConfigEntry] = Field(description="verl's resolved config, the keys matching config_filter")
    config_keys: int = Field(description="keys in the config (before the filter)")


class Curve(BaseModel):
    key: str
    points: list[tuple[int, float]] = Field(description="[step, value] pairs, in step order")
    steps: int = Field(description="finite values logged in the range, before downsampling")
    first: float | None
    last: float | None
    low: float | None
    high: float | None
    nonfinite_steps: list[int] = Field(description="steps that logged NaN or an infinity")


class Curves(Answer):
    project: str
    experiment: str
    smoothing: float = Field(description="the EMA weight applied (0: raw)")
    max_points: int
    points: int = Field(description="points in this answer, every curve together")
    downsampled: bool = Field(description="fewer points than steps: each bucket keeps its first, low, high, last")
    missing: list[str] = Field(description="keys the run never logged")
    curves: list[Curve]


class ConfigDifference(BaseModel):
    key: str
    first: JsonValue
    second: JsonValue


class Divergence(BaseModel):
    key: str
    parts_at: int | None = Field(description="the step from which they stay apart (beyond 3x the noise); None: never")
    distance: float = Field(description="how far apart they end, in noises of their difference")
    first_last: float | None
    second_last: float | None


class Comparison(Answer):
    project: str
    first: str
    second: str
    config_differences: list[ConfigDifference] | None = Field(description="None: a card is missing or no token")
    config_note: str | None
    differ_by_nature: int = Field(description="more keys that differ only by the runs' own names")
    diverging: list[Divergence] = Field(description="the keys that diverge most, the most first")
    keys_compared: int


class Phase(BaseModel):
    name: str
    start_s: float = Field(description="seconds from the step's start")
    duration_s: float


class Lane(BaseModel):
    lane: str
    kind: str
    node: str | None
    spans: int
    busy_s: float
    end_s: float = Field(description="when its last span ended, seconds from the step's start")


class StepDetail(Answer):
    project: str
    experiment: str
    step: int
    duration_s: float | None
    validation: bool
    phases: list[Phase] = Field(description="the trainer's phases in order (gen, old_log_prob, update_actor, ...)")
    lanes: list[Lane] = Field(description="every lane: the trainer, each rollout replica, ...")
    slowest_replica: Json | None
    long_tail_s: float | None = Field(description="how long the last replica ran after the others")
    idle_share: float | None
    moved_with: list[Json] = Field(description="the keys that moved with this step's time")
    findings: list[Json] = Field(description="the run's findings over this step")
    hardware: list[Json] = Field(description="its GPUs' faults")
    profile: Json | None = Field(description="the profiler's summary of this step, when it was profiled")
    profile_analyze: str | None = Field(description="the command that analyses the step's whole traces")


class Samples(Answer):
    project: str
    experiment: str
    step: int
    samples: list[SampleRow]
    groups: list[Json] = Field(description="full GRPO groups: every response's score and advantage")
    validation: list[Json] = Field(description="a validation step's generations")
    filtered: list[Json] = Field(description="groups DAPO's filter dropped")
    note: str


class Profile(Answer):
    source: str = Field(description="'directory': traces read here; 'server': the summary the trainer sent")
    where: str
    analysis: Json | None = Field(description="rl-insight profile analyze --json of the traces")
    summary: Json | None = Field(description="the profiled step's summary the trainer sent")
    command: str | None = Field(description="where the whole analysis comes from")


class KeyMatches(Answer):
    project: str
    experiment: str
    word: str
    keys: list[str]
    total: int = Field(description="the run's keys, all of them")


class MarkMade(Answer):
    project: str
    experiment: str
    step: int
    text: str
    reset_baseline: bool


class ProfileRequested(Answer):
    id: str
    project: str
    experiment: str
    first_step: int
    last_step: int
    state: str
    note: str
