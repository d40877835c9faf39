#!/usr/bin/env bash
# Proves seedq's CUDA path on the GPU machine that runs it, unattended and offline, in under
# 30 minutes; writes one report: OUT/gpu_check.md and OUT/gpu_check.json (+ gpu_check.log).
#   scripts/gpu_check.sh                  # every step (OUT: $OUT, else ./gpu_check)
#   scripts/gpu_check.sh --cpu            # dry run: each step for seconds on the CPU
#   scripts/gpu_check.sh --only cuda_tests,cartpole_475 --out DIR
#   scripts/gpu_check.sh --pong-minutes 8 --merge earlier/gpu_check.json
#   scripts/gpu_check.sh --scale 0.5      # every timed step at half its length
# Steps (scripts/gpu_check.py): cuda_tests (pytest -m cuda), cartpole_475 (hardware=gpu to 475),
# pong_bf16 (Pong, no sticky actions, to 18, AMP bf16, at most --pong-minutes),
# pong_compile_{default,reduce-overhead,max-autotune}, raw_env (the envs alone), pong_share
# (training frames/s as a share of raw_env's, GPU utilisation), pong_share_eager (the same
# with hardware.cuda_graphs=false), pong_share_shards (with broker.shards=2), sample_factory (Sample
# Factory 2.1.1's fastest Pong configuration, when its wheels are here), bench_inference,
# bench_train, bench_pipeline,
# anakin, sebulba, learners (hardware.learners=<GPUs> over NCCL; skipped with one GPU).
# Needs Python >= 3.11 with torch (CUDA build) installed. seedq's other dependencies, if they
# are missing and the machine is offline, come from wheels carried in: scripts/fetch_gpu_wheels.sh
# puts them in .whl/ here (or SEEDQ_WHEELS=DIR); they are installed into a private folder, not
# into the machine's Python. seedq itself is imported from this checkout (no install).
# Sample Factory's wheels (scripts/fetch_gpu_wheels.sh --sample-factory: .whl/sample-factory/)
# go into a folder of their own: its gymnasium and numpy clash with seedq's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WHEELS=${SEEDQ_WHEELS:-$ROOT/.whl}
SITE=${SEEDQ_WHEEL_SITE:-/tmp/seedq-gpu-check-site}
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
cd "$ROOT"
missing=$("$PY" - <<'PY'
import importlib.util as u
need = ["torch", "numpy", "zmq", "msgpack", "gymnasium", "ale_py", "hydra", "omegaconf",
        "tensorboard", "tqdm", "pytest"]
print(" ".join(n for n in need if u.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "gpu_check: missing Python packages: $missing (run scripts/fetch_gpu_wheels.sh where" \
       "there is a network and carry .whl/ here)" >&2
  exit 2
fi
SF_WHEELS=$WHEELS/sample-factory
if [ -z "${SEEDQ_SF_SITE:-}" ] && ls "$SF_WHEELS"/*.whl >/dev/null 2>&1; then
  export SEEDQ_SF_SITE=/tmp/seedq-gpu-check-sf
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SEEDQ_SF_SITE" "$SF_WHEELS"/*.whl
  # Its spawned workers make PongNoFrameskip-v4, which ale_py registers when imported.
  echo "import ale_py  # noqa: F401" > "$SEEDQ_SF_SITE/sitecustomize.py"
fi
exec "$PY" "$ROOT/scripts/gpu_check.py" "$@"
