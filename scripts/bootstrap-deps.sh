#!/usr/bin/env bash
# Installs everything kopt needs to build, test and benchmark on a Debian 12 machine, and
# prints the CMAKE_PREFIX_PATH to use on its last line of stdout.
#
# Kokkos and Kokkos Kernels: if a Kokkos install is already visible (Kokkos_ROOT or
# CMAKE_PREFIX_PATH holding a KokkosConfig.cmake) nothing is built. Otherwise both are
# built from Debian 12's own `trilinos` *source* package (Kokkos 3.4.01, OpenMP + Serial;
# Debian's binary Kokkos is Serial-only) into a cache prefix that later runs reuse:
#   KOPT_DEPS_PREFIX  (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kopt-deps)
# The script is idempotent: a second run finds the stamp file and returns at once.
#
# Debian packages (cmake, g++, gfortran, GoogleTest, Google Benchmark, clang for fuzzing, ...)
# are installed when missing, which needs root. Options:
#   --with-mpi        also install OpenMPI (kopt_ENABLE_MPI)
#   --with-libtorch   also install libtorch-dev (the perf suite's libtorch AdamW peer)
#   --with-plot       also install gnuplot-nox (scripts/plot-perf.py)
#   --with-peers      also install python3-dev and python3-venv, then torch and DeepSpeed from
#                     PyPI into a venv in the cache prefix (scripts/bootstrap-peers.sh; the perf
#                     suite's Python peers, perf/peers.py)
#   --with-cuda       instead build Kokkos and Kokkos Kernels 3.4.01 with Cuda (machine code for
#                     sm_80 and sm_90: Ampere/Ada and Hopper) + OpenMP + Serial into "$prefix/cuda", and print
#                     that prefix; configure kopt with -DCMAKE_TOOLCHAIN_FILE=<it>/toolchain.cmake.
#                     Compile-only (no GPU needed). Debian's CUDA 11.8 (non-free) with Clang 16 as
#                     the CUDA compiler: nvcc 11.8 has no C++20 (docs/cuda-builds.md).
set -euo pipefail

log() { echo "bootstrap-deps: $*" >&2; }
want_mpi=0 want_libtorch=0 want_plot=0 want_peers=0 want_cuda=0
for arg in "$@"; do
  case "$arg" in
    --with-mpi) want_mpi=1 ;;
    --with-libtorch) want_libtorch=1 ;;
    --with-plot) want_plot=1 ;;
    --with-peers) want_peers=1 ;;
    --with-cuda) want_cuda=1 ;;
    *) log "unknown option '$arg'"; exit 2 ;;
  esac
done

prefix="${KOPT_DEPS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/kopt-deps}"
jobs="$(nproc 2>/dev/null || echo 2)"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_updated=0
apt_update() {
  [ "$apt_updated" = 1 ] && return 0
  as_root apt-get update -qq >&2
  apt_updated=1
}

# --- Debian packages ---------------------------------------------------------------
# libopenblas-dev: Kokkos Kernels' BLAS on host spaces (Muon's gemms).
packages=(cmake g++ gfortran make ninja-build libgtest-dev libgmock-dev libbenchmark-dev xz-utils clang
  python3 libopenblas-dev)
[ "$want_mpi" = 1 ] && packages+=(libopenmpi-dev openmpi-bin)
[ "$want_libtorch" = 1 ] && packages+=(libtorch-dev)
[ "$want_plot" = 1 ] && packages+=(gnuplot-nox)
# DeepSpeed compiles its CPU Adam op at first use: Python headers, ninja (above) and g++.
[ "$want_peers" = 1 ] && packages+=(python3-dev python3-venv)
# nvidia-cuda-toolkit is in contrib/non-free; libstdc++ 11 (g++-11) because CUDA 11.8's
# __noinline__ macro breaks libstdc++ 12's <memory> under Clang; libomp for Kokkos' OpenMP.
[ "$want_cuda" = 1 ] && packages+=(nvidia-cuda-toolkit g++-11 clang-16 libomp-16-dev)
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
nonfree_list=/etc/apt/sources.list.d/kopt-non-free.sources
if [ "$want_cuda" = 1 ] && [ "${#missing[@]}" -gt 0 ] && [ ! -f "$nonfree_list" ] &&
   ! grep -qsE '^(Components:|deb ).*[[:space:]]non-free([[:space:]]|$)' /etc/apt/sources.list \
     /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; then
  # This release's deb stanzas (deb822 as Debian 12 writes them) with contrib and non-free.
  tmp="$(mktemp)"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && awk -v rel="$codename" 'BEGIN { RS=""; ORS="\n\n" }
      $0 ~ ("Suites:[^\n]*" rel) && $0 ~ /Types:[^\n]*deb( |\n|$)/ {
        sub(/Types:[^\n]*/, "Types: deb"); sub(/Components:[^\n]*/, "Components: contrib non-free")
        print }' "$f" >>"$tmp"
  done
  [ -s "$tmp" ] || { log "no deb822 apt source for '$codename' to enable non-free in"; exit 1; }
  log "enabling contrib and non-free in $nonfree_list"
  as_root install -m 0644 "$tmp" "$nonfree_list"
  rm -f "$tmp"
