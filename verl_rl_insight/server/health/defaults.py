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
    "validation_window": 20,  # validations whose changes are the validation set's noise
    "validation_drop": 0.15,  # a validation score this share below the median of the three before ...
    "validation_mads": 3,  # ... and this many times its noise
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
