#!/usr/bin/env bash
# Install Google Research Football (gfootball 2.10.2) beside seedq, for `seedq-train env=football`.
#
#   bash scripts/install_football.sh                      # the interpreter `python3` finds
#                                                         # (an activated venv, pyenv, system)
#   PYTHON=/path/to/venv/bin/python bash scripts/install_football.sh   # a venv, not activated
#   bash scripts/install_football.sh --make-shim DIR      # only write DIR/python3 (see below)
#
# Everything goes into the environment of $PYTHON (default python3): the build-time packages
# (setuptools, wheel, psutil), seedq's `football` extra and gfootball itself. gfootball has no
# wheel for Python 3.11, so this builds one from the PyPI sources (Debian's cmake, SDL2,
# Boost.Python and GL dev packages) and caches it under $SEEDQ_WHEEL_CACHE (default
# ~/.cache/seedq/wheels): minutes the first time, seconds after. gfootball's own metadata pins
# old gym and opencv-python, which clash with seedq's environment, so the wheel goes in with
# --no-deps and the few packages it imports at run time come from seedq's `football` extra in
# pyproject.toml. Idempotent: it stops early when gfootball already steps, and ends by stepping
# one environment as a self-check. Whatever can be checked before the long compile (interpreter,
# pip, Debian packages or root to install them, compiler, free disk) is checked first, and every
# failure ends with one `[install_football] error:` line saying what failed and what to do.
#
# Environment: PYTHON (default python3), SEEDQ_WHEEL_CACHE, SEEDQ_SKIP_APT=1 (deps present).
set -Eeuo pipefail

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
# The build runs without build isolation (gfootball's sdist declares no build requirements),
# so what setup.py and the engine's build script import must be in $PYTHON's environment.
BUILD_REQUIREMENTS=("setuptools>=61" "wheel>=0.38" "psutil>=5.9")
# Free space the build needs: sources, CMake tree and objects stay under 1 GiB in $TMPDIR.
BUILD_SPACE_MB=2048
CACHE_SPACE_MB=100

log() { echo "[install_football] $*"; }
die() {
  echo "[install_football] error: $*" >&2
  exit 1
}

# Any command that fails without its own message still ends the run with one line naming the
# step it was in.
STEP="starting"
on_error() {
  local rc=$?
  ((BASH_SUBSHELL == 0)) || return "$rc"
  echo "[install_football] error: $STEP failed (exit $rc); see the output above." >&2
}
trap on_error ERR

# Write DIR/python3, a wrapper that execs $PYTHON's interpreter by its full path. The engine's
# build script calls `python3` (for psutil); a symlink would not do, because an interpreter
# started through a symlink in another directory does not find the venv's pyvenv.cfg and runs
# as the base Python, without the venv's packages.
make_shim() {
  local dir=$1 executable
  executable=$("$PYTHON" -c 'import sys; print(sys.executable)')
  [[ -n "$executable" ]] || die "$PYTHON reports no sys.executable; set PYTHON to a full path."
  mkdir -p "$dir"
  printf '#!/bin/sh\nexec %q "$@"\n' "$executable" >"$dir/python3"
  chmod +x "$dir/python3"
}

# Free megabytes on the file system holding $1 (or its nearest existing parent).
free_mb() {
  local path=$1
  while [[ ! -e "$path" ]]; do path=$(dirname "$path"); done
  df -Pm "$path" | awk 'NR == 2 { print $4 }'
}

check_python() {
  STEP="checking PYTHON=$PYTHON"
  "$PYTHON" -c 'import sys' 2>/dev/null \
    || die "PYTHON=$PYTHON does not run; set PYTHON to the interpreter seedq is installed in."
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    || die "$PYTHON is older than Python 3.11; point PYTHON at seedq's interpreter."
  "$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "no pip in $PYTHON's environment; run '$PYTHON -m ensurepip --upgrade', then re-run."
}

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

