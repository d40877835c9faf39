"""SAC (Haarnoja et al. 2018) on central inference, for continuous (Box) actions.

Actors only step envs. Central inference samples each action from the tanh-squashed Gaussian
policy (``seedq-eval mode=greedy`` takes its mean) and also computes the soft value of each
observation, which bootstraps a truncated episode's last transition. Completed unrolls are cut
into transitions and go to a uniform replay held at ``updates_per_step`` updates per env step by
a rate limiter; the training thread samples blocks of ``block_updates`` batches from it and
takes one update per batch. Observation statistics (with
``algorithm.model.obs_norm``) are merged as transitions enter the replay.
"""
