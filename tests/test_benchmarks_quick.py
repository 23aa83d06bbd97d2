"""Every benchmark in benchmarks/ runs in its quick mode (``--quick``: that it runs, not a figure), so
none rots unseen: a benchmark that crashes, or prints no figures, fails here. The figures themselves
are for a person to read (the docs' benchmarks page), never asserted: the quick sizes are too small."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TOOLS = {  # not benchmarks: the shapes the detectors are judged on, a server process, converters
    "health_shapes.py",
    "health_gradual.py",
    "hub_process.py",
    "real_runs_convert.py",
    "real_runs_from_wandb.py",
    "wandb_history_export.py",  # a converter (the import tests' wandb export), not a benchmark
    "cuda_trace.py",
}

# what each prints (a JSON object, or bench_health's table) and a key or line that shows its figures came out
EXPECTED = {
    "bench_explorer_api.py": "a 2,000-step curve",
    "bench_explorer_page.py": "run_median_ms",
    "bench_group_stats.py": "group_stats",
    "bench_hardware_sampler.py": "share_of_one_core_at_1hz_percent",
    "bench_health.py": "| mode | over 20 steps",
    "bench_http_layers.py": "exposition",
    "bench_hub.py": "ingest",
    "bench_profile_analyze.py": "profile analyze",
    "bench_profile_boundary.py": "this",
    "bench_scale.py": "job",
    "bench_slow_readers.py": "p99_ratio",
    "bench_span_store.py": "ratio_median_last_over_first",
    "bench_tracking_log.py": "results",
}

# and further lines a text benchmark prints in its quick mode
ALSO = {"bench_health.py": ("online cost: HealthMonitor.observe",)}


def test_every_benchmark_has_a_quick_mode_checked_here():
    found = {p.name for p in BENCHMARKS.glob("*.py")} - TOOLS
    assert found == set(EXPECTED), "a benchmark without a quick run here (or one here that is gone)"
    for name in found:
        assert '"--quick"' in (BENCHMARKS / name).read_text(), f"{name} has no --quick"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_quick_mode_runs_and_prints_its_figures(name):
    # TMPDIR short: Chromium's singleton socket lies under it, and a Unix socket path has at most 107
    # bytes (under -n, pytest's tmp_path is one folder deeper and Chromium aborted on it)
    with tempfile.TemporaryDirectory(prefix="bq", dir="/tmp") as tmp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)]), "TMPDIR": tmp}
        done = subprocess.run(
            [sys.executable, str(BENCHMARKS / name), "--quick"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, f"{name} --quick failed:\n{done.stderr[-3000:]}"
    out = done.stdout
    if out.lstrip().startswith("{"):
        assert EXPECTED[name] in json.loads(out), f"{name} printed no {EXPECTED[name]!r}: {out[:500]}"
    else:
        for want in (EXPECTED[name], *ALSO.get(name, ())):
            assert want in out, f"{name} printed no {want!r}: {out[:500]}"
