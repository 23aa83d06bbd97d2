"""The detectors' settings (``rl-insight server``'s ``alerts:`` mapping overrides them): calibrated
on real verl runs (``../shared/real_runs``, ``tests/data/real_runs``)."""

DEFAULTS: dict[str, float] = {
    "window": 20,  # baseline steps before the newest ones
    "min_history": 10,  # fewer baseline steps than this: no verdict yet
    "recent": 3,  # the newest steps tested together (their median): one wild step is not a trend
    "entropy_window": 50,  # entropy's level: the upper quartile of this many steps before ...
    "entropy_collapse_share": 0.15,  # ... and a collapse below this share of it
    "entropy_mads": 4,
    "entropy_blowup_ratio": 2.5,  # entropy above this many times its lower quartile before ...
    "entropy_blowup_rise": 0.3,  # ... and this many nats above it
    "reward_collapse_share": 0.7,  # score below this share of its level over reward_window steps ...
    "reward_mads": 4,
    "reward_window": 50,
    "plateau_steps": 40,  # the score's trend over this many steps ...
    "plateau_ratio": 2.0,  # ... within this many standard errors of no trend at all: a plateau (info)
    "plateau_sustain": 3,
    "kl_ratio": 3.0,  # KL to the reference above this many times its median before ...
    "kl_mads": 6,
    "kl_rise": 0.1,  # ... and this far above it (nats): KL grows from 0 in every run
    "kl_min_history": 3,  # a KL that runs away in a run's first 10 steps is found there
    "spike_steps": 3,  # this many steps in a row ...
    "spike_window": 50,
    "spike_ratio": 3.0,  # ... all above this many times the median before ...
    "spike_tail": 1.2,  # ... and this many times the 90th percentile before (the run's own tail)
    "clip_ratio": 2.0,
    "clip_mads": 5,
    "clip_min": 0.05,  # a clip fraction below this is never a runaway
    "length_ratio": 1.5,
    "length_mads": 5,
    "length_window": 30,
    "length_collapse_share": 0.5,  # mean response length below this share of its level before
    "length_mads_collapse": 4,
    "truncation_window": 30,
    "truncation_rise": 0.15,  # response_length/clip_ratio up by this much (absolute) ...
    "truncation_ratio": 2.0,  # ... and this many times its median before
    "truncation_level": 0.3,  # a third of the responses cut (each of truncation_level_steps steps): a warning
    "truncation_level_steps": 5,  # whatever its trend (their rewards and advantages are wrong)
    # the slow side of each detector (trends.py): the median of the newest trend_recent steps against the
    # median of the steps trend_near-trend_far before, beyond trend_mads x the noise of that difference and
    # with a Mann-Kendall trend (z beyond trend_z) over those steps; and beyond each mode's share of the level
    "trend_recent": 5,
    "trend_near": 20,
    "trend_far": 60,
    "trend_min_history": 10,
    "trend_mads": 4,
    "trend_z": 3.0,
    "trend_score_fall": 0.05,  # the training score down this share with an entropy / length change: critical
    "trend_entropy_fall": 0.6,  # entropy below 40 % of its level 20-60 steps before
    "trend_entropy_rise": 0.4,  # entropy 1.4x its level ... (healthy public runs: at most 1.21x)
    "trend_entropy_abs": 0.1,  # ... and this many nats above it (healthy public runs: at most 0.006)
    "trend_reward_fall": 0.12,  # healthy public runs: at most 3 % in 20-60 steps
    "trend_kl_rise": 2.0,  # 3x ...
    # ... and this many nats above (healthy public runs: at most 0.06 in 20-60 steps; an in-reward KL grows
    # from 0 to 0.17 over the notebook run's 60 healthy steps)
    "trend_kl_abs": 0.15,
    "trend_grad_rise": 2.0,  # the gradient norm's median 3x
    "trend_clip_rise": 2.0,  # the clip fraction 3x (and clip_min above)
    "trend_length_rise": 0.6,
    "trend_length_fall": 0.2,  # a fifth shorter, the score not rising
    "trend_truncation_share": 1.0,  # the truncated share 2x ...
    "trend_truncation_rise": 0.1,  # ... and up by this much (absolute)
    "trend_throughput_fall": 0.18,  # healthy public runs: at most 14 %
    "trend_throughput_mads": 3,
    "trend_throughput_z": 2.6,
    "validation_collapse": 0.9,  # a validation this share below the one before: critical from 2 points
    "validation_window": 20,  # validations whose changes are the validation set's noise
    "validation_drop": 0.08,  # a validation score this share below its level (validation.py) ...
    "validation_blind_drop": 0.25,  # ... this share where its noise is not known yet (3-4 validations)
    "validation_mads": 2.5,  # ... and this many times the noise of the newest validations' median
    "divergence_steps": 100,  # validation down from its best of this many steps, the training score up ...
    "divergence_mads": 3,  # ... each beyond this many times its noise
    "divergence_share": 0.1,  # ... validation down by this share of its level
    "throughput_ratio": 0.5,
    "throughput_mads": 4,
    "mismatch_warning": 0.005,  # training/rollout_probs_diff_mean, as RLInsightRolloutProbsDiff*
    "mismatch_critical": 0.01,
    "stall_ratio": 5.0,  # a step this many times the run's median step time ...
    "stall_s": 900,  # ... and at least this long (RLInsightTrainingStalled's stalled_for)
    "signal_sustain": 3,  # no learning signal for this many steps
    "zero_variance_share": 0.8,  # this share of the groups or more with all-equal rewards ...
    "zero_variance_sustain": 5,  # ... for this many steps in a row
}
