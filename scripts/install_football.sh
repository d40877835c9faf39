#!/usr/bin/env bash
# Install Google Research Football (gfootball 2.10.2) beside seedq, for `seedq-train env=football`.
#
#   bash scripts/install_football.sh        # ~20 min on 2 cores the first time, seconds after
#
# gfootball has no wheel for Python 3.11, so this builds one from the PyPI sources (Debian's
# cmake, SDL2, Boost.Python and GL dev packages) and caches it under $SEEDQ_WHEEL_CACHE
# (default ~/.cache/seedq/wheels). gfootball's own metadata pins old gym and opencv-python, which
# clash with seedq's environment, so the wheel goes in with --no-deps and the few packages it
# imports at run time come from seedq's `football` extra in pyproject.toml. Idempotent: it stops
# early when gfootball already steps, and ends by stepping one environment as a self-check.
#
# Environment: PYTHON (default python3), SEEDQ_WHEEL_CACHE, SEEDQ_SKIP_APT=1 (deps present).
set -euo pipefail

GFOOTBALL_VERSION=2.10.2
PYTHON=${PYTHON:-python3}
CACHE=${SEEDQ_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/seedq/wheels}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Build and run-time packages: the dev packages pull in the shared libraries the engine loads.
DEBIAN_PACKAGES=(
  build-essential cmake pkg-config
  libgl1-mesa-dev libegl1-mesa-dev
  libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev libsdl2-gfx-dev
  libboost-dev libboost-thread-dev libboost-system-dev libboost-filesystem-dev
  libboost-python-dev
)

log() { echo "[install_football] $*"; }

self_check() {
  "$PYTHON" - <<'EOF'
import time
import gfootball.env as football_env

env = football_env.create_environment(
    env_name="academy_empty_goal_close", representation="simple115v2", render=False
)
obs = env.reset()
start, steps = time.perf_counter(), 0
done = False
while not done and steps < 200:
    obs, reward, done, info = env.step(env.action_space.sample())
    steps += 1
env.close()
rate = steps / (time.perf_counter() - start)
print(f"[install_football] self-check: academy_empty_goal_close stepped {steps} times "
      f"({rate:.0f} steps/s), observation {obs.shape} {obs.dtype}")
EOF
}

if self_check 2>/dev/null; then
  log "gfootball is already installed and steps; nothing to do."
  exit 0
fi

install_debian_packages() {
  if [[ "${SEEDQ_SKIP_APT:-0}" == "1" ]]; then
    log "SEEDQ_SKIP_APT=1: not checking Debian packages."
    return
  fi
  local missing=()
  for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "Debian build dependencies present."
    return
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || {
      echo "[install_football] error: need root or sudo to install: ${missing[*]}" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

# The packages gfootball imports at run time, as declared in seedq's `football` extra.
runtime_requirements() {
  "$PYTHON" - "$REPO_ROOT/pyproject.toml" <<'EOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["optional-dependencies"]["football"]))
EOF
}

install_debian_packages

mapfile -t RUNTIME < <(runtime_requirements)
log "installing gfootball's run-time imports: ${RUNTIME[*]}"
"$PYTHON" -m pip install -q "${RUNTIME[@]}"

PY_TAG=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
mkdir -p "$CACHE"
shopt -s nullglob
wheels=("$CACHE"/gfootball-"$GFOOTBALL_VERSION"-"$PY_TAG"-*.whl)
if [[ ${#wheels[@]} -eq 0 ]]; then
  log "building gfootball $GFOOTBALL_VERSION for $PY_TAG from source (about 20 minutes)..."
  # The engine's build script calls `python3` (for psutil): make that our interpreter.
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  ln -s "$(command -v "$PYTHON")" "$shim/python3"
  PATH="$shim:$PATH" "$PYTHON" -m pip wheel --no-deps --no-build-isolation --no-binary gfootball \
    "gfootball==$GFOOTBALL_VERSION" -w "$CACHE"
  wheels=("$CACHE"/gfootball-"$GFOOTBALL_VERSION"-"$PY_TAG"-*.whl)
  [[ ${#wheels[@]} -gt 0 ]] || {
    echo "[install_football] error: the build produced no wheel in $CACHE" >&2
    exit 1
  }
  log "cached ${wheels[0]}"
else
  log "using cached wheel ${wheels[0]}"
fi

"$PYTHON" -m pip install -q --no-deps --force-reinstall "${wheels[0]}"
self_check
