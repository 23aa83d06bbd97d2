"""How fast the run explorer draws, in headless Chromium (Debian's /usr/bin/chromium, driven by
playwright): the run page of a 2,000-step run with 40 curves, and a step page (a trainer lane, 8
replicas of 64 generate calls), each against a blank page's load in the same browser and run.

    python benchmarks/bench_explorer_page.py [--steps 2000] [--curves 40] [--rounds 20]

The page's files are the package's own (pages.asset, with the server's headers and its CSP); the API
answers are built here in the shape of /api/v1/explorer/* and handed to the page by playwright's
request routing, so the figures are the page's (parse, draw), not the API's (its own budget: a
2,000-step curve in under 50 ms, measured where the API is). Times run from navigation start to the
page's ``data-ready`` (everything drawn); reports median and p99 (ms) and the ratio of each median to
the blank page's. The issue's budget: the run page within 1 s, a step page within 300 ms.
"""

import argparse
import json
import math
import statistics
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

BASE = "http://127.0.0.1:9"  # nothing listens there: every request is answered by the routing below
BLANK = b"<!doctype html><html><head><title>blank</title></head><body><main></main></body></html>"


def run_answer(curves: int) -> dict[str, object]:
    keys = [f"bench/key_{i:02d}" for i in range(curves)]
    return {
        "project": "bench", "experiment": "e1", "state": "running", "step": None, "keys": keys,
        "panels": [{"title": k, "keys": [k]} for k in keys],
        "findings": [{"detector": "bench", "severity": "warning", "title": "a band", "summary": "a band",
                      "first_step": 100, "last_step": 180, "key": keys[0], "evidence": {"x": 1.0},
                      "where_to_look": ""}],
        "marks": [{"step": 500, "text": "a mark", "reset_baseline": False}], "others": [], "card": None,
        "card_needs_token": True,
    }  # fmt: skip


def curves_answer(steps: int, keys: list[str]) -> dict[str, object]:
    xs = list(range(1, steps + 1))
    series = {k: [math.sin(s / 50 + i) + 0.001 * s for s in xs] for i, k in enumerate(keys)}
    return {"steps": xs, "times": [1.7e9 + 10 * s for s in xs], "series": series}


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


def answers(steps: int, curves: int) -> "Callable[[Route], None]":
    """A playwright route handler: the page's files from the package, the API from the answers above."""
    from verl_rl_insight.server.explorer import pages

    run = run_answer(curves)
    cache: dict[str, bytes] = {}

    def handle(route: "Route") -> None:
        url = urllib.parse.urlsplit(route.request.url)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        headers = {"content-security-policy": pages.CSP}
        if url.path == "/blank":
            body, kind = BLANK, "text/html"
        elif url.path.startswith("/api/v1/explorer/"):
            name = url.path.rsplit("/", 1)[1]
            if name == "curves":
                key = query["keys"]
                if key not in cache:
                    cache[key] = json.dumps(curves_answer(steps, key.split(","))).encode()
                body = cache[key]
            else:
                body = json.dumps(run if name == "run" else step_answer(int(query.get("step", 1)))).encode()
            kind = "application/json"
        else:
            name = pages.SHELL if url.path.startswith("/runs") else url.path.rsplit("/", 1)[1]
            body = pages.asset(name) or b""
            kind = pages.CONTENT_TYPES.get(name[name.rfind(".") :], "text/plain")
        route.fulfill(status=200, body=body, headers={**headers, "content-type": kind})

    return handle


def timed(page: "Page", url: str, ready: str | None) -> float:
    """Milliseconds from navigation start to the page drawn (``data-ready``), or to its load event."""
    page.goto(url)
    if ready is None:
        return float(page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd"))
    page.wait_for_selector(f"body[data-ready={ready}]", timeout=30_000)
    return float(page.evaluate("window.RL_INSIGHT_PAGE.readyAt"))


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--curves", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route("**/*", answers(args.steps, args.curves))
        page = context.new_page()
        urls = {"blank": (f"{BASE}/blank", None), "run": (f"{BASE}/runs/bench/e1", "run"),
                "step": (f"{BASE}/runs/bench/e1/steps/7", "step")}  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in urls}
        for url, ready in urls.values():
            timed(page, url, ready)  # warm: the files cached, the JIT warm, as a person's second look
        started = time.monotonic()
        for _ in range(args.rounds):  # interleaved: load on the machine hits all three alike
            for name, (url, ready) in urls.items():
                times[name].append(timed(page, url, ready))
        timed(page, *urls["run"])
        drawn = page.evaluate("Object.values(window.RL_INSIGHT_PAGE.curves)")
        browser.close()
    blank = statistics.median(times["blank"])
    result = {
        "steps": args.steps, "curves": args.curves, "rounds": args.rounds,
        "wall_s": round(time.monotonic() - started, 1),
        **{f"{name}_median_ms": round(statistics.median(v), 1) for name, v in times.items()},
        **{f"{name}_p99_ms": round(p99(v), 1) for name, v in times.items()},
        "run_over_blank": round(statistics.median(times["run"]) / blank, 1),
        "step_over_blank": round(statistics.median(times["step"]) / blank, 1),
        "run_page_curves_drawn": len(drawn), "points_per_curve": sorted(set(drawn)),
    }  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
