"""The rollout engines' rows (vLLM, SGLang), per replica: every series summed or maxed by replica,
so the engine index inside a replica never splits a line; units on every panel."""

from collections.abc import Sequence

from verl_rl_insight.contract.engine_metrics import LOAD, EngineLoad, exposed
from verl_rl_insight.dashboards.panels import RATE, RUN, Layout, Panel, heatmap, timeseries

SEL = f'{RUN},replica=~"$replica"'


def by_replica(fn: str, expr: str) -> str:
    return f"{fn} by (replica) ({expr})"


def selector(name: str, extra: str = "") -> str:
    """``name{run, replica}``: ``name`` must be a series of the engine metric list
    (contract/engine_metrics.py, checked against the engines' releases), else KeyError."""
    return f"{exposed(name)}{{{SEL}{extra}}}"


def rate(name: str, extra: str = "") -> str:
    return f"rate({selector(name, extra)}{RATE})"


def quantiles(name: str, qs: Sequence[float] = (0.5, 0.9, 0.99)) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le, replica) ({rate(name + '_bucket')}))",
            f"p{int(q * 100)} replica {{{{replica}}}}",
        )
        for q in qs
    ]


def mean(name: str) -> tuple[str, str]:
    """A histogram's mean per replica: its sum's rate over its count's rate."""
    return (
        f"{by_replica('sum', rate(name + '_sum'))} / {by_replica('sum', rate(name + '_count'))}",
        "mean replica {{replica}}",
    )


def busy_share(running: str) -> Panel:
    """Share of wall time with at least one request running (0-100 %), next to the mean in flight."""
    return timeseries(
        "Busy share (at least one request running)",
        [
            (
                f"clamp(avg_over_time(({by_replica('sum', selector(running))} > bool 0)[$__rate_interval:]), 0, 1)",
                "replica {{replica}}",
            )
        ],
        unit="percentunit",
        description="the share of samples in which the replica had a request running: 0-100 %",
    )


def in_flight() -> Panel:
    return timeseries(
        "Mean generate calls in flight",
        [
            (
                "sum by (lane) (rate(rl_insight_state_seconds_total{" + RUN + ',lane=~"replica_.*"}' + RATE + "))",
                "{{lane}}",
            )
        ],
        description="seconds of generate calls per second: the mean number in flight, can exceed 1",
    )


def load_panels(layout: Layout, load: EngineLoad, waiting_word: str, usage_title: str) -> None:
    """How loaded each replica is: requests running and waiting, busy share, calls in flight, KV cache."""
    running, waiting, usage = load.running, load.waiting, load.kv_cache
    layout.add(
        timeseries(
            f"Running / {waiting_word} requests",
            [
                (by_replica("sum", selector(running)), "running replica {{replica}}"),
                (by_replica("sum", selector(waiting)), f"{waiting_word} replica {{{{replica}}}}"),
            ],
        )
    )
    layout.add(busy_share(running), w=8)
    layout.add(in_flight(), w=8)
    layout.add(
        timeseries(usage_title, [(by_replica("max", selector(usage)), "replica {{replica}}")], unit="percentunit"),
        w=8,
    )


def vllm_rows(layout: Layout) -> None:
    layout.row("vLLM engines (per replica)")
    layout.add(
        timeseries(
            "Token throughput",
            [
                (by_replica("sum", rate("vllm:generation_tokens_total")), "generated replica {{replica}}"),
                (by_replica("sum", rate("vllm:prompt_tokens_total")), "prompt replica {{replica}}"),
            ],
            unit="tokens/s",
        )
    )
    load_panels(layout, LOAD["vllm"], "waiting", "KV cache usage")
    hits, queries = (by_replica("sum", rate(f"vllm:prefix_cache_{kind}_total")) for kind in ("hits", "queries"))
    layout.add(
        timeseries(
            "Prefix cache hit rate", [(f"clamp({hits} / {queries}, 0, 1)", "replica {{replica}}")], unit="percentunit"
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Preemptions", [(by_replica("sum", rate("vllm:num_preemptions_total")), "replica {{replica}}")], unit="ops"
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Finished requests by reason",
            [(f"sum by (finished_reason) ({rate('vllm:request_success_total')})", "{{finished_reason}}")],
            unit="reqps",
            stack=True,
        ),
        w=8,
    )
    latency_panels(
        layout,
        "vllm",
        (
            ("Queue time", "request_queue_time_seconds"),
            ("Prefill time", "request_prefill_time_seconds"),
            ("Decode time", "request_decode_time_seconds"),
        ),
        w=8,
    )
    accepted, drafted = (
        by_replica("sum", rate(f"vllm:spec_decode_num_{kind}_tokens_total")) for kind in ("accepted", "draft")
    )
    layout.add(
        timeseries(
            "Speculative decoding acceptance",
            [(f"clamp({accepted} / {drafted}, 0, 1)", "replica {{replica}}")],
            unit="percentunit",
            description="accepted draft tokens / drafted tokens (empty without speculative decoding)",
        ),
        w=8,
    )
    drafts = by_replica("sum", rate("vllm:spec_decode_num_drafts_total"))
    layout.add(
        timeseries(
            "Speculative decoding: mean acceptance length",
            [(f"1 + {accepted} / {drafts}", "replica {{replica}}")],
            description="tokens each verification step yields: 1 + accepted draft tokens per draft, as vLLM "
            "reports it (empty without speculative decoding)",
        ),
        w=8,
    )
    vllm_scheduler_panels(layout)
    layout.add(timeseries("Prompt length per request", quantiles("vllm:request_prompt_tokens", (0.5, 0.99))), w=8)
    layout.add(
        timeseries("Generated length per request", quantiles("vllm:request_generation_tokens", (0.5, 0.99))), w=8
    )


