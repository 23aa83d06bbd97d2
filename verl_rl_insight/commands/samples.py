"""``rl-insight samples --project P --experiment E [--step N] [--worst|--best|--mismatch]
[--group] [--validation] [--filtered]``: the rollouts behind a step's numbers (plugin ``samples``,
off by default), read from where the run's spans are (the server, or Tempo). ``--group``: the full
GRPO group(s) of the step, every response's score and advantage, the ground truth; ``--validation``:
the validation generations; ``--filtered``: the rewards of the groups DAPO dropped."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from verl_rl_insight.commands.api import SubParsers, common_options
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.timeline.command import spans_of
from verl_rl_insight.contract.samples import TRAIN_KINDS, StepSamples, samples_by_step

KINDS = TRAIN_KINDS
VIEWS = ("group", "validation", "filtered")
HINTS = {
    "validation": " (verl validates every trainer.test_freq steps)",
    "filtered": " (DAPO filters with algorithm.filter_groups.enable=True)",
}
WHAT = {
    "samples": "samples",
    "groups": "GRPO groups",
    "validation": "validation generations",
    "filtered": "DAPO filtered groups",
}


def _one_line(text: object, width: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def _print_samples(found: StepSamples, kinds: list[str]) -> None:
    for r in found["samples"]:
        if r["kind"] not in kinds:
            continue
        mismatch = f", mismatch {r['mismatch']:.4g}" if r["mismatch"] is not None else ""
        source = f", {r['data_source']}" if r["data_source"] else ""
        print(
            f"\n{r['kind']} {r['rank']}: score {_number(r['score'])}, {r['length']} tokens "
            f"({r['finish_reason']}){mismatch}{source}"
        )
        print(f"  prompt:   {_one_line(r['prompt'], 200)}")
        print(f"  response: {_one_line(r['response'], 400)}")


def _print_groups(found: StepSamples) -> None:
    for group in found["groups"]:
        scores = [r["score"] for r in group["responses"] if r["score"] is not None]
        spread = f", scores {min(scores):.4g}..{max(scores):.4g}" if scores else ""
        source = f", {group['data_source']}" if group["data_source"] else ""
        print(f"\ngroup {group['uid']}: {len(group['responses'])} responses{spread}{source}")
        print(f"  prompt:       {_one_line(group['prompt'], 200)}")
        truth = _one_line(group["ground_truth"], 200) if group["ground_truth"] else "(none in the batch)"
        print(f"  ground truth: {truth}")
        for r in group["responses"]:
            print(
                f"  {r['rank']:>3}  score {_number(r['score']):>7}  advantage {_number(r['advantage']):>7}  "
                f"{r['length']} tokens  {_one_line(r['response'], 120)}"
            )


def _print_validation(found: StepSamples) -> None:
    for i, r in enumerate(found["validation"], 1):
        source = f", {r['data_source']}" if r["data_source"] else ""
        truth = f", ground truth {_one_line(r['ground_truth'], 60)}" if r["ground_truth"] else ""
        print(f"\nvalidation {i}: score {_number(r['score'])}{source}{truth}")
        print(f"  input:  {_one_line(r['input'], 200)}")
        print(f"  output: {_one_line(r['output'], 400)}")


def _print_filtered(found: StepSamples) -> None:
    total = sum(r["groups"] or 0 for r in found["filtered"])
    print(f"\nDAPO dropped {total} groups (every response's reward the same):")
    for r in found["filtered"]:
        print(f"  reward {_number(r['reward']):>7}: {r['groups']} groups")


def _view(args: argparse.Namespace) -> str:
    chosen = [v for v in VIEWS if getattr(args, v)]
    if len(chosen) > 1:
        raise CliError(f"--{chosen[0]} and --{chosen[1]} show different things: pick one", code=PROBLEMS)
    return {"group": "groups", "validation": "validation", "filtered": "filtered"}[chosen[0]] if chosen else "samples"


def _has(view: str, kinds: list[str]) -> Callable[[StepSamples], bool]:
    if view == "samples":
        return lambda found: any(r["kind"] in kinds for r in found["samples"])
    return lambda found: bool(found[view])  # type: ignore[literal-required]


def show(args: argparse.Namespace) -> int:
    spans, origin = spans_of(args)
    by_step = samples_by_step(spans)
    view = _view(args)
    kinds = [k for k in KINDS if getattr(args, k)] or list(KINDS)
    steps = sorted(step for step, found in by_step.items() if _has(view, kinds)(found))
    if not steps:
        raise CliError(
            f"no {WHAT[view]} of {args.project}/{args.experiment} at {origin}",
            fix="the plugin is off by default (prompts can be private): launch with "
            "+rl_insight.plugins.samples.enabled=True"
            + {
                "validation": " (validation runs every trainer.test_freq steps)",
                "filtered": " (DAPO: algorithm.filter_groups.enable=True)",
            }.get(view, ""),
            code=PROBLEMS,
        )
    step = args.step if args.step is not None else steps[-1]
    if step not in steps:
        raise CliError(
            f"no {WHAT[view]} at step {step} (steps with them: {', '.join(map(str, steps[-20:]))})", code=PROBLEMS
        )
    found = by_step[step]
    if args.json:
        found = {**found, "samples": [r for r in found["samples"] if r["kind"] in kinds]}
        print(json.dumps({"project": args.project, "experiment_name": args.experiment, **found}))
        return 0
    shown = len([r for r in found["samples"] if r["kind"] in kinds]) if view == "samples" else len(found[view])  # type: ignore[literal-required]
    detail = f" ({', '.join(kinds)})" if view == "samples" else ""
    print(f"{args.project}/{args.experiment} step {step}: {shown} {WHAT[view]}{detail}, from {origin}")
    if view == "samples":
        _print_samples(found, kinds)
    else:
        {"groups": _print_groups, "validation": _print_validation, "filtered": _print_filtered}[view](found)
    return 0


def add_parsers(sub: SubParsers) -> None:
    parser = sub.add_parser(
        "samples",
        help="the rollouts behind a step: worst, best and largest-mismatch samples, the GRPO group, "
        "validation generations, DAPO's filtered groups (plugin samples)",
    )
    parser.add_argument("--project", required=True)
    parser.add_argument("--experiment", required=True, help="the experiment_name")
    parser.add_argument("--step", type=int, help="the trainer step (default: the newest with what is asked)")
    for kind, what in (
        ("worst", "the lowest-scoring"),
        ("best", "the highest-scoring"),
        ("mismatch", "the largest log-prob mismatch"),
    ):
        parser.add_argument(f"--{kind}", action="store_true", help=f"only {what} (default: all three)")
    parser.add_argument(
        "--group", action="store_true", help="the step's full GRPO group(s): scores, advantages, ground truth"
    )
    parser.add_argument(
        "--validation", action="store_true", help="the validation generations: input, output, score, source"
    )
    parser.add_argument("--filtered", action="store_true", help="the rewards of the groups DAPO dropped at the step")
    parser.add_argument("--tempo", help="read from this Tempo (its HTTP API URL) instead of asking the server")
    common_options(parser, top=True)
    parser.set_defaults(func=show)
