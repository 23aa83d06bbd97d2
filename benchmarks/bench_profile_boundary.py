"""Cost of profile requests at verl's step boundary, on the training thread: what a server may list
(20 open requests of 100 steps each, at most, by the wire's rules) handed to the plugin as its
poller would, then the boundaries of ``--steps`` steps as verl's ``fit`` walks them: the plugin's
``stop_profile`` points and verl's own ``global_steps + 1 in config.global_profiler.steps``. The
config is verl's own ppo_trainer config (as the demo composes it), armed with a dormant torch
profiler; the trainer around it is a STAND-IN holding only that config.

Reports, in ms: the first boundary after the listing (where the requests are armed), the median
and the maximum of the boundaries after it, and the same with nothing listed (the baseline, in
the same run): the ratios say what the requests cost the training thread.

    python benchmarks/bench_profile_boundary.py [--requests 20] [--steps-each 100] [--steps 30]
        [--previous PATH/profiler.py]

``--previous`` times another version of the plugin's module too (``git show
HEAD~1:verl_rl_insight/trainer/plugins/profiler.py > /tmp/old_profiler.py``).
"""

import argparse
import importlib.util
import json
import statistics
import time
from types import SimpleNamespace


def requested(index, first, last):
    record = {"id": f"{index:012x}", "project": "p", "experiment_name": "e", "state": "requested", "detail": ""}
    return record | {"first_step": first, "last_step": last, "role": None, "ranks": None, "trace_dir": None}


def trainer():
    from omegaconf import OmegaConf

    from verl_rl_insight.commands.demo.command import compose
    from verl_rl_insight.trainer.plugins.profiler import arm

    config = compose("x", 3, 1, "vllm", 2, 0, 0, False)
    assert arm(config, OmegaConf.create({"arm": "torch", "arm_roles": ["actor"], "arm_ranks": [0]}))
    return SimpleNamespace(config=config)


def walk(module, listing, steps):
    """Seconds of each boundary of ``steps`` steps, the listing taken before the first."""
    from verl_rl_insight.trainer.runtime import RunInfo

    stand_in = trainer()
    from verl_rl_insight.trainer.config import ServerUrl

    profiles = module.Profiles(ServerUrl("http://127.0.0.1:9"), interval_s=3600)  # never asked: no thread
    profiles.run = RunInfo("p", "e")
    profiles._take(listing)
    seconds = []
    for step in range(1, steps + 1):
        started = time.perf_counter()
        profiles.point(stand_in, "stop_profile", "enter", step)
        profiled_next = step + 1 in stand_in.config.global_profiler.steps  # verl's own test, in fit
        profiles.point(stand_in, "stop_profile", "exit", step)
        profiles.point(stand_in, "start_profile", "exit", step + 1)
        seconds.append(time.perf_counter() - started)
        assert isinstance(profiled_next, bool)
    return seconds


def load(path):
    spec = importlib.util.spec_from_file_location("previous_profiler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def summary(seconds):
    rest = seconds[1:]
    return {"first_ms": seconds[0] * 1e3, "median_ms": statistics.median(rest) * 1e3, "max_ms": max(rest) * 1e3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--steps-each", type=int, default=100)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--previous", help="another version of trainer/plugins/profiler.py, timed too")
    parser.add_argument("--quick", action="store_true", help="5 requests, 10 steps (CI: it runs)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.steps = 5, 10
    from verl_rl_insight.trainer.plugins import profiler

    listing = [requested(i, 2 + i, 2 + i + args.steps_each - 1) for i in range(args.requests)]
    versions = {"this": profiler} | ({"previous": load(args.previous)} if args.previous else {})
    results = {}
    for name, module in versions.items():
        baseline = summary(walk(module, [], args.steps))
        listed = summary(walk(module, listing, args.steps))
        results[name] = {
            "listed": listed,
            "nothing_listed": baseline,
            "first_ratio": listed["first_ms"] / max(baseline["first_ms"], 1e-6),
            "median_ratio": listed["median_ms"] / max(baseline["median_ms"], 1e-6),
        }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
