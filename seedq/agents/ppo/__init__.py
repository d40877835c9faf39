"""PPO (Schulman et al. 2017) on central inference, for discrete and continuous actions.

On-policy through SEED's pipeline: completed unrolls are gathered into a batch of
``batch_size`` env columns; with ``pause_acting`` the sink then blocks central inference until
the training thread has finished its epochs on that batch, so the actors' next steps are taken
by the new policy (the broker stops answering meanwhile: backpressure, not lost data). Unrolls
that straddle an update carry the old policy's parameters as behaviour, so their importance
ratios start away from 1 and the clipped objective treats them as it should. Under
``arch=anakin`` each unroll collected on the device is one batch, trained on at once.
"""
