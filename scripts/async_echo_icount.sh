#!/usr/bin/env bash
# Instructions per transaction of the async echo against the blocking echo (issue 19), under callgrind.
#
#   cargo build --release --features async --example echo --example async_echo
#   scripts/async_echo_icount.sh [ROUNDS]     (default 3; needs valgrind)
#
# One core on the 82599 model with its in-process client; each run under callgrind with
# `--fair-sched=yes` (the threads' interleaving, and so the idle polls, repeatable to about 1%) and
# `--separate-threads=yes`: thread 1 is the client (main), 2 the model, 3 the core. Two workloads,
# each as the difference of two runs that differ only in the number of transactions (which cancels
# start-up and shutdown):
#   messages:    64 connections x M messages of 64 bytes, M = 100 and 300 (12,800 transactions);
#   connections: C connections x 1 message of 64 bytes, C = 100 and 300 (200 transactions; more at
#                once overflow the model's rings and the retransmissions make the counts vary).
# Rounds alternate which service runs first. Prints, per round, the core thread's and the whole
# process's instructions per transaction for both services and their ratio (async / blocking).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-3}
BIN=${BIN:-target/release/examples}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for b in echo async_echo; do
  [[ -x $BIN/$b ]] || { echo "no $BIN/$b: cargo build --release --features async --example echo --example async_echo" >&2; exit 2; }
done

# Instructions of one run: "core total".
ir() {
  local bin=$1; shift
  rm -f "$OUT"/cg.*
  valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes --callgrind-out-file="$OUT/cg.%p" \
    "$BIN/$bin" --cores 1 --size 64 --quiet "$@" >"$OUT/log" 2>&1 || { cat "$OUT/log" >&2; exit 1; }
  grep -q "completed" "$OUT/log" || { cat "$OUT/log" >&2; exit 1; }
  local core total
  core=$(grep -h '^totals:' "$OUT"/cg.*-03 | awk '{print $2}')
  total=$(grep -h '^totals:' "$OUT"/cg.*-0* | awk '{s += $2} END {print s}')
  echo "$core $total"
}

per() { # lo hi n -> per-transaction difference
  awk -v lo="$1" -v hi="$2" -v n="$3" 'BEGIN { printf "%.0f", (hi - lo) / n }'
}

echo "workload round service core/txn process/txn"
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then order="echo async_echo"; else order="async_echo echo"; fi
  for w in messages connections; do
    for b in $order; do
      if [[ $w == messages ]]; then
        read -r c1 t1 < <(ir "$b" --conns 64 --messages 100)
        read -r c2 t2 < <(ir "$b" --conns 64 --messages 300)
        n=12800
      else
        read -r c1 t1 < <(ir "$b" --conns 100 --messages 1)
        read -r c2 t2 < <(ir "$b" --conns 300 --messages 1)
        n=200
      fi
      echo "$w $round $b $(per "$c1" "$c2" $n) $(per "$t1" "$t2" $n)"
    done
  done
done
