"""``rl-insight samples --project P --experiment E [--step N] [--worst|--best|--mismatch]``: the
rollouts behind a step's numbers (plugin ``samples``, off by default), read from where the
run's spans are (the server, or Tempo)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from verl_rl_insight.commands.api import SubParsers, common_options
from verl_rl_insight.commands.checks import PROBLEMS, CliError
from verl_rl_insight.commands.timeline.command import spans_of

KINDS = ("worst", "best", "mismatch")
FIELDS = ("kind", "rank", "index", "score", "length", "mismatch", "finish_reason", "data_source", "prompt", "response")


def samples_of(spans: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """step -> its samples ({kind, rank, score, ..., prompt, response}), in kind and rank order."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for span in spans:
        attrs = span["attributes"]
        if attrs.get("state_lane_id") != "samples" or "sample.kind" not in attrs:
            continue
        row = {name: attrs.get(f"sample.{name}") for name in FIELDS}
        by_step.setdefault(int(attrs.get("verl.step", -1)), []).append(row)
    for rows in by_step.values():
        rows.sort(key=lambda r: (KINDS.index(r["kind"]) if r["kind"] in KINDS else 9, r["rank"] or 0))
    return by_step


def _one_line(text: Any, width: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def show(args: argparse.Namespace) -> int:
    spans, origin = spans_of(args)
    by_step = samples_of(spans)
    if not by_step:
        raise CliError(
            f"no samples of {args.project}/{args.experiment} at {origin}",
            fix="the plugin is off by default (prompts can be private): launch with "
            "+rl_insight.plugins.samples.enabled=True",
            code=PROBLEMS,
        )
    step = args.step if args.step is not None else max(by_step)
    if step not in by_step:
        known = sorted(by_step)
        raise CliError(f"no samples at step {step} (steps with samples: {known[0]}..{known[-1]})", code=PROBLEMS)
    kinds = [k for k in KINDS if getattr(args, k)] or list(KINDS)
    rows = [r for r in by_step[step] if r["kind"] in kinds]
    if args.json:
        print(json.dumps({"project": args.project, "experiment_name": args.experiment, "step": step, "samples": rows}))
        return 0
    print(f"{args.project}/{args.experiment} step {step}: {len(rows)} samples ({', '.join(kinds)}), from {origin}")
    for r in rows:
        mismatch = f", mismatch {r['mismatch']:.4g}" if isinstance(r["mismatch"], (int, float)) else ""
        source = f", {r['data_source']}" if r["data_source"] else ""
        print(
            f"\n{r['kind']} {r['rank']}: score {r['score']:.4g}, {r['length']} tokens "
            f"({r['finish_reason']}){mismatch}{source}"
        )
        print(f"  prompt:   {_one_line(r['prompt'], 200)}")
        print(f"  response: {_one_line(r['response'], 400)}")
    return 0


def add_parsers(sub: SubParsers) -> None:
    parser = sub.add_parser(
        "samples",
        help="the rollouts behind a step: its worst, best and largest-mismatch samples (plugin samples)",
    )
    parser.add_argument("--project", required=True)
    parser.add_argument("--experiment", required=True, help="the experiment_name")
    parser.add_argument("--step", type=int, help="the trainer step (default: the newest with samples)")
    for kind, what in (
        ("worst", "the lowest-scoring"),
        ("best", "the highest-scoring"),
        ("mismatch", "the largest log-prob mismatch"),
    ):
        parser.add_argument(f"--{kind}", action="store_true", help=f"only {what} (default: all three)")
    parser.add_argument("--tempo", help="read from this Tempo (its HTTP API URL) instead of asking the server")
    common_options(parser, top=True)
    parser.set_defaults(func=show)
