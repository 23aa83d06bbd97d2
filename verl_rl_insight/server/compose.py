"""The server's composition root: every part built once, in the order of what it needs, each given
its dependencies at construction. No part registers itself with another (``tests/test_layout.py``
checks this module and ``app.py`` for it). What needs the managed services started comes after, in
``app.py``: the span store or relay (by whether Tempo runs) handed to ``parts.startup``, the ticking
and delivery threads. The order here:

memory bound -> the runs' histories -> detectors (their one walk reads the histories), timeline
figures, marks (book under the bound) -> explorer -> hub (its listeners, collectors and derived parts
given) -> delivery check, target registry -> API. Each part that holds memory under the bound is given
its share of it from one object (``ServerSettings.memory_shares``, settings/memory.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import NamedTuple, Protocol

from verl_rl_insight.server.api.asgi import Api
from verl_rl_insight.server.api.parts import ApiParts, Startup
from verl_rl_insight.server.explorer.prometheus import PrometheusReader
from verl_rl_insight.server.explorer.sources import Sources
from verl_rl_insight.server.health import card_keys
from verl_rl_insight.server.health.live import HealthMonitor
from verl_rl_insight.server.history.histories import Histories
from verl_rl_insight.server.managed import alertmanager, prometheus
from verl_rl_insight.server.managed.tempo import retention_hours
from verl_rl_insight.server.metrics.delivery import DeliveryCheck
from verl_rl_insight.server.metrics.hub import Bound, MetricHub
from verl_rl_insight.server.settings import prometheus_jobs
from verl_rl_insight.server.settings.server import ServerSettings
from verl_rl_insight.server.stores.imports import ImportStore
from verl_rl_insight.server.stores.marks import MarkStore
from verl_rl_insight.server.stores.profiles import ProfileStore
from verl_rl_insight.server.stores.revocations import Revocations
from verl_rl_insight.server.stores.run_attempts import RunAttempts
from verl_rl_insight.server.stores.run_cards import RunCardStore
from verl_rl_insight.server.stores.run_keys import RunKeys
from verl_rl_insight.server.stores.silences import Alerting
from verl_rl_insight.server.stores.targets import TargetRegistry
from verl_rl_insight.server.timeline.live import LiveFigures


class Calls(Protocol):
    """What the parts ask of the server process itself (``app.Server``)."""

    def service_status(self) -> dict[str, dict[str, object]]: ...

    def info(self) -> dict[str, object]: ...

    def delete_series(self, project: str, experiment: str | None) -> str: ...

    def step_time(self, project: str, experiment: str, step: int) -> float | None: ...

    def import_blocks(self, text: Iterator[str]) -> int: ...


@dataclasses.dataclass(frozen=True)
class Parts:
    hub: MetricHub
    health: HealthMonitor  # the live detectors' one walk of the runs' histories: a derived part of the hub
    figures: LiveFigures  # the timeline's per-step figures: a derived part of the hub
    explorer: Sources
    delivery: DeliveryCheck
    targets: TargetRegistry
    alerting: Alerting | None  # the server's Alertmanager, when it runs one
    startup: Startup  # where spans go, opened once the services have started
    api: Api


def confirm_stores(settings: ServerSettings) -> dict[str, str]:
    """Named scrapers whose store is read back before their history goes: the server's own
    Prometheus (with its login, written before the parts are built), and those configured."""
    stores = dict(settings.confirm_scrapers)
    if settings.enabled("prometheus"):
        stores[prometheus.scraper_name(settings)] = prometheus.login_url(settings)
    return stores


class Feeds(NamedTuple):
    """What reads the trainers' steps and spans beside the hub, built before it."""

    health: HealthMonitor
    figures: LiveFigures
    marks: MarkStore
    explorer: Sources


