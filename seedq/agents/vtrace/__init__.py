"""IMPALA / V-trace (Espeholt et al. 2018) on central inference.

Completed unrolls are cut into batches of ``batch_size`` env columns for a small bounded queue
(fresh, nearly on-policy data); the training thread takes one batch per update
(:class:`~seedq.agents.common.onpolicy.OnPolicyAgent`). Under ``arch=anakin`` each unroll
collected on the device is trained on at once.
"""
