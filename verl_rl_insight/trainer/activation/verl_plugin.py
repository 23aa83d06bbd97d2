"""Target of verl >= 0.9's ``verl.plugins`` entry point: verl imports it on ``import verl``.

Activates like the ``.pth`` file does (so ``VERL_RL_INSIGHT_AUTOLOAD=0`` turns both off).
"""

from verl_rl_insight.trainer.activation.bootstrap import autoload

autoload()
