"""The training job's side: ``rl-insight run``, ``demo``, ``doctor``, ``config``, ``plugins``, ``dashboards``."""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from verl_rl_insight.commands.api import SubParsers
from verl_rl_insight.commands.checks import CliError, check_server_url, writable_folder
from verl_rl_insight.contract import environment

if TYPE_CHECKING:
    from omegaconf import DictConfig

PACKAGE = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace) -> int:
    """Exec CMD with activation guaranteed, also where the .pth file is not read."""
    from verl_rl_insight.trainer.activation import bootstrap

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise CliError("give a command to run", fix="rl-insight run -- python3 -m verl.trainer.main_ppo ...")
    env = dict(os.environ)
    env[bootstrap.ENV_AUTOLOAD] = "1"
    site_dir = PACKAGE / "trainer" / "activation" / "sitecustomize_dir"
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (site_dir, PACKAGE.parent, env.get("PYTHONPATH")) if p)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if "verl_rl_insight.trainer.activation.activate" not in modules:
        env["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules + ["verl_rl_insight.trainer.activation.activate"])
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"rl-insight run: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127


def checked_config() -> "DictConfig":
    """The merged config, refused (one line, exit 2) when it names a plugin that nobody provides."""
    from verl_rl_insight.trainer.config import check_plugin_names, load_config
    from verl_rl_insight.trainer.manager import discover

    config = load_config()
    check_plugin_names(config, discover())
    return config


def plugins(args: argparse.Namespace) -> int:
    from verl_rl_insight.trainer.config import plugin_settings
    from verl_rl_insight.trainer.manager import DEFAULT_PLUGINS, discover

    config = checked_config()
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


def config(args: argparse.Namespace) -> int:
    from omegaconf import OmegaConf

    shown = OmegaConf.to_container(checked_config())
    assert isinstance(shown, dict)
    if shown.get("token"):  # the server's token or a run credential: a secret either way
        shown["token"] = "***"
    print(OmegaConf.to_yaml(shown))
    return 0


def dashboards_export(args: argparse.Namespace) -> int:
    from verl_rl_insight.dashboards import DASHBOARDS_DIR

    out = writable_folder(args.dir)
    files = sorted(DASHBOARDS_DIR.glob("*.json"))
    existing = [p.name for p in files if (out / p.name).exists()]
    if existing and not args.force:
        raise CliError(
            f"{out / existing[0]} exists ({len(existing)} of the dashboards are there already)",
            fix="add --force to overwrite them, or give another folder",
        )
    for path in files:
        shutil.copyfile(path, out / path.name)
    print(
        f"wrote {len(files)} dashboards to {out}; they use the datasource uids rl-insight-prometheus and "
        "rl-insight-tempo: create those (or edit the uids) in your Grafana"
    )
    return 0


def demo(args: argparse.Namespace) -> int:
    if args.real or args.plan:
        from verl_rl_insight.commands.demo.real import command as real

        return real.run(experiment=args.experiment, server_config=args.config, plan_only=args.plan)
    from verl_rl_insight.commands.demo import command

    return command.run(
        steps=args.steps,
        step_seconds=args.step_seconds,
        engine=args.engine,
        replicas=args.replicas,
        experiment=args.experiment,
        server_config=args.config,
        transfer_queue=not args.no_transfer_queue,
    )


def doctor(args: argparse.Namespace) -> int:
    from verl_rl_insight.commands.doctor import command as checklist

    if args.server:
        check_server_url(args.server, "--server")
    elif os.environ.get(environment.SERVER_URL):
        check_server_url(os.environ[environment.SERVER_URL], environment.SERVER_URL)
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    return checklist.run(server=args.server, project=args.project, experiment=args.experiment, overrides=overrides)


def add_parsers(sub: SubParsers) -> None:
    import argparse

    runner = sub.add_parser("run", help="run a command with monitoring activated: rl-insight run -- CMD ...")
    runner.add_argument("command", nargs=argparse.REMAINDER)
    runner.set_defaults(func=run)

    listing = sub.add_parser("plugins", help="list plugins and whether they are enabled")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=plugins)

    sub.add_parser("config", help="print the merged trainer-side config").set_defaults(func=config)

    _add_demo(sub)

    checking = sub.add_parser("doctor", help='the "dashboard shows no data" checklist: ok / problem / fix')
    checking.add_argument("--server", help="server URL (default: RL_INSIGHT_SERVER_URL, else the local server)")
    checking.add_argument("--project")
    checking.add_argument("--experiment")
    checking.add_argument("overrides", nargs=argparse.REMAINDER, help="-- the job's Hydra overrides")
    checking.set_defaults(func=doctor)

    dashboards = sub.add_parser("dashboards", help="the Grafana dashboards")
    dashboards_sub = dashboards.add_subparsers(dest="dashboards_command", metavar="COMMAND", required=True)
    export = dashboards_sub.add_parser("export", help="write the dashboards' JSON for an existing Grafana")
    export.add_argument("dir", metavar="DIR")
    export.add_argument("--force", action="store_true", help="overwrite dashboards already in DIR")
    export.set_defaults(func=dashboards_export)


def _add_demo(sub: SubParsers) -> None:
    """`rl-insight demo`: the simulated run, or the real one (--real)."""
    from verl_rl_insight.commands import checks

    simulation = sub.add_parser(
        "demo",
        help="server stack + a SIMULATED verl run through the real patches",
        description="Starts the server (unless one runs), then a SIMULATED verl PPO run through verl's real "
        "run_ppo, Tracking and patches, with simulated replicas and GPUs; prints where to look. "
        "What verl and Ray print goes to the run's log file.",
    )
    simulation.add_argument(
        "--steps", type=checks.positive_int, default=20, metavar="N", help="trainer steps to run (default 20)"
    )
    simulation.add_argument(
        "--step-seconds",
        type=checks.positive_float,
        default=2.0,
        metavar="S",
        help="how long one simulated step takes (default 2.0)",
    )
    simulation.add_argument(
        "--engine", choices=["vllm", "sglang"], default="vllm", help="the rollout engine simulated (default vllm)"
    )
    simulation.add_argument(
        "--replicas", type=checks.positive_int, default=2, metavar="N", help="rollout replicas (default 2)"
    )
    simulation.add_argument("--experiment", help="experiment_name (default: simulated-<time>)")
    simulation.add_argument("--config", help="server config, when the demo starts the server")
    simulation.add_argument("--no-transfer-queue", action="store_true", help="skip the TransferQueue part")
    simulation.add_argument(
        "--real",
        action="store_true",
        help="a REAL verl GRPO run on the CPU instead (installs a 3.4 GB venv once, about 5 minutes; "
        "the run takes 5-10 minutes)",
    )
    simulation.add_argument("--plan", action="store_true", help="with --real: say what it would install and run")
    simulation.set_defaults(func=demo)