def by_model(fn: str, expr: str) -> str:
    """Per replica and model: in verl's replicas vLLM's ``model_name`` is the model's path."""
    return f"{fn} by (replica, model_name) ({expr})"


def vllm_scheduler_panels(layout: Layout) -> None:
    """What a real vLLM replica of verl's serves beyond the load: why requests wait, how much of
    each prompt the prefix cache saved, tokens per engine step and time spent running."""
    layout.add(
        timeseries(
            "Waiting requests by reason",
            [
                (
                    f"sum by (replica, model_name, reason) ({selector('vllm:num_requests_waiting_by_reason')})",
                    "{{reason}} replica {{replica}} {{model_name}}",
                )
            ],
            description="requests waiting, by why (vLLM's reason label: capacity, deferred)",
        ),
        w=8,
    )
    cached, prompt = (
        by_model("sum", rate(name)) for name in ("vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_total")
    )
    layout.add(
        timeseries(
            "Cached prompt tokens",
            [(f"clamp({cached} / {prompt}, 0, 1)", "replica {{replica}} {{model_name}}")],
            unit="percentunit",
            description="share of prompt tokens served from the prefix cache (local and external)",
        ),
        w=8,
    )
    steps = rate("vllm:iteration_tokens_total_bucket")
    layout.add(
        timeseries(
            "Tokens per engine step",
            [
                (
                    f"histogram_quantile({q}, sum by (le, replica, model_name) ({steps}))",
                    f"p{int(q * 100)} replica {{{{replica}}}} {{{{model_name}}}}",
                )
                for q in (0.5, 0.99)
            ],
            description="tokens each engine step processed (prefill and decode): how full the steps run",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Inference time (running phase)",
            [*quantiles("vllm:request_inference_time_seconds"), mean("vllm:request_inference_time_seconds")],
            unit="s",
            description="time each request spent running (prefill + decode), queue time excluded",
        ),
        w=8,
    )


def latency_panels(layout: Layout, engine: str, own: Sequence[tuple[str, str]], w: int) -> None:
    """The latency histograms both engines serve under the same names (time to first token,
    inter-token, end to end), then ``own`` ((title, name) pairs), as p50 / p99 panels ``w`` wide,
    and the two heatmaps."""
    shared = (
        ("Time to first token", "time_to_first_token_seconds"),
        ("Inter-token latency", "inter_token_latency_seconds"),
        ("End-to-end request latency", "e2e_request_latency_seconds"),
    )
    for title, name in (*shared, *own):
        layout.add(timeseries(title, [*quantiles(f"{engine}:{name}"), mean(f"{engine}:{name}")], unit="s"), w=w)
    for title, name in (
        ("Time to first token (heatmap)", "time_to_first_token_seconds"),
        ("End-to-end latency (heatmap)", "e2e_request_latency_seconds"),
    ):
        layout.add(heatmap(title, f"sum by (le) ({rate(f'{engine}:{name}_bucket')})", "s"), w=12)


def sglang_rows(layout: Layout) -> None:
    layout.row("SGLang engines (per replica)")
    layout.add(
        timeseries(
            "Generation throughput",
            [
                (by_replica("sum", selector("sglang:gen_throughput")), "reported replica {{replica}}"),
                (by_replica("sum", rate("sglang:generation_tokens_total")), "generated replica {{replica}}"),
                (by_replica("sum", rate("sglang:prompt_tokens_total")), "prompt replica {{replica}}"),
            ],
            unit="tokens/s",
        )
    )
    load_panels(layout, LOAD["sglang"], "queued", "KV cache (token) usage")
    layout.add(
        timeseries(
            "Prefix cache hit rate",
            [(by_replica("max", selector("sglang:cache_hit_rate")), "replica {{replica}}")],
            unit="percentunit",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Requests finished",
            [(by_replica("sum", rate("sglang:num_requests_total")), "replica {{replica}}")],
            unit="reqps",
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Speculative decoding accept length",
            [(by_replica("avg", selector("sglang:spec_accept_length")), "replica {{replica}}")],
            description="accepted tokens per verification step (empty without speculative decoding)",
        ),
        w=8,
    )
    latency_panels(layout, "sglang", (("Queue time", "queue_time_seconds"),), w=12)


ROWS = {"vllm": vllm_rows, "sglang": sglang_rows}
RUNNING = {engine: exposed(load.running) for engine, load in LOAD.items()}
