#!/usr/bin/env bash
# The fuzz targets' corpora: replay what is committed, fuzz on from it, minimise it back.
#
#   scripts/fuzz.sh replay [TARGET...]
#       Runs every committed input of each target once: fuzz/seeds/TARGET (the minimised corpus)
#       and fuzz/regressions/TARGET (every input that ever broke the target). Fails on the first
#       input that fails. CI runs this before its timed run.
#   scripts/fuzz.sh run [-t SECONDS] [-j JOBS] [TARGET...]
#       Fuzzes each target for SECONDS (default 1800) starting from the committed inputs plus the
#       local working corpus fuzz/corpus/TARGET (ignored by git; new inputs land there), JOBS
#       targets at a time (default: the number of CPUs). Prints each target's final counters and
#       a summary; a finding is saved under fuzz/artifacts/TARGET/ and the run fails.
#   scripts/fuzz.sh cmin [TARGET...]
#       Minimises seeds + working corpus back into fuzz/seeds/TARGET (commit the result).
#
# No TARGET means every target `cargo fuzz list` names. Each target must have a committed seed
# corpus: a target without one is an error, so a new target cannot join unseen. Knobs: NIGHTLY
# (toolchain, default nightly), FUZZ_NICE (niceness of `run`, default 0), FUZZ_RSS_MB (2048).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

NIGHTLY=${NIGHTLY:-nightly}
RSS_MB=${FUZZ_RSS_MB:-2048}
LOGS=target/fuzz-logs

