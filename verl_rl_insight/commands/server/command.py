"""``rl-insight server install | start | stop | status``."""

import argparse
import os
from typing import TYPE_CHECKING

import yaml

from verl_rl_insight.commands import checks
from verl_rl_insight.commands.api import SubParsers
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.contract import environment
from verl_rl_insight.server.managed.releases import OPTIONAL_SERVICES

if TYPE_CHECKING:
    from verl_rl_insight.server.settings.server import ServerSettings


def load_settings(config: str | None, **overrides: object) -> "ServerSettings":
    """Server settings from ``--config`` and options; a bad file or value is a CliError naming it."""
    from verl_rl_insight.server.settings.server import ServerSettings

    try:
        settings: ServerSettings = ServerSettings.load(config, **overrides)
        return settings
    except FileNotFoundError:
        raise CliError(f"server config {config} does not exist") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise CliError(f"server config {config} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except (OSError, ValueError, TypeError) as exc:
        raise CliError(f"bad server config: {exc}") from None


def start(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.server import control
    from verl_rl_insight.server.settings.server import SERVICE_NAMES

    disabled = [name for name in SERVICE_NAMES if getattr(args, f"no_{name}")]
    settings = load_settings(
        args.config,
        bind=args.bind,
        port=args.port,
        prometheus_port=args.prometheus_port,
        data_dir=args.data_dir,
        scrape_interval_s=args.scrape_interval,
        local_trust=True if args.local_trust else None,
        disable=disabled,
    )
    checks.writable_folder(settings.data_path)
    return control.start(settings, detach=args.detach)


def stop(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.server import control

    return control.stop()


def status(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.server import control

    return control.status(show_secrets=args.secrets)


def url(args: argparse.Namespace) -> int:
    """The URL trainers export as RL_INSIGHT_SERVER_URL, with the token: for scripts and pasted fixes."""
    from verl_rl_insight.commands.server import control

    state = control.read_state()
    if state is None:
        raise CliError("no rl-insight server runs here", fix="rl-insight server start --detach", code=3)
    if args.prometheus:
        if "prometheus" not in state["services"]:
            raise CliError("the server here runs no Prometheus", code=3)
        shown = control.with_login(state["public_urls"]["prometheus"])
        if shown == state["public_urls"]["prometheus"]:
            raise CliError(
                "cannot read the Prometheus login (the server's secrets are its user's only)",
                fix="run this as the user that started the server",
                code=3,
            )
        print(shown)
        return 0
    print(control.trainer_url(state, local=args.local))
    return 0


def install(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.server import installer
    from verl_rl_insight.server.managed.releases import SERVICES

    settings = load_settings(args.config)
    names = args.services or list(SERVICES)
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        raise CliError(f"unknown service {unknown[0]!r}; known: {', '.join(SERVICES)}")
    checksums = {}
    for item in args.sha256 or ():
        name, _, value = item.partition("=")
        if name not in SERVICES or not installer._is_sha256(value):
            raise CliError(f"--sha256 takes NAME=<64 hex digits> with NAME one of {', '.join(SERVICES)}, got {item!r}")
        checksums[name] = value
    if args.local_archive and not os.path.isdir(args.local_archive):
        raise CliError(f"--local-archive {args.local_archive} is not a folder")
    mirror = args.mirror or os.environ.get(environment.MIRROR)
    failed: list[str] = []
    for name in names:
        try:
            record = installer.install_one(
                name,
                local_archive=args.local_archive,
                mirror=mirror,
                force=args.force,
                sha256=checksums.get(name),
                overrides=settings.service(name),
            )
        except installer.InstallError as exc:
            print(f"  {name:<11} FAILED: {exc}")
            failed.append(name)
            continue
        if record.get("note"):
            detail = record["note"]
        else:
            detail = f"{record['source']}; sha256 {record['sha256']} verified against {record['checksum_source']}"
        print(f"  {name:<11} {record['version']:<9} {record['binary']}   ({detail})")
    # without names, "everything": what is optional and could not be had is a note, not a failure
    optional = [name for name in failed if name in OPTIONAL_SERVICES and not args.services]
    if optional:
        print(
            f"\nThe server runs without {' and '.join(n.capitalize() for n in optional)} "
            f"({'; '.join(OPTIONAL_SERVICES[n] for n in optional)}). Add later, offline too: "
            f"rl-insight server install {' '.join(optional)} --local-archive DIR"
        )
    return PROBLEMS if set(failed) - set(optional) else 0


def add_parsers(sub: SubParsers) -> None:
    server = sub.add_parser(
        "server", help="the monitoring server (metric hub, Prometheus, Alertmanager, Tempo, Grafana)"
    )
    server_sub = server.add_subparsers(dest="server_command", metavar="COMMAND", required=True)
    _add_start(server_sub)
    server_sub.add_parser("stop", help="stop the server and every service it started").set_defaults(func=stop)
    state = server_sub.add_parser("status", help="every service: pid, health, restarts, version, data size")
    state.add_argument("--secrets", action="store_true", help="also show the write token and the Grafana password")
    state.set_defaults(func=status)
    where = server_sub.add_parser(
        "url",
        help='the URL trainers export (with the token): export RL_INSIGHT_SERVER_URL="$(rl-insight server url)"',
    )
    where.add_argument("--local", action="store_true", help="the loopback address, for trainers on this machine")
    where.add_argument(
        "--prometheus",
        action="store_true",
        help="the server's Prometheus with its login (http://rl-insight:<password>@127.0.0.1:9090), for "
        "scripts and a browser on this machine",
    )
    where.set_defaults(func=url)
    _add_install(server_sub)


def _add_start(server_sub: SubParsers) -> None:
    """`rl-insight server start` and its options."""
    begin = server_sub.add_parser("start", help="start the server and its services")
    begin.add_argument("--detach", action="store_true", help="return once everything is ready")
    begin.add_argument("--config", help="YAML file of server settings")
    begin.add_argument("--data-dir", help="where data, configs and logs live (default ~/.rl-insight/data)")
    begin.add_argument("--bind", type=checks.bind_address, help="address to listen on (default 0.0.0.0)")
    begin.add_argument("--port", type=checks.port, help="metric hub / API port (default 18080)")
    begin.add_argument("--prometheus-port", type=checks.port, help="Prometheus port (default 9090)")
    begin.add_argument(
        "--scrape-interval", type=checks.positive_float, help="Prometheus scrape interval in seconds (default 5)"
    )
    begin.add_argument(
        "--local-trust",
        action="store_true",
        help="no token: writes open to every user of this machine (loopback only; a machine of one user)",
    )
    for name in ("prometheus", "alertmanager", "tempo", "grafana"):
        begin.add_argument(f"--no-{name}", action="store_true", help=f"do not run {name}")
    begin.set_defaults(func=start)


def _add_install(server_sub: SubParsers) -> None:
    """`rl-insight server install` and its options."""
    setup = server_sub.add_parser(
        "install",
        help="install Prometheus, Alertmanager, Tempo, Grafana (verified "
        "sha256); "
        "what is installed or on the machine is skipped",
    )
    setup.add_argument(
        "services", nargs="*", metavar="SERVICE", help="prometheus, alertmanager, tempo, grafana (default: all)"
    )
    setup.add_argument(
        "--local-archive", metavar="DIR", help="take the release archives (and their checksum files) from DIR: offline"
    )
    setup.add_argument(
        "--mirror", metavar="URL", help="download URL/<release file> instead (default: RL_INSIGHT_MIRROR when set)"
    )
    setup.add_argument("--force", action="store_true", help="reinstall even when installed or on the machine")
    setup.add_argument(
        "--sha256",
        action="append",
        metavar="NAME=HEX",
        help="the sha256 the archive must have (instead of the release's checksum file)",
    )
    setup.add_argument("--config", help="server config (services.<name>.version / sha256 / url)")
    setup.set_defaults(func=install)
