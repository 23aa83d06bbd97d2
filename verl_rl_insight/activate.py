"""Importing this module activates verl_rl_insight: ``VERL_USE_EXTERNAL_MODULES=verl_rl_insight.activate``."""

from .bootstrap import activate

activate()
