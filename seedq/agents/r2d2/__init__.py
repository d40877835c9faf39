"""R2D2 (Kapturowski et al. 2019) on central inference: recurrent DQN with prioritised sequence
replay, stored state and burn-in, n-step double-Q targets with value rescaling.

The learner acts epsilon-greedily with the online network: exploring envs on the Ape-X epsilon
ladder, the last ``eval_batches`` env batches with ``eval_epsilon`` (the run is judged by
them). Sequences go to the replay at a bounded replay ratio; the training thread samples them.
"""
