#!/bin/bash
# A sweep as Slurm jobs through Hydra's submitit launcher (pip install 'seedq[slurm]'): run
# this on the login node; each job of the sweep is one sbatch job, and this command waits
# for all of them. Each job here trains with its actors as local processes on its one node
# (launcher=local); for jobs spanning nodes add hydra.launcher.nodes=2 launcher=slurm
# launcher.actors_per_host=8 broker.host=0.0.0.0 security.keys_dir=$HOME/.seedq/keys (submitit
# starts one task per node, so the actors per node are set, not read from the job).
#   scripts/slurm/sweep.sh algorithm.lr=1e-4,3e-4,6e-4 seed=0,1
set -euo pipefail
exec seedq-train -m hydra/launcher=submitit_slurm \
  hydra.launcher.timeout_min=120 hydra.launcher.cpus_per_task=8 \
  hydra.launcher.tasks_per_node=1 hydra.launcher.nodes=1 \
  actor.num_actors=6 "$@"
