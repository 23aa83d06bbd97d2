"""How fast the run explorer draws, in headless Chromium (Debian's /usr/bin/chromium, driven by
playwright): the run page of a 2,000-step run with 40 curves, and a step page (a trainer lane, 8
replicas of 64 generate calls), each against a blank page's load in the same browser and run.

    python benchmarks/bench_explorer_page.py [--steps 2000] [--curves 40] [--rounds 20]

The run page: the real server process (the hub alone, on loopback: its API and pages)
holding a run of ``--steps`` steps (a real public verl run's logged dicts cycled, pushed over HTTP
as bench_explorer_api.py does), opened with ``?keys=`` so that ``--curves`` curves are drawn. The step
page: its answer built here (the hub has no spans in this benchmark) in the shape of
/api/v1/explorer/step, handed to the page by playwright's routing; the blank page likewise. Times
run from navigation start to the page's ``data-ready`` (everything drawn), the blank page's to its
load event; reports median and p99 (ms) and the ratio of each median to the blank page's. The
issue's budget: the run page within 1 s, a step page within 300 ms.
"""

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

BLANK = b"<!doctype html><html><head><title>blank</title></head><body><main></main></body></html>"


def step_answer(step: int, replicas: int = 8, calls: int = 64) -> dict[str, object]:
    t0 = 1.7e9
    phases = [("step", 0, 30), ("gen", 0, 20), ("old_log_prob", 20, 22), ("adv", 22, 23), ("update_actor", 23, 29)]
    lanes = [
        {
            "lane": "trainer",
            "kind": "trainer",
            "node": "n0",
            "spans": [{"name": n, "start": t0 + a, "end": t0 + b} for n, a, b in phases],
        }
    ]
    for r in range(replicas):
        spans = [{"name": "rollout generate", "start": t0 + 0.1 * c, "end": t0 + 5 + 0.2 * c + r} for c in range(calls)]
        lanes.append({"lane": f"replica_{r}", "kind": "replica", "node": f"n{r // 4}", "spans": spans})
    return {
        "step": step, "start": t0, "end": t0 + 30, "duration_s": 30.0, "validation": False, "lanes": lanes,
        "slowest_replica": {"lane": f"replica_{replicas - 1}", "node": "n1"}, "long_tail_s": 7.0, "idle_share": 0.3,
        "hardware": [], "findings": [],
        "profile_command": f"rl-insight profile --project bench --experiment e1 --steps {step + 2}",
    }  # fmt: skip


def answers(route: "Route") -> None:
    """The blank page and the step page's API answer (the rest goes to the real server)."""
    url = urllib.parse.urlsplit(route.request.url)
    if url.path.endswith("/api/v1/explorer/step"):
        step = int(urllib.parse.parse_qs(url.query)["step"][-1])
        route.fulfill(status=200, body=json.dumps(step_answer(step)), headers={"content-type": "application/json"})
    elif url.path == "/blank":
        route.fulfill(status=200, body=BLANK, headers={"content-type": "text/html"})
    else:
        route.fallback()


def real_server(steps: int, data_dir: str) -> tuple[str, Callable[[], None]]:
    """The real server process (the hub alone, hub_process.start_hub) holding a run of ``steps``
    steps: (its URL, what stops it)."""
    import os
    import signal

    import requests

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_explorer_api import run_steps
    from hub_process import free_port, start_hub

    port = free_port()
    process = start_hub(
        port, data_dir, services={n: {"enabled": False} for n in ("prometheus", "alertmanager", "tempo", "grafana")}
    )
    base = f"http://127.0.0.1:{port}"
    batches = run_steps(steps)
    with requests.Session() as session:
        for i in range(0, len(batches), 100):
            assert session.post(base + "/api/v1/push", json={"batches": batches[i : i + 100]}).status_code == 200

    def stop() -> None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)

    return base, stop


def run_page_url(base: str, curves: int) -> str:
    """The run page, with as many more keys (``?keys=``) as bring its curves to ``curves``."""
    import requests

    run = requests.get(f"{base}/api/v1/explorer/run?project=bench&experiment_name=explorer", timeout=30).json()
    shown = {k for panel in run["panels"] for k in panel["keys"]}
    more = [k for k in run["keys"] if k not in shown][: max(0, curves - len(shown))]
    return f"{base}/runs/bench/explorer" + (f"?keys={urllib.parse.quote(','.join(more))}" if more else "")


def timed(page: "Page", url: str, ready: str | None) -> tuple[float, float]:
    """(ms from navigation start to the page drawn (``data-ready``), ms of that after the API's answers
    were in: the page's own drawing); a blank page: (ms to its load event, 0)."""
    page.goto(url)
    if ready is None:
        return float(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")), 0.0
    page.wait_for_selector(f"body[data-ready={ready}]", timeout=30_000)
    at = page.evaluate("[window.RL_INSIGHT_PAGE.readyAt, window.RL_INSIGHT_PAGE.dataAt]")
    return float(at[0]), float(at[0] - at[1])


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--curves", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="200 steps, 8 curves, 2 rounds (CI: it runs)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.curves, args.rounds = 200, 8, 2
    from playwright.sync_api import sync_playwright

    data_dir = tempfile.mkdtemp(prefix="bench-explorer-page-")
    base, stop = real_server(args.steps, data_dir)
    try:  # the server stopped whatever fails (Chromium not starting, a page not drawn)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", answers)
            page = context.new_page()
            urls = {"blank": (f"{base}/blank", None), "run": (run_page_url(base, args.curves), "run"),
                    "step": (f"{base}/runs/bench/explorer/steps/7", "step")}  # fmt: skip
            times: dict[str, list[float]] = {name: [] for name in (*urls, "run drawing", "step drawing")}
            for url, ready in urls.values():
                timed(page, url, ready)  # warm: the files cached, the JIT warm, as a person's second look
            started = time.monotonic()
            for _ in range(args.rounds):  # interleaved: load on the machine hits all three alike
                for name, (url, ready) in urls.items():
                    total, drawing = timed(page, url, ready)
                    times[name].append(total)
                    if ready:
                        times[f"{name} drawing"].append(drawing)
            timed(page, *urls["run"])
            drawn = page.evaluate("Object.values(window.RL_INSIGHT_PAGE.curves)")
            browser.close()
    finally:
        stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    blank = statistics.median(times["blank"])
    result = {
        "steps": args.steps, "curves": args.curves, "rounds": args.rounds,
        "wall_s": round(time.monotonic() - started, 1),
        **{f"{name.replace(' ', '_')}_median_ms": round(statistics.median(v), 1) for name, v in times.items()},
        **{f"{name.replace(' ', '_')}_p99_ms": round(p99(v), 1) for name, v in times.items()},
        "run_over_blank": round(statistics.median(times["run"]) / blank, 1),
        "step_over_blank": round(statistics.median(times["step"]) / blank, 1),
        "run_page_curves_drawn": len(drawn), "points_per_curve": sorted(set(drawn)),
    }  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
