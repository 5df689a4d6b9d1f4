#!/usr/bin/env bash
# Installs the Python peers of the perf suite (torch's AdamW, DeepSpeed's DeepSpeedCPUAdam) into
# a venv inside kopt's dependency cache, once, and prints the venv's python on its last line of
# stdout. Called by `bootstrap-deps.sh --with-peers`, which first installs the Debian packages
# this needs (python3-dev, python3-venv, ninja-build, g++); run-perf.sh calls it again for the
# path (a second run finds the stamp file and returns at once).
#
# torch comes from PyPI with --no-deps: its CUDA 13 wheel imports and runs on the CPU, and of
# its nvidia-* dependencies only the four that the CUDA toolkit on kopt's machines lacks are
# installed (also --no-deps); the rest would be ~3 GB of libraries the toolkit already has.
# The other packages (torch's and DeepSpeed's requirements, read from their metadata) are pure
# Python or small wheels (numpy, psutil, pydantic-core) that depend on no torch, so installing
# them cannot pull a second torch; the script checks that it did not. DeepSpeed's CPU Adam op is
# compiled here once (torch.utils.cpp_extension, ninja, Python headers) so no timed run pays for
# it; a failure to compile is logged, not fatal: the peer script then reports DeepSpeed absent.
# The venv takes ~2.1 GB; the first run ~1 min of downloads plus 1-2 min of compiling.
#
# Env: KOPT_DEPS_PREFIX (as bootstrap-deps.sh), KOPT_PEERS_VENV (default: $prefix/peers-venv),
# KOPT_PEERS_PYTHON (the interpreter the venv is made from; default: Debian's /usr/bin/python3,
# whose headers python3-dev installs), KOPT_TORCH_VERSION, KOPT_DEEPSPEED_VERSION.
set -euo pipefail

log() { echo "bootstrap-peers: $*" >&2; }
prefix="${KOPT_DEPS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/kopt-deps}"
venv="${KOPT_PEERS_VENV:-$prefix/peers-venv}"
base_python="${KOPT_PEERS_PYTHON:-/usr/bin/python3}"
torch_version="${KOPT_TORCH_VERSION:-2.15.0}"
deepspeed_version="${KOPT_DEEPSPEED_VERSION:-0.19.8}"
stamp="$venv/.kopt-peers-torch-$torch_version-deepspeed-$deepspeed_version"
python="$venv/bin/python"

if [ -f "$stamp" ]; then
  log "torch $torch_version and deepspeed $deepspeed_version cached in $venv"
  echo "$python"
  exit 0
fi

t0=$(date +%s)
if [ ! -x "$python" ]; then
  "$base_python" -m venv "$venv" >&2 ||
    { log "cannot make a venv with $base_python (Debian: apt-get install python3-venv)"; exit 1; }
fi
# pip warns that torch's nvidia-*, cuda-* and triton requirements and DeepSpeed's ninja wheel are
# missing: they are left out on purpose, so those lines are dropped; the rest of pip's is shown.
pip() {
  local status=0
  "$python" -m pip install --disable-pip-version-check --no-input -q "$@" >"$venv/pip.log" 2>&1 ||
    status=$?
  grep -vE "dependency resolver does not currently|^torch .* requires (cuda-|nvidia-|triton)" \
    "$venv/pip.log" | grep -vE "^deepspeed .* requires ninja" >&2 || true
  return "$status"
}
requirements() {  # $1: an installed distribution; its requirements here, one a line, no extras
  "$python" - "$1" <<'EOF'
import importlib.metadata as md, sys
from pip._vendor.packaging.requirements import Requirement
for text in md.requires(sys.argv[1]) or []:
    r = Requirement(text)
    if r.marker is None or r.marker.evaluate({"extra": ""}):
        print(f"{r.name}{r.specifier}")
EOF
}

log "installing torch $torch_version (~540 MB download) and its small dependencies into $venv"
pip --no-deps "torch==$torch_version"
torch_requires="$(requirements torch)"
# torch's own dependencies less nvidia-*, cuda-* and triton (GPU only): all small, pure Python,
# none depending on torch. `wheel` lets pip build DeepSpeed's sdist without the legacy path.
mapfile -t torch_deps < <(grep -viE '^(nvidia-|cuda-|triton)' <<<"$torch_requires")
pip "${torch_deps[@]}" wheel
# The four CUDA 13 libraries torch links that the toolkit does not ship, at torch's own pins.
cuda_libs=()
for lib in nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13; do
  cuda_libs+=("$(grep -iE "^$lib([<>=~!]|$)" <<<"$torch_requires" || echo "$lib")")
done
pip --no-deps "${cuda_libs[@]}"

# DeepSpeed ships only an sdist whose setup.py imports torch: build it against the torch above,
# then its requirements less torch and the ninja wheel (Debian's ninja-build does that job).
log "installing deepspeed $deepspeed_version"
pip --no-deps --no-build-isolation "deepspeed==$deepspeed_version"
mapfile -t deepspeed_deps < <(requirements deepspeed | grep -viE '^(torch|ninja)([<>=~!]|$)')
pip "${deepspeed_deps[@]}"

# pip must not have pulled a second torch through any dependency.
installed="$("$python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
if [ "$installed" != "$torch_version" ]; then
  log "expected torch $torch_version, found $installed"
  exit 1
fi
"$python" -c 'import torch; torch.optim.AdamW([torch.zeros(4, requires_grad=True)])' ||
  { log "torch $torch_version does not import"; exit 1; }

log "compiling DeepSpeed's CPU Adam op (once; a minute or two)"
if ! "$python" "$(dirname "$0")/../perf/peers.py" --build-only >&2; then
  log "DeepSpeed's CPU Adam op did not build: the perf suite will report DeepSpeed as absent"
fi
touch "$stamp"
log "peers installed in $(( $(date +%s) - t0 )) s"
echo "$python"