usage() {
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# The targets to work on: the arguments, checked against `cargo fuzz list`, or all of them.
targets() {
  local all
  all=$(cargo +"$NIGHTLY" fuzz list) || { echo "fuzz.sh: 'cargo fuzz list' failed" >&2; exit 1; }
  [ -n "$all" ] || { echo "fuzz.sh: 'cargo fuzz list' names no target" >&2; exit 1; }
  if [ $# -eq 0 ]; then
    echo "$all"
    return
  fi
  for t in "$@"; do
    grep -qx "$t" <<<"$all" || { echo "fuzz.sh: no fuzz target '$t' (targets: $(echo $all))" >&2; exit 1; }
    echo "$t"
  done
}

# The committed input folders of a target; an error when it has no seeds.
inputs() {
  local t=$1
  if [ -z "$(ls -A "seeds/$t" 2>/dev/null)" ]; then
    echo "fuzz.sh: target '$t' has no committed seeds in fuzz/seeds/$t: run 'scripts/fuzz.sh run $t' then 'scripts/fuzz.sh cmin $t' and commit fuzz/seeds/$t" >&2
    exit 1
  fi
  echo "seeds/$t"
  [ -d "regressions/$t" ] && echo "regressions/$t"
  return 0
}

replay() {
  local t dirs n
  for t in $(targets "$@"); do
    mapfile -t dirs < <(inputs "$t")
    n=$(find "${dirs[@]}" -type f | wc -l)
    echo "--- replay $t: $n inputs (${dirs[*]})"
    # -runs=0: load (and so run) every input once, then stop.
    if ! cargo +"$NIGHTLY" fuzz run "$t" "${dirs[@]}" -- -runs=0 -rss_limit_mb="$RSS_MB" >"$LOGS/replay-$t.log" 2>&1; then
      tail -n 40 "$LOGS/replay-$t.log" >&2
      echo "fuzz.sh: a committed input of '$t' fails (log: fuzz/$LOGS/replay-$t.log)" >&2
      exit 1
    fi
    grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)' "$LOGS/replay-$t.log" | tail -n 1
  done
}

# One timed run of one target; its log is fuzz/target/fuzz-logs/run-TARGET.log.
run_one() {
  local t=$1 seconds=$2 dirs
  mapfile -t dirs < <(inputs "$t")
  mkdir -p "corpus/$t"
  nice -n "${FUZZ_NICE:-0}" cargo +"$NIGHTLY" fuzz run "$t" "corpus/$t" "${dirs[@]}" -- \
    -max_total_time="$seconds" -rss_limit_mb="$RSS_MB" -print_final_stats=1 >"$LOGS/run-$t.log" 2>&1
}

run() {
  local seconds=1800 jobs
  jobs=$(nproc)
  while getopts "t:j:" opt; do
    case $opt in
      t) seconds=$OPTARG ;;
      j) jobs=$OPTARG ;;
      *) usage ;;
    esac
  done
  shift $((OPTIND - 1))
  local list
  mapfile -t list < <(targets "$@")
  for t in "${list[@]}"; do inputs "$t" >/dev/null; done
  # Build once up front so the timed runs start together and time only fuzzing.
  for t in "${list[@]}"; do cargo +"$NIGHTLY" fuzz build "$t" >/dev/null 2>&1 || cargo +"$NIGHTLY" fuzz build "$t"; done
  echo "fuzzing ${#list[@]} targets for ${seconds}s each, $jobs at a time; logs in fuzz/$LOGS/"
  local running=0 failed=()
  for t in "${list[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n || true
      running=$((running - 1))
    fi
    echo "  start $t at $(date +%T)"
    rm -f "$LOGS/run-$t.rc"
    (if run_one "$t" "$seconds"; then echo 0; else echo $?; fi >"$LOGS/run-$t.rc") &
    running=$((running + 1))
  done
  wait
  printf '\n%-14s %-8s %12s %8s %8s %8s\n' target result executions exec/s cov corpus
  for t in "${list[@]}"; do
    local result=ok
    [ "$(cat "$LOGS/run-$t.rc" 2>/dev/null)" = 0 ] || { result=FAILED; failed+=("$t"); }
    local log="$LOGS/run-$t.log" last execs rate
    last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1)
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
    rate=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo "?")
    printf '%-14s %-8s %12s %8s %8s %8s\n' "$t" "$result" "$execs" "$rate" \
      "$(grep -Eo 'cov: [0-9]+' <<<"$last" | grep -Eo '[0-9]+' || echo "?")" \
      "$(grep -Eo 'corp: [0-9]+' <<<"$last" | grep -Eo '[0-9]+' || echo "?")"
  done
  if [ ${#failed[@]} -gt 0 ]; then
    for t in "${failed[@]}"; do
      echo
      echo "=== $t failed; the end of fuzz/$LOGS/run-$t.log:"
      grep -A 12 -E 'panicked|ERROR: libFuzzer|ERROR: AddressSanitizer' "$LOGS/run-$t.log" | head -n 30
      echo "artifacts: $(ls "artifacts/$t" 2>/dev/null | tr '\n' ' ')"
      echo "reproduce: cd fuzz && cargo +$NIGHTLY fuzz run $t artifacts/$t/<file>; minimise: cargo +$NIGHTLY fuzz tmin $t artifacts/$t/<file>"
      echo "once fixed, keep it: cp artifacts/$t/<file> regressions/$t/"
    done
    exit 1
  fi
}

cmin() {
  local t tmp before after
  for t in $(targets "$@"); do
    mkdir -p "seeds/$t"
    tmp=$(mktemp -d)
    before=$(find "seeds/$t" "corpus/$t" -type f 2>/dev/null | wc -l)
    # -merge=1 keeps the smallest set of inputs that covers everything the inputs cover.
    cargo +"$NIGHTLY" fuzz run "$t" "$tmp" "seeds/$t" $([ -d "corpus/$t" ] && echo "corpus/$t") -- \
      -merge=1 -rss_limit_mb="$RSS_MB" >"$LOGS/cmin-$t.log" 2>&1 ||
      { tail -n 20 "$LOGS/cmin-$t.log" >&2; exit 1; }
    rm -rf "seeds/$t"
    mv "$tmp" "seeds/$t"
    chmod 755 "seeds/$t"
    after=$(find "seeds/$t" -type f | wc -l)
    echo "$t: $before inputs -> $after seeds ($(du -sh "seeds/$t" | cut -f1))"
  done
}

mkdir -p "$LOGS"
cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  replay) replay "$@" ;;
  run) run "$@" ;;
  cmin) cmin "$@" ;;
  *) usage ;;
esac
