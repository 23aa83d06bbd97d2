"""The runs a JSON request body names, for the router's run-credential check (``Route.run_in``).

A run credential writes its own run only: for a route whose body names the run (``"body"``: the
body's ``project`` and ``experiment_name``; ``"body labels"``: the target's ``labels``), the router
reads the body, decodes it once and checks every run it names before the handler runs (403 naming
the field). A body that is not an object is let through: every such route refuses it (400).
"""

import json
from collections.abc import Callable

from verl_rl_insight.contract.run_credential import check_run
from verl_rl_insight.contract.runs import Run
from verl_rl_insight.contract.wire import PushError
from verl_rl_insight.server.api.access import RunIn

Named = tuple[object, object, str]  # (project, experiment_name, the field that names them)


def _body(item: dict[str, object]) -> list[Named]:
    return [(item.get("project"), item.get("experiment_name"), "project, experiment_name")]


def _labels(item: dict[str, object]) -> list[Named]:
    given = item.get("labels")
    labels = given if isinstance(given, dict) else {}
    return [(labels.get("project"), labels.get("experiment_name"), "labels")]


RUNS_OF_BODY: dict[RunIn, Callable[[dict[str, object]], list[Named]]] = {"body": _body, "body labels": _labels}


def check_body_runs(run: Run, run_in: RunIn, body: bytes) -> None:
    """Forbidden when the body names a run other than ``run`` (400 when it is not JSON)."""
    try:
        item = json.loads(body)  # the handlers' parsers take no body that this one refuses
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise PushError(f"body is not valid JSON: {str(exc)[:200]}") from None
    if isinstance(item, dict):
        for project, experiment, where in RUNS_OF_BODY[run_in](item):
            check_run(run, project, experiment, where)
