"""The ``rl-insight`` command."""

import argparse
import json
import os
import sys

from omegaconf import OmegaConf


def _server_start(args):
    from .server import control
    from .server.settings import ServerSettings

    disabled = [name for name in ("prometheus", "tempo", "grafana") if getattr(args, f"no_{name}")]
    try:
        settings = ServerSettings.load(args.config, bind=args.bind, port=args.port,
                                       prometheus_port=args.prometheus_port, data_dir=args.data_dir,
                                       scrape_interval_s=args.scrape_interval, disable=disabled)
    except (OSError, ValueError, TypeError) as exc:
        print(f"rl-insight: bad server config: {exc}", file=sys.stderr)
        return 2
    return control.start(settings, detach=args.detach)


def _server_stop(args):
    from .server import control

    return control.stop()


def _server_status(args):
    from .server import control

    return control.status(show_secrets=args.secrets)


def _server_install(args):
    from .server import installer
    from .server.releases import SERVICES
    from .server.settings import ServerSettings

    try:
        settings = ServerSettings.load(args.config)
    except (OSError, ValueError, TypeError) as exc:
        print(f"rl-insight: bad server config: {exc}", file=sys.stderr)
        return 2
    names = args.services or list(SERVICES)
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        print(f"rl-insight: unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICES)}", file=sys.stderr)
        return 2
    checksums = {}
    for item in args.sha256 or ():
        name, _, value = item.partition("=")
        if name not in SERVICES or len(value) != 64:
            print(f"rl-insight: --sha256 takes NAME=<64 hex digits>, got {item!r}", file=sys.stderr)
            return 2
        checksums[name] = value
    failed = 0
    for name in names:
        try:
            record = installer.install_one(name, local_archive=args.local_archive, mirror=args.mirror,
                                           force=args.force, sha256=checksums.get(name),
                                           overrides=settings.service(name))
        except installer.InstallError as exc:
            print(f"  {name:<11} FAILED: {exc}")
            failed += 1
            continue
        print(f"  {name:<11} {record['version']:<9} {record['binary']}"
              + (f"   ({record['note']})" if record.get("note") else f"   ({record['source']})"))
    return 1 if failed else 0


def _targets(args):
    import urllib.error
    import urllib.parse
    import urllib.request

    from .client import server_url
    from .config import ENV_SERVER_URL, ENV_TOKEN
    from .server import control

    base = args.server or os.environ.get(ENV_SERVER_URL)
    if not base:
        state = control.read_state()
        base = control.trainer_url(state, local=True) if state else None
    if not base:
        print("rl-insight targets: no server found: start one, or give --server URL / RL_INSIGHT_SERVER_URL",
              file=sys.stderr)
        return 2
    base, url_token = server_url.split(base.rstrip("/"))
    base += "/api/v1/targets"
    headers = {"Content-Type": "application/json"}
    token = os.environ.get(ENV_TOKEN) or url_token
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if args.targets_cmd == "add":
        labels = {}
        for item in args.label or ():
            key, sep, value = item.partition("=")
            if not sep:
                print(f"rl-insight targets: --label takes KEY=VALUE, got {item!r}", file=sys.stderr)
                return 2
            labels[key] = value
        body = json.dumps({"address": args.address, "job": args.job, "labels": labels, "ttl_s": args.ttl}).encode()
        request = urllib.request.Request(base, data=body, method="POST", headers=headers)
    elif args.targets_cmd == "remove":
        query = urllib.parse.urlencode({"job": args.job, "address": args.address})
        request = urllib.request.Request(f"{base}?{query}", method="DELETE", headers=headers)
    else:
        request = urllib.request.Request(base, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        print(f"rl-insight targets: {exc.code}: {json.loads(exc.read() or b'{}').get('error', exc.reason)}",
              file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"rl-insight targets: cannot reach {base}: {exc}", file=sys.stderr)
        return 2
    if args.targets_cmd == "list":
        for t in answer["targets"]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))
            expiry = "static" if t["expires_in_s"] is None else f"expires in {t['expires_in_s']:.0f} s"
            print(f"{t['job']:<20} {t['address']:<24} {labels:<40} {expiry}")
    else:
        print(json.dumps(answer))
    return 0


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


def _dashboards_export(args):
    import shutil
    from pathlib import Path

    from .grafana import DASHBOARDS_DIR

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(DASHBOARDS_DIR.glob("*.json"))
    for path in files:
        shutil.copyfile(path, out / path.name)
    print(f"wrote {len(files)} dashboards to {out}; they use the datasource uids rl-insight-prometheus and "
          "rl-insight-tempo: create those (or edit the uids) in your Grafana")
    return 0


def _demo(args):
    from .demo import command

    return command.run(steps=args.steps, step_seconds=args.step_seconds, engine=args.engine,
                       replicas=args.replicas, experiment=args.experiment, server_config=args.config,
                       transfer_queue=not args.no_transfer_queue)


def _doctor(args):
    from . import doctor

    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    return doctor.run(server=args.server, project=args.project, experiment=args.experiment, overrides=overrides)


