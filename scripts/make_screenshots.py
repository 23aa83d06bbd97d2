"""Remake the explorer's pictures in docs/ (explorer-run.png, explorer-step.png, explorer-compare.png)
from the current build: the demo's SIMULATED run on a server of its own (loopback, a folder of its own,
stopped at the end), a second run of the project logged through verl's real ``Tracking`` to compare it
with, and Debian's chromium (headless, driven by playwright) on the run page, a step page with its
samples, and the two runs compared with the cursor on a step.

    python3 scripts/make_screenshots.py            # writes docs/explorer-*.png
    python3 scripts/make_screenshots.py --out DIR  # elsewhere

Needs what the explorer's browser tests need: prometheus and chromium (Debian packages), playwright
(the test extra). Takes a few minutes (the demo's run is most of it).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
TOKEN = "screenshots-token-" + os.urandom(6).hex()
PROJECT = "rl-insight-demo"
RUN, OTHER = "grpo-demo", "grpo-demo-lr3e-6"
STEPS = 16
STEP = 6  # the step page shown
PORTS = ("port", "prometheus_port", "tempo_port", "tempo_grpc_port", "otlp_http_port", "otlp_grpc_port",
         "grafana_port", "alertmanager_port")  # fmt: skip
SECOND_RUN = """
import sys
from verl.utils.tracking import Tracking
from verl_rl_insight.commands.demo.verl_step import step_metrics  # what verl's trainer logs at a step
tracking = Tracking(sys.argv[1], sys.argv[2], default_backend=["rl_insight"])
for step in range(1, int(sys.argv[3]) + 1):
    metrics = step_metrics(step, int(sys.argv[3]))
    for key in ("critic/score/mean", "critic/rewards/mean"):  # it learns a little faster: apart from the first
        if key in metrics:
            metrics[key] *= 1.15
    tracking.log(metrics, step=step)
tracking.finish()
"""


def free_ports(n: int) -> list[int]:
    found: set[int] = set()
    while len(found) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            found.add(s.getsockname()[1])
    return sorted(found)


def rl_insight(env: dict[str, str], *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "verl_rl_insight", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"rl-insight {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def shoot(base: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    run = f"{base}/runs/{PROJECT}/{RUN}"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})

        def open_page(url: str, view: str) -> None:
            tab.goto(url)
            tab.wait_for_selector(f"body[data-ready={view}]", timeout=60_000)

        open_page(run, "run")
        tab.fill("[data-testid=token-form] input", TOKEN)  # as a person would: kept in the tab
        with tab.expect_navigation():
            tab.click("[data-testid=token-form] button")
        tab.wait_for_selector("body[data-ready=run]")
        tab.screenshot(path=str(out / "explorer-run.png"))
        open_page(f"{run}/steps/{STEP}", "step")
        tab.wait_for_selector("body[data-samples]")
        tab.screenshot(path=str(out / "explorer-step.png"), full_page=True)
        open_page(f"{run}?compare={OTHER}", "run")
        score = tab.locator("[data-testid=panel][data-title='Score and reward'] canvas").first
        box = score.bounding_box()
        if box is not None:  # the cursor on a step: the values under each panel, one cursor across them
            tab.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
        tab.screenshot(path=str(out / "explorer-compare.png"))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="where the pictures go (default docs/)")
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        raise SystemExit(f"no {CHROMIUM}: install the Debian package `chromium`")
    with tempfile.TemporaryDirectory(prefix="rl-insight-screenshots-") as tmp:
        folder = Path(tmp)
        config = {"bind": "127.0.0.1", **dict(zip(PORTS, free_ports(len(PORTS)))), "scrape_interval_s": 1,
                  "data_dir": str(folder / "data"), "token": TOKEN,
                  "services": {"tempo": {"enabled": False}, "grafana": {"enabled": False}}}  # fmt: skip
        (folder / "server.yaml").write_text(yaml.safe_dump(config))
        env = {**os.environ, "RL_INSIGHT_HOME": str(folder / "home"), "PYTHONPATH": str(REPO)}
        env.pop("VERL_RL_INSIGHT_CONFIG", None)
        base = f"http://127.0.0.1:{config['port']}"
        try:
            rl_insight(env, "demo", "--steps", str(STEPS), "--step-seconds", "1", "--config",
                       str(folder / "server.yaml"), "--experiment", RUN)  # fmt: skip
            trainer = {**env, "RL_INSIGHT_SERVER_URL": f"http://rl-insight:{TOKEN}@127.0.0.1:{config['port']}"}
            logged = subprocess.run([sys.executable, "-c", SECOND_RUN, PROJECT, OTHER, str(STEPS)], env=trainer,
                                    capture_output=True, text=True, timeout=600, cwd=REPO)  # fmt: skip
            if logged.returncode != 0:
                raise SystemExit(f"the second run failed:\n{logged.stderr[-3000:]}")
            shoot(base, args.out)
        finally:
            subprocess.run([sys.executable, "-m", "verl_rl_insight", "server", "stop"], env=env, timeout=120,
                           capture_output=True, cwd=REPO)  # fmt: skip
    for name in ("explorer-run.png", "explorer-step.png", "explorer-compare.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