fi
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt_update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi

# --- The Python peers (their own venv and stamp; before any early exit below) ---------------
if [ "$want_peers" = 1 ]; then
  KOPT_DEPS_PREFIX="$prefix" bash "$(dirname "$0")/bootstrap-peers.sh" >&2
fi

# --- An existing Kokkos wins (not for --with-cuda: it may have no Cuda) ----------------
has_kokkos() {  # $1: a prefix; true when it holds a KokkosConfig.cmake
  [ -n "$1" ] && find "$1" -maxdepth 5 -name KokkosConfig.cmake -print -quit 2>/dev/null | grep -q .
}
if [ "$want_cuda" = 0 ] && has_kokkos "${Kokkos_ROOT:-}"; then
  log "using Kokkos_ROOT=$Kokkos_ROOT; building nothing"
  echo "${Kokkos_ROOT}${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
  exit 0
fi
user_paths=()
[ "$want_cuda" = 1 ] || IFS=':;' read -r -a user_paths <<<"${CMAKE_PREFIX_PATH:-}"
for p in "${user_paths[@]}"; do
  if has_kokkos "$p"; then
    log "using Kokkos from CMAKE_PREFIX_PATH ($p); building nothing"
    echo "$CMAKE_PREFIX_PATH"
    exit 0
  fi
done

dest="$prefix" stamp="$prefix/.kopt-deps-3.4.01-openmp-blas" what="OpenMP+Serial, OpenBLAS"
[ "$want_cuda" = 1 ] && dest="$prefix/cuda" stamp="$prefix/cuda/.kopt-deps-3.4.01-cuda-sm80-sm90" what="Cuda+OpenMP+Serial"
if [ -f "$stamp" ]; then
  log "Kokkos 3.4.01 ($what) and Kokkos Kernels cached in $dest"
  echo "$dest"
  exit 0
fi

