"""Cost of the batch statistics (plugin group_stats) on the training thread: one step's batch of
8,192 responses in groups of 16 (verl's uid strings), after verl's real ``compute_advantage``
(GRPO), against verl's own ``compute_data_metrics`` on the same batch, interleaved rounds in one
process. Reports median and p99 of each (ms) and the ratio of the medians (group_stats / verl):
the time the training thread waits; ``group_stats_cpu`` is the CPU time of the process meanwhile,
the training thread's and the helper thread's together (the length's pass runs on a helper thread
where the process may use two CPUs; ``--one-thread`` times it all on the calling thread).

    python benchmarks/bench_group_stats.py [--responses 8192] [--group 16] [--response-length 1024]
        [--sources 4] [--rounds 50] [--threads N] [--previous PATH/group_stats.py]

``--previous`` times another version of the plugin's module too (e.g. ``git show
main:verl_rl_insight/trainer/plugins/group_stats.py > /tmp/old_group_stats.py``), interleaved.

The issue's budget: under 20 ms, the median of rounds, for 8,192 responses in groups of 16.
The token-level tensors dominate (scores, advantages, masks: 8,192 x response length), as they
do in verl's own function; ``--response-length`` sets their width.
"""

import argparse
import json
import statistics
import time
import uuid


def step_batch(responses, group, response_length, prompt_length, sources, seed=0, kl_in_reward=False):
    """A DataProto as verl's trainer holds it at compute_advantage: prompts, responses, masks, a
    0/1 score at each response's last token, uid per group and data_source per prompt. The rewards
    are the scores' own tensor, as verl's fit sets them without ``algorithm.use_kl_in_reward``
    (``batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]``); a tensor of their
    own with ``kl_in_reward``."""
    import numpy as np
    import torch
    from verl import DataProto

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, response_length + 1, (responses,), generator=g)
    mask = (torch.arange(response_length)[None, :] < lengths[:, None]).long()
    scores = torch.zeros(responses, response_length)
    solved = torch.rand(responses // group, 1, generator=g).expand(-1, group).reshape(-1)  # per-prompt difficulty
    scores[torch.arange(responses), lengths - 1] = (torch.rand(responses, generator=g) < solved).float()
    uids = [str(uuid.UUID(int=i)) for i in range(responses // group)]
    return DataProto.from_dict(
        tensors={
            "prompts": torch.randint(0, 32000, (responses, prompt_length), generator=g),
            "responses": torch.randint(0, 32000, (responses, response_length), generator=g),
            "attention_mask": torch.cat([torch.ones(responses, prompt_length, dtype=torch.long), mask], dim=1),
            "response_mask": mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone() if kl_in_reward else scores,
        },
        non_tensors={
            "uid": np.array([uids[i // group] for i in range(responses)], dtype=object),
            "data_source": np.array([f"source_{(i // group) % sources}" for i in range(responses)], dtype=object),
        },
    )


def load_previous(path):
    """``batch_metrics`` of another version of group_stats.py, loaded under a name of its own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("previous_group_stats", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.batch_metrics


def figures(samples_ms):
    ordered = sorted(samples_ms)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
    }


def interleaved(batch, rounds, ours_fn, verl_fn, previous=None):
    """(ours ms, our CPU ms, verl's ms, the previous version's ms, our last statistics): rounds
    interleaved, so a load that comes and goes touches all alike; the previous version must give
    the same figures."""
    ours, cpu, verls, before = [], [], [], []
    for _ in range(3):  # warm-up
        ours_fn(batch, {})
        verl_fn(batch, use_critic=False)
        if previous:
            previous(batch, {})
    for _ in range(rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        stats = ours_fn(batch, {})
        t1 = time.perf_counter()
        cpu.append((time.process_time() - c0) * 1000)
        verl_fn(batch, use_critic=False)
        t2 = time.perf_counter()
        ours.append((t1 - t0) * 1000)
        verls.append((t2 - t1) * 1000)
        if previous:
            t3 = time.perf_counter()
            old = previous(batch, {})
            before.append((time.perf_counter() - t3) * 1000)
            assert old.keys() == stats.keys() and all(abs(old[k] - stats[k]) < 1e-9 for k in old), "versions differ"
    return ours, cpu, verls, before, stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--responses", type=int, default=8192)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="512 responses of 128 tokens, 3 rounds (CI: it runs)")
    # verl's driver loop runs in a Ray actor (TaskRunner, num_cpus=1): Ray sets OMP_NUM_THREADS to
    # its CPUs, so torch works on one thread there
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--kl-in-reward", action="store_true", help="rewards a tensor of their own (KL in the reward)")
    parser.add_argument("--one-thread", action="store_true", help="no helper thread: all on the calling thread")
    parser.add_argument("--previous", help="another group_stats.py to time beside this one (same batch, interleaved)")
    args = parser.parse_args()
    if args.quick:
        args.responses, args.response_length, args.prompt_length, args.rounds = 512, 128, 64, 3

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from verl_rl_insight.trainer.plugins.group_stats import batch_metrics

    previous = load_previous(args.previous) if args.previous else None
    shape = (args.responses, args.group, args.response_length, args.prompt_length, args.sources)
    batch = step_batch(*shape, kl_in_reward=args.kl_in_reward)
    compute = getattr(compute_advantage, "__wrapped__", compute_advantage)  # verl's own, unwrapped
    batch = compute(batch, adv_estimator=AdvantageEstimator.GRPO)
    ours_fn = (lambda b, known: batch_metrics(b, known, helper=None)) if args.one_thread else batch_metrics
    ours, cpu, verls, before, stats = interleaved(batch, args.rounds, ours_fn, compute_data_metrics, previous)
    assert stats and "rl_insight/group/zero_variance_share" in stats
    result = {
        "batch": {
            "responses": args.responses,
            "group": args.group,
            "response_length": args.response_length,
            "sources": args.sources,
            "torch_threads": torch.get_num_threads(),
            "kl_in_reward": args.kl_in_reward,
            "helper_thread": not args.one_thread,
        },
        "group_stats": figures(ours),
        "group_stats_cpu": figures(cpu),
        "verl_compute_data_metrics": figures(verls),
        "rounds": args.rounds,
    }
    result["ratio_median"] = round(
        result["group_stats"]["median_ms"] / result["verl_compute_data_metrics"]["median_ms"], 3
    )
    if previous:
        result["previous_group_stats"] = figures(before)
        result["ratio_to_previous"] = round(
            result["group_stats"]["median_ms"] / result["previous_group_stats"]["median_ms"], 3
        )
    result["budget_ms"] = 20
    result["within_budget"] = result["group_stats"]["median_ms"] < 20
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
