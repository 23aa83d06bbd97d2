"""The ``rl-insight`` command."""

import argparse
import json
import os
import sys

from omegaconf import OmegaConf


def _server_start(args):
    from .server import control
    from .server.settings import ServerSettings

    try:
        settings = ServerSettings.load(args.config, bind=args.bind, port=args.port,
                                       prometheus_port=args.prometheus_port, data_dir=args.data_dir,
                                       scrape_interval_s=args.scrape_interval,
                                       prometheus=False if args.no_prometheus else None)
    except (OSError, ValueError, TypeError) as exc:
        print(f"rl-insight: bad server config: {exc}", file=sys.stderr)
        return 2
    return control.start(settings, detach=args.detach)


def _server_stop(args):
    from .server import control

    return control.stop()


def _server_status(args):
    from .server import control

    return control.status()


def _run(args):
    """Exec CMD with activation guaranteed, also where the .pth file is not read."""
    from . import bootstrap

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("rl-insight run: give a command, e.g. rl-insight run -- python3 -m verl.trainer.main_ppo ...",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    env[bootstrap.ENV_AUTOLOAD] = "1"
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sitecustomize_dir")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site_dir, package_parent, env.get("PYTHONPATH")) if p)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if "verl_rl_insight.activate" not in modules:
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules + ["verl_rl_insight.activate"])
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"rl-insight run: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127


def _plugins(args):
    from .config import load_config, plugin_settings
    from .manager import DEFAULT_PLUGINS, discover

    config = load_config()
    rows = []
    for name in discover():
        source = "built-in" if any(p.endswith("." + name) for p in DEFAULT_PLUGINS) else "entry point"
        enabled = plugin_settings(config, name).get("enabled", True)
        rows.append({"name": name, "source": source, "enabled": bool(enabled)})
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['name']:<24} {row['source']:<12} {'enabled' if row['enabled'] else 'disabled'}")
    return 0


def _config(args):
    from .config import load_config

    print(OmegaConf.to_yaml(load_config()))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="rl-insight", description="Real-time monitoring for verl RL training.")
    sub = parser.add_subparsers(dest="cmd", required=True)

    server = sub.add_parser("server", help="the monitoring server (metric hub, Prometheus)")
    server_sub = server.add_subparsers(dest="server_cmd", required=True)
    start = server_sub.add_parser("start", help="start the server and its services")
    start.add_argument("--detach", action="store_true", help="return once everything is ready")
    start.add_argument("--config", help="YAML file of server settings")
    start.add_argument("--data-dir", help="where data, configs and logs live (default ~/.rl-insight/data)")
    start.add_argument("--bind", help="address to listen on (default 0.0.0.0)")
    start.add_argument("--port", type=int, help="metric hub / API port (default 18080)")
    start.add_argument("--prometheus-port", type=int, help="Prometheus port (default 9090)")
    start.add_argument("--scrape-interval", type=float, help="Prometheus scrape interval in seconds (default 5)")
    start.add_argument("--no-prometheus", action="store_true", help="run the metric hub only")
    start.set_defaults(func=_server_start)
    server_sub.add_parser("stop", help="stop the server and every service it started").set_defaults(func=_server_stop)
    server_sub.add_parser("status", help="what runs, where").set_defaults(func=_server_status)

    run = sub.add_parser("run", help="run a command with monitoring activated: rl-insight run -- CMD ...")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(func=_run)

    plugins = sub.add_parser("plugins", help="list plugins and whether they are enabled")
    plugins.add_argument("--json", action="store_true")
    plugins.set_defaults(func=_plugins)

    sub.add_parser("config", help="print the merged trainer-side config").set_defaults(func=_config)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0
