"""The run gate: a run credential writes its own run only, checked where the route's row says the
request names its run (``Route.run_in``), and never an answer of success without it.

The router makes one gate for every request to a ``RUN_CREDENTIAL`` route: the credential's run,
or None for the token (and on a server without one), where nothing is refused. Where the request
names its run before or in a small JSON body, the router consults the gate before the handler runs
("query", "target", "body", "body labels": ``asgi.Api``). Where the body may be MBs and is parsed
once ("body batches": a push, each batch's labels; "spans": OTLP protobuf, each span's resource),
the handler hands the gate to its parser, which passes it every run it decodes before anything is
kept. Either way the router fails closed: a handler that begins a 2xx or 3xx answer to a request
whose gate was never consulted is refused (``Unconsulted``: a 500, logged), not let through.
"""

from collections.abc import Iterable

from verl_rl_insight.contract.run_credential import NamedRun, check_run
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.server.api.access import RunIn


class Unconsulted(Exception):
    """A handler answered a request to a run credential's route without consulting its run gate:
    a bug in the handler, never an answer (500)."""


class RunGate:
    """The run a request's credential may write; calling it with the runs the request names (each
    with the field that names it) raises Forbidden at the first other run."""

    __slots__ = ("run", "run_in", "consulted")

    def __init__(self, run: Run | None, run_in: RunIn) -> None:
        self.run = run  # None: the token, or a server without one
        self.run_in = run_in
        self.consulted = False

    def __call__(self, named: Iterable[NamedRun]) -> None:
        """Forbidden (naming the field) unless every run in ``named`` is the credential's; ``named``
        is not read for the token (a generator of them costs nothing then)."""
        self.consulted = True
        if self.run is None:
            return
        for one in named:
            check_run(self.run, one.project, one.experiment, one.where)

    def answering(self, status: int) -> None:
        """Raised before an answer of ``status`` goes out when it would let through a request the
        gate was never asked about."""
        if status < 400 and not self.consulted:
            raise Unconsulted(f"the handler answered {status} without checking the run named in {self.run_in}")
