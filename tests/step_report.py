"""A report file holding one profiled step, which the explorer's own page draws from disk: how the
profile tests see the step page in Chromium without a server (the page reads the same answer from a
report as from the API)."""

from verl_rl_insight.commands.report import html


def step_answer(number, profile, **more):
    """The step page's answer (GET /api/v1/explorer/step) of a step with no lanes and ``profile``."""
    return {
        "step": number, "start": 1.0, "end": 2.0, "duration_s": 1.0, "validation": False, "lanes": [],
        "slowest_replica": None, "long_tail_s": None, "idle_share": None, "hardware": [], "findings": [],
        "profile_command": None, "profile": profile, "moved_with": [], **more,
    }  # fmt: skip


def step_report(tmp_path, step):
    """The report file's URL at the step's page."""
    number = step["step"]
    run = {"project": "p", "experiment": "e", "keys": [], "findings": [], "steps": [number]}
    path = tmp_path / "report.html"
    data = {"runs": {"runs": []}, "run": run, "curves": {"steps": [], "series": {}}, "steps": {str(number): step}}
    path.write_text(html(data))
    return path.as_uri() + f"#/steps/{number}"
