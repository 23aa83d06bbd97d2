"""Cost of one span post in the span store (``SpanStore.add``, what ``POST /v1/traces`` does when
the server keeps the spans) as the number of runs grows: the first 1,000 runs (the index small)
against the last 1,000 of 60,000 runs, each named in a request of its own (the index at its
10,000-run bound, the oldest run evicted on every request). Reports medians, p99s and the ratio.

    python benchmarks/bench_span_store.py [--runs 60000]

Before the index was kept in memory, a 1-span post went from 15 to 200 ms over 60,000 runs
(``runs.json`` rewritten whole on every request).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from verl_rl_insight.server.stores.spans import SpanStore


def request(experiment: str) -> ExportTraceServiceRequest:
    attributes = [
        KeyValue(key=key, value=AnyValue(string_value=value))
        for key, value in (("project", "bench"), ("experiment_name", experiment), ("state_lane_id", "trainer"))
    ]
    span = Span(
        trace_id=bytes(16 * [1]),
        span_id=bytes(8 * [2]),
        name="step",
        start_time_unix_nano=10**18,
        end_time_unix_nano=10**18 + 1,
        attributes=attributes,
    )
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": round(statistics.median(ordered) * 1e6, 1),
        "p99_us": round(ordered[int(0.99 * (len(ordered) - 1))] * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60_000)
    parser.add_argument("--window", type=int, default=1000, help="requests measured at each end")
    parser.add_argument("--quick", action="store_true", help="2,000 runs, windows of 200 (CI: it runs)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.window = 2000, 200
    with tempfile.TemporaryDirectory() as folder:
        store = SpanStore(Path(folder) / "spans")
        times: list[float] = []
        for i in range(args.runs):
            body = request(f"run-{i}")
            started = time.perf_counter()
            store.add(body)
            times.append(time.perf_counter() - started)
        store.close()
        first, last = figures(times[: args.window]), figures(times[-args.window :])
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "kept_runs": len(store.runs()),
                    "evicted_runs": store.stats["evicted_runs"],
                    f"first_{args.window}": first,
                    f"last_{args.window}": last,
                    "ratio_median_last_over_first": round(last["median_us"] / first["median_us"], 2),
                    "ratio_p99_last_over_first": round(last["p99_us"] / first["p99_us"], 2),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
