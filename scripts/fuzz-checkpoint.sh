#!/usr/bin/env bash
# Builds the checkpoint loader's fuzz target (fuzz/fuzz_checkpoint_index.cpp) with clang's
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, and runs it for a bounded time
# (CTest runs it as Fuzz.checkpoint_index). Needs Debian's clang (bootstrap-deps.sh installs it).
# Usage: bash scripts/fuzz-checkpoint.sh [SECONDS (default 60)] [WORK_DIR (default build/fuzz)]
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${2:-$root/build/fuzz}"
mkdir -p "$work/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" "$root/fuzz/fuzz_checkpoint_index.cpp" "$root/src/checkpoint_format.cpp" \
  "$root/src/checkpoint_checks.cpp" "$root/src/adam_config.cpp" "$root/src/algorithms.cpp" \
  -o "$work/fuzz_checkpoint_index"
"$work/fuzz_checkpoint_index" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 "$work/corpus"