install_debian_packages() {
  STEP="installing Debian packages"
  if [[ "${SEEDQ_SKIP_APT:-0}" == "1" ]]; then
    log "SEEDQ_SKIP_APT=1: not checking Debian packages."
    return
  fi
  command -v dpkg-query >/dev/null \
    || die "no dpkg-query (not Debian/Ubuntu): install the equivalents of ${DEBIAN_PACKAGES[*]}, then re-run with SEEDQ_SKIP_APT=1."
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
    command -v sudo >/dev/null \
      || die "not root and no sudo to install Debian packages; as root run 'apt-get install ${missing[*]}', then re-run."
    sudo=(sudo)
  fi
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

# What only the compile needs: a C++ compiler, cmake, and room to build and cache the wheel.
check_build_prerequisites() {
  STEP="checking build prerequisites"
  command -v c++ >/dev/null || command -v g++ >/dev/null \
    || die "no C++ compiler on PATH; install one (Debian: apt-get install build-essential), then re-run."
  command -v cmake >/dev/null \
    || die "no cmake on PATH; install it (Debian: apt-get install cmake), then re-run."
  local tmp=${TMPDIR:-/tmp} free
  free=$(free_mb "$tmp")
  ((free >= BUILD_SPACE_MB)) \
    || die "only ${free} MB free in $tmp, the build needs ${BUILD_SPACE_MB} MB; free space or set TMPDIR to a larger disk."
  free=$(free_mb "$CACHE")
  ((free >= CACHE_SPACE_MB)) \
    || die "only ${free} MB free for the wheel cache $CACHE; free space or set SEEDQ_WHEEL_CACHE elsewhere."
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

if [[ "${1:-}" == "--make-shim" ]]; then
  [[ $# -eq 2 ]] || die "usage: bash scripts/install_football.sh --make-shim DIR"
  STEP="writing the python3 shim"
  make_shim "$2"
  exit 0
fi
[[ $# -eq 0 ]] || die "unknown argument '$1'; usage: bash scripts/install_football.sh [--make-shim DIR]"

check_python
PREFIX=$("$PYTHON" -c 'import sys; print(sys.prefix)')
log "installing into $PREFIX (PYTHON=$PYTHON)"

if self_check 2>/dev/null; then
  log "gfootball is already installed and steps; nothing to do."
  exit 0
fi

PY_TAG=$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
mkdir -p "$CACHE"
shopt -s nullglob
wheels=("$CACHE"/gfootball-"$GFOOTBALL_VERSION"-"$PY_TAG"-*.whl)

install_debian_packages
[[ ${#wheels[@]} -gt 0 ]] || check_build_prerequisites

STEP="installing gfootball's run-time imports"
mapfile -t RUNTIME < <(runtime_requirements)
log "installing gfootball's run-time imports: ${RUNTIME[*]}"
"$PYTHON" -m pip install -q "${RUNTIME[@]}"

if [[ ${#wheels[@]} -eq 0 ]]; then
  STEP="installing build requirements"
  log "installing build requirements: ${BUILD_REQUIREMENTS[*]}"
  "$PYTHON" -m pip install -q "${BUILD_REQUIREMENTS[@]}"
  STEP="building gfootball $GFOOTBALL_VERSION"
  log "building gfootball $GFOOTBALL_VERSION for $PY_TAG from source (minutes; see README)..."
  shim=$(mktemp -d)
  trap 'rm -rf "$shim"' EXIT
  make_shim "$shim"
  PATH="$shim:$PATH" "$PYTHON" -m pip wheel --no-deps --no-build-isolation --no-binary gfootball \
    "gfootball==$GFOOTBALL_VERSION" -w "$CACHE"
  wheels=("$CACHE"/gfootball-"$GFOOTBALL_VERSION"-"$PY_TAG"-*.whl)
  [[ ${#wheels[@]} -gt 0 ]] || die "the build produced no wheel in $CACHE; see the output above."
  log "cached ${wheels[0]}"
else
  log "using cached wheel ${wheels[0]}"
fi

STEP="installing the gfootball wheel"
"$PYTHON" -m pip install -q --no-deps --force-reinstall "${wheels[0]}"
STEP="the self-check (stepping academy_empty_goal_close)"
self_check
