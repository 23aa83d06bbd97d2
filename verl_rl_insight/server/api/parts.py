"""What the API is built from: the hub, the stores and the server's callbacks, in one typed record."""

import dataclasses
from collections.abc import Callable, Iterator

from verl_rl_insight.contract.wire_limits import MAX_FUTURE_S
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.metrics.hub import MetricHub
from verl_rl_insight.server.settings.memory import MemoryShares
from verl_rl_insight.server.stores.imports import ImportStore
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.revocations import Revocations
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.server.stores.silences import Alerting
from verl_rl_insight.server.stores.span_relay import SpanRelay
from verl_rl_insight.server.stores.spans import SpanStore
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.server.timeline.live import LiveFigures

MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_BUDGET_BYTES = 64 * 1024 * 1024

Services = Callable[[], dict[str, dict[str, object]]]  # service -> pid, health, restarts, version, ...
Info = Callable[[], dict[str, object]]  # the endpoints the server announces
DeleteSeries = Callable[[str, str], str]  # (project, experiment) -> what Prometheus said
ImportBlocks = Callable[[Iterator[str]], int]  # a run as OpenMetrics text -> blocks moved into Prometheus


class Startup:
    """What the server opens only once its port listens: where spans go (a store of the hub's, or
    Tempo's receiver through a relay). Until ``open`` the routes that need it answer 503 with
    Retry-After, which OTLP exporters and the trainer retry, never a 404 that says "no spans here"."""

    def __init__(self, spans: SpanStore | None = None, relay: SpanRelay | None = None, ready: bool = True) -> None:
        self.spans = spans
        self.relay = relay  # Tempo's OTLP receiver, when one runs: spans pass through to it
        self.ready = ready

    def open(self, spans: SpanStore | None, relay: SpanRelay | None) -> None:
        """The server has started: spans go to ``spans`` and/or ``relay`` from now on."""
        self.spans, self.relay = spans, relay
        self.ready = True


@dataclasses.dataclass
class ApiParts:
    hub: MetricHub
    targets: TargetRegistry = dataclasses.field(default_factory=TargetRegistry)
    token: str | None = None  # with a token, what is not for anyone needs it (or a run credential)
    max_body_bytes: int = MAX_BODY_BYTES
    services: Services | None = None
    info: Info | None = None
    alerting: Alerting | None = None  # the server's Alertmanager, when it runs one
    startup: Startup = dataclasses.field(default_factory=Startup)
    figures: LiveFigures | None = None  # the timeline's per-step figures, made from every span that arrives
    profiles: ProfileStore | None = None  # profile requests (rl-insight profile) and what trainers say of them
    delete_series: DeleteSeries | None = None
    # runs imported from files (rl-insight runs import): their records, and how their blocks reach
    # the server's own Prometheus (None: it runs none, or has no promtool)
    imports: ImportStore = dataclasses.field(default_factory=ImportStore)
    import_blocks: ImportBlocks | None = None
    retention_s: float = 30 * 86400.0  # Prometheus' retention: an older import is moved forward by whole days
    max_future_s: float = MAX_FUTURE_S  # how far ahead of the server's clock a time may be
    revocations: Revocations = dataclasses.field(default_factory=Revocations)  # run credentials refused
    run_cards: RunCardStore = dataclasses.field(default_factory=RunCardStore)  # in memory without a folder
    marks: MarkStore = dataclasses.field(default_factory=MarkStore)  # people's marks on steps
    workers: int = 4  # threads that parse, render and write off the event loop
    body_budget_bytes: int = BODY_BUDGET_BYTES  # all bodies being received (at least 4 x max_body_bytes)
    save_every_s: float = 1.0  # the hub's scraper state is saved at most this often
    # memory_limit_mb's shares (answers in flight); None: a hub built on its own, its limit the bound
    memory: MemoryShares | None = None
    # the run explorer's data (server/explorer); its histories hear the pushes only where they are one
    # of the hub's listeners (app.py)
    explorer: Sources | None = dataclasses.field(default_factory=Sources)
