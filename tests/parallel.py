"""How ``python3 -m pytest -n 3 tests`` spreads the suite over worker processes (pytest-xdist, with
``--dist loadgroup --no-loadscope-reorder``, set here when ``-n`` is given: in setup.cfg's addopts
they would stop a run without xdist, ``-p no:xdist``, at its command line): most tests wait on a subprocess (a
Prometheus scrape, a Ray worker, Chromium), so three workers share 2 cores well.

- **A module is one unit**, run whole by one worker: its module-scoped fixture (a server stack, a
  real verl run) starts once.
- **The modules marked ``local_ray`` are one unit together.** Each starts a local Ray cluster
  (``ray.init()``: the demo, verl's ``run_ppo``, the TransferQueue drivers) on Ray's fixed default
  ports; two at once collide and a raylet dies. A Ray head started with every port chosen free
  (``tests/ray_cluster.py``, the real verl run's) runs beside anything.
- **Units go out longest first**, by the last recorded run (``tests/module_durations.json``), so the
  longest does not start last and hold the suite up alone.

Run in one process (no ``-n``), nothing here applies and the order is the files' own.
"""

from __future__ import annotations

import collections
import json
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

from tests.fast_tests import DURATIONS, module_of

LOCAL_RAY = "local_ray"
UNRECORDED_S = 30.0  # a module not yet recorded: assume it is slow rather than start it last


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{LOCAL_RAY}: the module starts a local Ray cluster on Ray's default ports (tests/parallel.py)"
    )
    given = getattr(config, "workerinput", {})  # in a worker: what the controller handed it
    if given.get("dist") == "loadgroup":  # a worker parses the command line again: --dist is not on it
        config.option.loadgroup = True  # its test ids carry their group: the controller schedules by it


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would make it ``--dist load``
def pytest_cmdline_main(config: pytest.Config) -> None:
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", "no") == "no":
        option.dist = "loadgroup"
        option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)  # xdist's: the controller starting a worker
def pytest_configure_node(node: WorkerController) -> None:
    node.workerinput["dist"] = node.config.option.dist


def unit_of(item: pytest.Item) -> str:
    return LOCAL_RAY if item.get_closest_marker(LOCAL_RAY) else module_of(item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    recorded: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    modules: dict[str, set[str]] = collections.defaultdict(set)
    for item in items:
        modules[unit_of(item)].add(module_of(item.nodeid))
    seconds = {unit: sum(recorded.get(m, UNRECORDED_S) for m in members) for unit, members in modules.items()}
    position = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (-seconds[unit_of(item)], unit_of(item), position[id(item)]))
    for item in items:
        item.add_marker(pytest.mark.xdist_group(unit_of(item)))
