"""Which test modules are fast: ``python3 -m pytest -m fast tests`` runs them alone, in about a
minute or two on 2 cores, while one edits; the whole suite stays what CI runs.

A module is fast when its tests together took under ``FAST_MODULE_S`` in the last recorded run of
the suite (``tests/module_durations.json``) and it is not an end-to-end module; every other test is
marked ``slow``. A module by module rule, not test by test: a module's shared fixture (a server, a
Prometheus, a real verl run) is paid by whichever of its tests runs first.

Record again after adding or changing test modules (a module not in the file counts as slow):
``RL_INSIGHT_RECORD_DURATIONS=tests/module_durations.json python3 -m pytest -q tests``.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

DURATIONS = Path(__file__).parent / "module_durations.json"
FAST_MODULE_S = 5.0  # a module's tests together, setup and teardown included
RECORD = "RL_INSIGHT_RECORD_DURATIONS"

_spent: collections.Counter[str] = collections.Counter()


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def fast_modules(recorded: dict[str, float]) -> set[str]:
    return {m for m, seconds in recorded.items() if seconds < FAST_MODULE_S and not m.startswith("tests/e2e/")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    fast = fast_modules(recorded)
    for item in items:
        item.add_marker(pytest.mark.fast if module_of(item.nodeid) in fast else pytest.mark.slow)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[module_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(RECORD)
    if not path or not _spent or "PYTEST_XDIST_WORKER" in os.environ:  # under -n: the controller has every report
        return
    target = Path(path)
    recorded = json.loads(target.read_text()) if target.exists() else {}
    recorded.update({module: round(seconds, 2) for module, seconds in sorted(_spent.items())})
    target.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