# --- deb-src entries derived from this machine's own apt sources ---------------------
# Only stanzas for this release's suites are mirrored, so third-party repositories
# without source indexes cannot break `apt-get update`.
src_list=/etc/apt/sources.list.d/kopt-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/*.sources 2>/dev/null \
   && ! grep -qs '^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; then
  tmp="$(mktemp)"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: one stanza per paragraph; keep those whose Suites name this release.
    awk -v rel="$codename" 'BEGIN { RS=""; ORS="\n\n" }
      $0 ~ ("Suites:[^\n]*" rel) { sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" >>"$tmp"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v rel="$codename" '$1 == "deb" && $0 ~ rel { $1 = "deb-src"; print }' "$f" |
      while read -r line; do printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: %s\n\n' \
        "$(echo "$line" | awk '{print $2}')" "$(echo "$line" | awk '{print $3}')" \
        "$(echo "$line" | cut -d' ' -f4-)"; done >>"$tmp"
  done
  [ -s "$tmp" ] || { log "no apt source for '$codename' to derive deb-src from"; exit 1; }
  log "enabling source packages in $src_list"
  as_root install -m 0644 "$tmp" "$src_list"
  rm -f "$tmp"
  apt_updated=0
fi
apt_update

# --- Fetch trilinos' source and keep only Kokkos and Kokkos Kernels ---------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
(cd "$work" && apt-get source --download-only -qq trilinos >&2)
orig="$(ls "$work"/trilinos_*.orig.tar.* | head -n 1)"
log "downloaded $(basename "$orig") in $(( $(date +%s) - t0 )) s"
tar -xf "$orig" -C "$work" --wildcards '*/packages/kokkos/*' '*/packages/kokkos-kernels/*'
src="$(dirname "$(find "$work" -maxdepth 3 -type d -name kokkos -path '*/packages/*' | head -n 1)")"

build() {  # $1: name, $2: source dir, rest: cmake options
  local name="$1" dir="$2"; shift 2
  local t=$(date +%s)
  cmake -S "$dir" -B "$work/build-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$dest" -DCMAKE_PREFIX_PATH="$dest" \
    -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_FLAGS="-w $cuda_flags" "${cuda_cmake[@]}" "$@" >"$work/$name-configure.log" 2>&1 ||
    { tail -n 40 "$work/$name-configure.log" >&2; exit 1; }
  cmake --build "$work/build-$name" -j "$jobs" >"$work/$name-build.log" 2>&1 ||
    { tail -n 40 "$work/$name-build.log" >&2; exit 1; }
  cmake --install "$work/build-$name" >/dev/null
  log "built and installed $name in $(( $(date +%s) - t )) s"
}
mkdir -p "$dest"
cuda_flags="" cuda_cmake=() kokkos_cuda=() kk_cuda=()
if [ "$want_cuda" = 1 ]; then
  # A CUDA root for Clang made of Debian's pieces (Debian spreads them over /usr), so that no
  # other CUDA on the machine (PATH, /usr/local/cuda) is picked up.
  mkdir -p "$dest/sdk/bin" "$dest/sdk/include" "$dest/sdk/nvvm" "$dest/cuda-include"
  for t in ptxas fatbinary nvlink; do ln -sfn "/usr/bin/$t" "$dest/sdk/bin/$t"; done
  ln -sfn /usr/lib/nvidia-cuda-toolkit/libdevice "$dest/sdk/nvvm/libdevice"
  ln -sfn /usr/include/cuda.h "$dest/sdk/include/cuda.h"
  # Debian's CUDA headers again, passed with -I: a CUDA in /usr/local/include (these machines
  # link CUDA 13's there) is searched before /usr/include, and Clang adds its CUDA path last.
  dpkg -L nvidia-cuda-dev | grep '^/usr/include/[^/]*$' | xargs -I{} ln -sfn {} "$dest/cuda-include/"
  cuda_flags="--gcc-install-dir=/usr/lib/gcc/x86_64-linux-gnu/11 -I$dest/cuda-include"
  cuda_flags+=" -Wno-unknown-cuda-version"  # Clang 16 knows CUDA up to 11.5 in full
  # Machine code for Hopper beside Kokkos' sm_80: Kokkos 3.4 knows no Hopper arch, and its
  # Cuda::initialize aborts when the code that runs was built for another major compute
  # capability, so sm_80 PTX JIT-compiled on an H100/H200 is refused (seen on an H200). The
  # arch goes on CUDA compiles only (Kokkos' `-x cuda`): on a link line with -fopenmp Clang
  # would take it for OpenMP offloading.
  mkdir -p "$dest/bin"
  cat >"$dest/bin/kopt-clang-cuda" <<'EOF'
#!/bin/sh
# Written by kopt's scripts/bootstrap-deps.sh --with-cuda: clang++-16, plus sm_90 machine code
# on every CUDA compile (Kokkos 3.4.01 itself asks for sm_80).
cuda=0 prev=
for a in "$@"; do
  if [ "$prev" = -x ] && [ "$a" = cuda ]; then cuda=1; fi
  prev="$a"
done
if [ "$cuda" = 1 ]; then exec clang++-16 "$@" --cuda-gpu-arch=sm_90; fi
exec clang++-16 "$@"
EOF
  chmod +x "$dest/bin/kopt-clang-cuda"
  cat >"$dest/toolchain.cmake" <<EOF
# Written by kopt's scripts/bootstrap-deps.sh --with-cuda: Clang 16 compiles CUDA against
# Debian's CUDA 11.8, with libstdc++ 11, for sm_80 and sm_90 (bin/kopt-clang-cuda).
set(CMAKE_CXX_COMPILER "$dest/bin/kopt-clang-cuda")
set(CMAKE_CXX_FLAGS_INIT "$cuda_flags")
set(CUDAToolkit_ROOT /usr)
# Kokkos would route every compile through its launcher script, which is not needed with one
# compiler and splits quoted -D values at spaces (perf/'s KOPT_PERF_BUILD).
set(Kokkos_LAUNCH_COMPILER OFF)
list(APPEND CMAKE_PREFIX_PATH "$dest")
EOF
  cuda_cmake=(-DCMAKE_TOOLCHAIN_FILE="$dest/toolchain.cmake")
  kokkos_cuda=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ARCH_AMPERE80=ON -DKokkos_CUDA_DIR="$dest/sdk")
  # Kokkos Kernels would find cuBLAS/cuSPARSE of any CUDA on the machine (CUDA 13's, which this
  # CUDA 11.8 build must not link): Muon's device gemms are Kokkos Kernels' own here.
  kk_cuda=(-DKokkosKernels_ENABLE_TPL_CUBLAS=OFF -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF)
fi
# Host gemms (Muon's Newton-Schulz) on Debian's OpenBLAS: Kokkos Kernels' own gemm reaches
# about a tenth of a CPU's peak. Not in the CUDA build (compiled, never run, in CI).
kk_blas=()
[ "$want_cuda" = 1 ] || kk_blas=(-DKokkosKernels_ENABLE_TPL_BLAS=ON)
build kokkos "$src/kokkos" -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON "${kokkos_cuda[@]}" \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON
# kopt uses only header templates of Kokkos Kernels' BLAS-1; its explicit instantiations
# (sparse, graph, batched kernels for double) are what takes its build time, so none are made.
build kokkos-kernels "$src/kokkos-kernels" -DKokkosKernels_ENABLE_TESTS=OFF \
  -DKokkosKernels_ENABLE_EXAMPLES=OFF -DKokkosKernels_INST_DOUBLE=OFF \
  -DKokkosKernels_INST_ORDINAL_INT=OFF -DKokkosKernels_INST_OFFSET_INT=OFF \
  -DKokkosKernels_INST_OFFSET_SIZE_T=OFF -DKokkosKernels_INST_LAYOUTLEFT=OFF \
  -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  "${kk_cuda[@]}" "${kk_blas[@]}"
touch "$stamp"
echo "$dest"
