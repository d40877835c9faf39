#!/usr/bin/env bash
# Wheels of what seedq needs and the GPU machine lacks (it has Python 3.12, torch with CUDA,
# numpy, msgpack, uvloop, tensorboard, tqdm, pytest, hypothesis, joblib, pyyaml; no network),
# for CPython 3.12 on x86-64 Linux, into DIR (default .whl/ in this checkout, which git ignores).
# Run it where pip reaches PyPI, then carry DIR to the GPU machine; scripts/gpu_check.sh
# installs them into a private folder there. Versions are the ones this machine runs, so the
# GPU machine runs what the tests here ran.
#   scripts/fetch_gpu_wheels.sh [--sample-factory] [DIR]
# --sample-factory also fetches Sample Factory 2.1.1 and the versions it runs with into
# DIR/sample-factory/ (gpu_check.sh's sample_factory step installs them in a folder of their own).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SF=0
if [ "${1:-}" = "--sample-factory" ]; then SF=1; shift; fi
DEST=${1:-$ROOT/.whl}
PY=${PYTHON:-python3}
mkdir -p "$DEST"
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
pinned=()
for pkg in pyzmq gymnasium farama-notifications ale-py hydra-core omegaconf \
           hydra-joblib-launcher; do
  pinned+=("$pkg==$(version "$pkg")")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST" "${pinned[@]}"
# Hydra's parser runtime is published as a source archive only: build its (pure Python) wheel.
"$PY" -m pip wheel -q --no-deps -w "$DEST" "antlr4-python3-runtime==$(version antlr4-python3-runtime)"
if [ "$SF" = 1 ]; then
  # The set that ran Sample Factory 2.1.1 offline on the H100 machine (docs: DESIGN.md).
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST/sample-factory" \
    sample-factory==2.1.1 gymnasium==0.29.1 numpy==1.26.4 ale-py==0.9.1 faster-fifo==1.5.2 \
    signal-slot-mp==1.0.5 colorlog tensorboardX farama-notifications
fi
ls -1 "$DEST"
du -sh "$DEST"
