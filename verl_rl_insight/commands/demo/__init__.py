"""``rl-insight demo``: a SIMULATED verl run through the real patches (no model, no GPU needed).

The simulated parts are named so: ``simulated_engines`` (vLLM / SGLang replicas serving the
engines' real metric names), ``simulated_nvml`` (GPUs, when the machine has none) and the
task runner in ``simulation``; everything else is the real thing: verl's ``run_ppo``, Ray,
``Tracking``, ``marked_timer``, ``DataProto``, ``compute_advantage``, ``LLMServerManager``.
"""
