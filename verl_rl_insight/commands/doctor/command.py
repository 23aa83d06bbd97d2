"""``rl-insight doctor``: every check in order, and the count of problems."""

import os
import sys
from collections.abc import Sequence
from typing import TextIO

from verl_rl_insight.commands import http_fetch
from verl_rl_insight.commands.doctor.report import Report, third_party_quiet
from verl_rl_insight.commands.doctor.server import (
    check_provisioning,
    check_remote_write,
    check_samples,
    check_server,
    check_services,
    check_targets,
)
from verl_rl_insight.commands.doctor.trainer import check_environment, check_overrides
from verl_rl_insight.contract import environment, paths, server_url


def run(
    server: str | None = None,
    project: str | None = None,
    experiment: str | None = None,
    overrides: Sequence[str] = (),
    out: TextIO = sys.stdout,
) -> int:
    from verl_rl_insight.commands.server import control

    report = Report(out)
    state = control.read_state(out=out)
    raw = server or os.environ.get(environment.SERVER_URL) or ""
    if not raw and state:
        raw = control.trainer_url(state, local=True)
    url, url_token = server_url.split(raw.rstrip("/")) if raw else ("", None)
    token = os.environ.get(environment.TOKEN) or url_token
    reachable = bool(url) and check_server(report, url, token)
    if not url:
        report.problem(
            "server reachable",
            "no server: RL_INSIGHT_SERVER_URL is unset and none runs here",
            "rl-insight server start --detach, then export the line it prints",
        )
    if reachable:
        services = check_services(report, url)
        try:
            info = http_fetch.fetch_json(url + paths.INFO, timeout_s=5)
        except http_fetch.NoAnswer:
            info = {}
        if "prometheus" in info.get("services", ()):
            from verl_rl_insight.commands.server.control import with_login

            prometheus = with_login(info["prometheus"])  # the login of the server here, when this user may read it
            check_targets(report, prometheus)
            check_remote_write(report, prometheus)
        check_samples(report, url, project, experiment)
    grafana = services.get("grafana") if reachable else None
    if grafana is not None and grafana.get("missing") and control.optional_absent("grafana", grafana):
        report.skip(
            "Grafana provisioning", "no Grafana here (see above); rl-insight dashboards export DIR for your own"
        )
    else:
        check_provisioning(report, state)
    with third_party_quiet():  # importing verl logs its platform warnings: not a check's finding
        check_environment(
            report, url, needs_token=bool(token or (state and state.get("token"))), server_here=bool(state)
        )
        check_overrides(report, overrides)
    print(f"\n{report.problems} problem(s)" if report.problems else "\nall checks passed", file=out)
    return 1 if report.problems else 0
