#!/usr/bin/env bash
# seedq (V-trace) against Sample Factory 2.1.1 (APPO) on one env, one after the other, on this
# machine; writes that env's section of benchmarks/RESULTS.md.
#
#   bash scripts/bench_vs_sample_factory.sh --env cartpole --steps 3000000
#   bash scripts/bench_vs_sample_factory.sh --env pong --minutes 10 --threshold -15
#   bash scripts/bench_vs_sample_factory.sh --help
#
# The first run builds Sample Factory's own virtual environment in ~/.cache/seedq/sf-venv
# (about a minute; --venv to move it). seedq must be installed in the python3 that runs this.
# Environment: PYTHON (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec "${PYTHON:-python3}" scripts/bench_vs_sample_factory.py "$@"
