#!/usr/bin/env bash
# Wheels of what seedq needs and the GPU machine lacks (it has Python 3.12, torch with CUDA,
# numpy, msgpack, uvloop, tensorboard, tqdm, pytest, hypothesis, joblib, pyyaml; no network),
# for CPython 3.12 on x86-64 Linux, into DIR (default .whl/ in this checkout, which git ignores).
# Run it where pip reaches PyPI, then carry DIR to the GPU machine; scripts/gpu_check.sh
# installs them into a private folder there. Versions are the ones this machine runs, so the
# GPU machine runs what the tests here ran.
#   scripts/fetch_gpu_wheels.sh [DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
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
ls -1 "$DEST"
du -sh "$DEST"
