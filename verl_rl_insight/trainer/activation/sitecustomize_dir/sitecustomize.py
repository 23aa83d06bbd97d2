"""Put first on PYTHONPATH by ``rl-insight run``: activates verl_rl_insight in every Python
process the command starts (Ray workers included), then runs the sitecustomize it shadows."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from verl_rl_insight.trainer.activation.bootstrap import autoload

    autoload()
except Exception:
    pass

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here]
)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
