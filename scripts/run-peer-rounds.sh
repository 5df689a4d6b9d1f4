#!/usr/bin/env bash
# The interleaved rounds of `run-perf.sh --with-peers`: K rounds, each running kopt_bench (only
# the rows that have a peer config) and perf/peers.py at 1 and 2 threads, every run a separate
# process, in an order shuffled anew each round. Separate processes, so no run inherits another's
# heap or OpenMP pool and OpenMP reads its thread count fresh; shuffled and repeated, so a drift
# of the machine (another job, a noisy neighbour) lands on every implementation alike instead of
# on whichever always runs last. Each process records the load average at its start.
#
# Usage: bash scripts/run-peer-rounds.sh KOPT_BENCH PEERS_PYTHON RESULTS_DIR [--smoke] [...]
#   --smoke: kopt_bench --smoke and perf/peers.py --smoke (sizes / 2^10); other flags ignored
# Env: KOPT_PEER_ROUNDS (default 3), KOPT_PEER_THREADS (default "1 2").
# Writes RESULTS_DIR/peers/{kopt,peers}-r<round>-<threads>t.{json,log} and order.txt (the order
# run, with each process's load average at start and seconds taken).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
bench="$1" python="$2" out="$3/peers"
shift 3
smoke=()
for arg in "$@"; do [ "$arg" = --smoke ] && smoke=(--smoke); done
rounds="${KOPT_PEER_ROUNDS:-3}"
read -r -a threads_list <<<"${KOPT_PEER_THREADS:-1 2}"
peers_script="$(cd "$(dirname "$0")/.." && pwd)/perf/peers.py"
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log "$out"/order.txt

# kopt's rows with a peer config: one tensor of 2^24 or 2^26 elements (--smoke scales sizes, and
# the names with them, to 2^14 and 2^16), and the split of those totals into 1,000 tensors (its
# name keeps the nominal total even under --smoke; the older name without a total matches too).
# One tensor also in bf16's other storage forms (exact master as a remainder, fp32 or bf16 m,v
# or bf16 m beside fp32 v;
# no master, bf16 m,v, nearest or stochastic): each meets the same peers' bf16 config.
totals="16777216|67108864"
single="$totals"
[ "${#smoke[@]}" = 1 ] && single="16384|65536"
forms="fp32|bf16_master|bf16_remainder|bf16_remainder_bf16_m_f32_v|bf16_remainder_bf16_state"
forms+="|bf16_no_master_bf16_state"
forms+="|bf16_stochastic_bf16_state"
filter="^adamw_($forms)/OpenMP/($single)/"
filter+="|^adamw_(fp32|bf16_master)_split/OpenMP/1000/(($totals)/)?manual_time"

for round in $(seq 1 "$rounds"); do
  mapfile -t order < <(for t in "${threads_list[@]}"; do echo "kopt $t"; echo "peers $t"; done |
    shuf)
  for job in "${order[@]}"; do
    read -r who threads <<<"$job"
    base="$out/$who-r$round-${threads}t"
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    start=$(date +%s)
    status=0
    if [ "$who" = kopt ]; then
      OMP_NUM_THREADS="$threads" "$bench" "${smoke[@]}" --benchmark_filter="$filter" \
        --benchmark_color=false --benchmark_out="$base.json" --benchmark_out_format=json \
        >"$base.log" 2>&1 || status=$?
      what="$(grep -c '/manual_time' "$base.log" || true) kopt rows"
    else
      OMP_NUM_THREADS="$threads" "$python" "$peers_script" --threads "$threads" \
        --out "$base.json" "${smoke[@]}" >"$base.log" 2>&1 || status=$?
      what="$(grep -c '^peers: .* M elem/s' "$base.log" || true) peer rows"
    fi
    took=$(($(date +%s) - start))
    echo "round $round $who threads $threads load_at_start $load seconds $took exit $status" \
      >>"$out/order.txt"
    printf '  [round %d/%d] %-5s %d thread(s): %s in %d s, load average at start %s\n' \
      "$round" "$rounds" "$who" "$threads" "$what" "$took" "$load"
    grep '^peers: .* absent' "$base.log" | sed 's/^peers: /    /' || true
    if [ "$status" != 0 ]; then
      echo "    failed (exit $status); the end of $base.log:"
      tail -n 5 "$base.log" | sed 's/^/    /'
      rm -f "$base.json"  # a partial file would pass for a round
    fi
  done
done