def _feeds(s: ServerSettings, logins: dict[str, tuple[str, str]], calls: Calls, bound: Bound) -> Feeds:
    shares = s.memory_shares
    # each run's trainer scalars by step, held once (by bytes, not a count of runs): the explorer's
    # step table, which the live detectors walk (the series they made booked under the bound); the
    # steps a push queues for it until the next read booked under the bound too
    histories = Histories(
        max_bytes=shares.histories,
        max_waiting_bytes=shares.histories_waiting,
        book=functools.partial(bound.book_other, "histories"),
    )
    health = HealthMonitor(
        s.alerts.detectors,
        validation_keys=s.validation_keys,
        book=functools.partial(bound.book_other, "health"),
        histories=histories,
    )
    figures = LiveFigures(
        settle_s=s.timeline_settle_s,
        book=functools.partial(bound.book_other, "timeline"),
        budget_bytes=shares.timeline,
    )
    # people's marks on steps; one with reset_baseline starts the live detectors' baselines again there,
    # for as long as it stands
    marks = MarkStore(
        s.data_path / "marks.json",
        on_resets=health.set_resets,
        step_time=calls.step_time,
        book=functools.partial(bound.book_other, "marks"),
    )
    # a run the hub has not carried is read back from the server's Prometheus
    reader = PrometheusReader(prometheus.url(s), logins["prometheus"]) if s.enabled("prometheus") else None
    # the run explorer: the histories and findings of the detectors' walk, the settings diagnose reads
    names = RunKeys(s.data_path / "run-keys")  # the keys as logged, kept across restarts
    names.book_all(functools.partial(bound.book_other, "run_keys"))
    explorer = Sources(
        curves_bytes=shares.curves,
        names=names,
        prometheus=reader,
        health=health,
        imports=ImportStore(s.data_path / "imports.json"),  # runs imported from files: never live
    )
    return Feeds(health, figures, marks, explorer)


def build(settings: ServerSettings, logins: dict[str, tuple[str, str]], calls: Calls) -> Parts:
    """The server's parts, once its credentials and the services' logins are written."""
    s = settings
    bound = Bound(s.memory_shares.hub, int(s.max_series))
    health, figures, marks, explorer = _feeds(s, logins, calls, bound)
    stores = confirm_stores(s)
    attempts = RunAttempts(s.data_path / "run-attempts.json")  # its file written outside the hub's lock (saved)
    hub = MetricHub(
        history_s=s.history_s,
        state_path=s.data_path / "hub-state.json",
        latest_path=s.data_path / "hub-latest.json",
        max_future_s=s.max_future_s,
        confirming=frozenset(stores),
        bound=bound,
        listeners=(explorer.histories.observe, explorer.names.observe, marks.observe, attempts.saved),
        collectors=(marks,),
        derived=(health, figures),  # the server's own series, taken every second (app.Server._tick)
        attempts=attempts,  # each trainer step's attempt, stamped on the step as it is applied
    )
    delivery = DeliveryCheck(
        hub,
        stores,
        settle_s=max(2.0, float(s.scrape_interval_s)),
        jobs={prometheus.scraper_name(s): prometheus_jobs.HUB_JOB},
    )
    targets = TargetRegistry(
        s.data_path / "targets.json",
        max_per_run=int(s.max_targets_per_run),
        own_ports=frozenset(v for k, v in vars(s).items() if k.endswith("port") and isinstance(v, int)),
    )
    alerting = None
    if s.enabled("alertmanager"):
        alerting = Alerting(alertmanager.url(s), s.data_path / "silences.json", login=logins["alertmanager"])
    startup = Startup(ready=False)  # until the span store and the services are in place: 503
    api = Api(
        ApiParts(
            hub,
            targets=targets,
            token=s.token,
            max_body_bytes=int(s.max_body_mb * 2**20),
            services=calls.service_status,
            info=calls.info,
            alerting=alerting,
            startup=startup,
            figures=figures,
            delete_series=calls.delete_series,
            profiles=ProfileStore(s.data_path / "profiles.json"),
            revocations=Revocations(s.data_path / "revoked-runs.json", future_s=s.max_future_s),
            run_cards=RunCardStore(s.data_path / "run-cards", on_card=card_keys.Taker(health)),
            marks=marks,
            explorer=explorer,
            imports=explorer.imports,
            import_blocks=calls.import_blocks if s.enabled("prometheus") else None,
            retention_s=float(retention_hours(s.retention)[:-1]) * 3600,
            max_future_s=s.max_future_s,
            memory=s.memory_shares,
        )
    )
    return Parts(hub, health, figures, explorer, delivery, targets, alerting, startup, api)
