"""Importing this module activates verl_rl_insight:
``VERL_USE_EXTERNAL_MODULES=verl_rl_insight.trainer.activation.activate``."""

from verl_rl_insight.trainer.activation.bootstrap import activate

activate()
