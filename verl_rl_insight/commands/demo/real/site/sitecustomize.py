"""On the PYTHONPATH of a real verl run on the CPU only (runner.py puts it there): every process of
that run, vLLM's spawned engine processes included, gets the torch and vLLM parts (cpu_patches.py)."""

try:
    from verl_rl_insight.commands.demo.real.cpu_patches import install_process_patches

    install_process_patches()
except Exception as exc:  # a broken shim must not stop Python from starting; the run will say what fails
    import sys

    print(f"rl-insight real run: the CPU shim did not load: {exc!r}", file=sys.stderr)
