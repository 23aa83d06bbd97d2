"""``rl-insight doctor``: the "dashboard shows no data" checklist, automated.

Each check prints one line, ok or PROBLEM, and for a problem the fix. Exit code 1 when any
check found a problem. Hydra overrides after ``--`` are checked as the training job would see
them (``rl-insight doctor -- actor_rollout_ref.rollout.disable_log_stats=True``).
"""