def _config(args):
    from .config import load_config

    print(OmegaConf.to_yaml(load_config()))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="rl-insight", description="Real-time monitoring for verl RL training.")
    sub = parser.add_subparsers(dest="cmd", required=True)

    server = sub.add_parser("server", help="the monitoring server (metric hub, Prometheus, Tempo, Grafana)")
    server_sub = server.add_subparsers(dest="server_cmd", required=True)
    start = server_sub.add_parser("start", help="start the server and its services")
    start.add_argument("--detach", action="store_true", help="return once everything is ready")
    start.add_argument("--config", help="YAML file of server settings")
    start.add_argument("--data-dir", help="where data, configs and logs live (default ~/.rl-insight/data)")
    start.add_argument("--bind", help="address to listen on (default 0.0.0.0)")
    start.add_argument("--port", type=int, help="metric hub / API port (default 18080)")
    start.add_argument("--prometheus-port", type=int, help="Prometheus port (default 9090)")
    start.add_argument("--scrape-interval", type=float, help="Prometheus scrape interval in seconds (default 5)")
    for name in ("prometheus", "tempo", "grafana"):
        start.add_argument(f"--no-{name}", action="store_true", help=f"do not run {name}")
    start.set_defaults(func=_server_start)
    server_sub.add_parser("stop", help="stop the server and every service it started").set_defaults(func=_server_stop)
    status = server_sub.add_parser("status", help="every service: pid, health, restarts, version, data size")
    status.add_argument("--secrets", action="store_true", help="also show the write token and the Grafana password")
    status.set_defaults(func=_server_status)
    install = server_sub.add_parser("install", help="install Prometheus, Tempo, Grafana (pinned, sha256-verified)")
    install.add_argument("services", nargs="*", help="prometheus, tempo, grafana (default: all)")
    install.add_argument("--local-archive", metavar="DIR", help="take the release archives from DIR (offline)")
    install.add_argument("--mirror", metavar="URL", help="download the release files from URL/<file name>")
    install.add_argument("--force", action="store_true", help="reinstall even when installed or on the machine")
    install.add_argument("--sha256", action="append", metavar="NAME=HEX",
                         help="expected sha256 of a service's archive (where no checksum is pinned)")
    install.add_argument("--config", help="server config (services.<name>.version / sha256 / url)")
    install.set_defaults(func=_server_install)

    targets = sub.add_parser("targets", help="scrape targets (node-exporter, dcgm-exporter, ...) of the server")
    targets.add_argument("--server", help="server URL (default: RL_INSIGHT_SERVER_URL or the local server)")
    targets_sub = targets.add_subparsers(dest="targets_cmd", required=True)
    add = targets_sub.add_parser("add", help="add a target Prometheus should scrape")
    add.add_argument("address", help="HOST:PORT")
    add.add_argument("--job", required=True, help="e.g. node-exporter, dcgm-exporter, npu-exporter")
    add.add_argument("--label", action="append", metavar="KEY=VALUE")
    add.add_argument("--ttl", type=float, default=0, help="seconds until it expires (default 0: never)")
    remove = targets_sub.add_parser("remove", help="remove a target")
    remove.add_argument("address")
    remove.add_argument("--job", required=True)
    targets_sub.add_parser("list", help="list targets")
    targets.set_defaults(func=_targets)

    run = sub.add_parser("run", help="run a command with monitoring activated: rl-insight run -- CMD ...")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(func=_run)

    plugins = sub.add_parser("plugins", help="list plugins and whether they are enabled")
    plugins.add_argument("--json", action="store_true")
    plugins.set_defaults(func=_plugins)

    sub.add_parser("config", help="print the merged trainer-side config").set_defaults(func=_config)

    demo = sub.add_parser("demo", help="server stack + a SIMULATED verl run through the real patches")
    demo.add_argument("--steps", type=int, default=20)
    demo.add_argument("--step-seconds", type=float, default=2.0)
    demo.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    demo.add_argument("--replicas", type=int, default=2)
    demo.add_argument("--experiment", help="experiment_name (default: simulated-<time>)")
    demo.add_argument("--config", help="server config, when the demo starts the server")
    demo.add_argument("--no-transfer-queue", action="store_true", help="skip the TransferQueue part")
    demo.set_defaults(func=_demo)

    doctor = sub.add_parser("doctor", help='the "dashboard shows no data" checklist: ok / problem / fix')
    doctor.add_argument("--server", help="server URL (default: RL_INSIGHT_SERVER_URL, else the local server)")
    doctor.add_argument("--project")
    doctor.add_argument("--experiment")
    doctor.add_argument("overrides", nargs=argparse.REMAINDER, help="-- the job's Hydra overrides")
    doctor.set_defaults(func=_doctor)

    dashboards = sub.add_parser("dashboards", help="the Grafana dashboards")
    dashboards_sub = dashboards.add_subparsers(dest="dashboards_cmd", required=True)
    export = dashboards_sub.add_parser("export", help="write the dashboards' JSON for an existing Grafana")
    export.add_argument("dir")
    export.set_defaults(func=_dashboards_export)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0
