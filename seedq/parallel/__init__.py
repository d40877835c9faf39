"""Data-parallel learners: one run on several learner devices (``hardware.learners=N``).

Each of N ranks runs the whole single-learner pipeline for its own data (broker, central
inference and actors under ``arch=seed``, env threads under ``arch=sebulba``, tensor envs under
``arch=anakin``) on its own device; the ranks average their gradients every update, so the
networks stay bit-identical, and act as one run: rank 0 writes metrics and checkpoints with
counters summed over the ranks. ``docs/distributed.md`` says how to start them.

* :mod:`~seedq.parallel.ranks`: which rank this process is, as torchrun or Slurm say (no torch);
* :mod:`~seedq.parallel.group`: the process group, gradient averaging, lockstep rounds;
* :mod:`~seedq.parallel.agreement`: what the run loop consults (``TrainingRun.dist``).

Starting ranks and what each rank runs is :mod:`seedq.learner_ranks`, beside ``seedq.cli``: it
builds runs (``seedq.arch``), which this package sits below.
"""
