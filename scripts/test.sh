#!/usr/bin/env bash
# Runs every check the project has, installing what the checks need first.
#
#   scripts/test.sh            everything (what CI runs through .ci/run)
#   QUICK=1 scripts/test.sh    skip the sanitizer, loom, instruction-count and fuzz stages (a fast local loop)
#
# Stages: Debian packages (as root) and cargo-fuzz, then fmt, clippy, doc, all tests, loom models,
# ThreadSanitizer on the concurrent stress tests (nightly), `cargo bench --no-run`, the instruction
# counts against their committed baselines (scripts/icount.sh check; installs gungraun-runner), and every
# fuzz target's committed corpus replayed, then fuzzed on for a short while (nightly; scripts/fuzz.sh).
# Knobs: FUZZ_SECONDS (per target, default 20), LOOM_MAX_PREEMPTIONS (default 3), and
# NETCHANNEL_STRESS_ITEMS and ACCEPT_STRESS_CONNS for the TSan run (default 200000, 20000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
QUICK=${QUICK:-0}
NIGHTLY=${NIGHTLY:-nightly}
LOG=$(mktemp -d)/test-logs
mkdir -p "$LOG"
STARTED=$SECONDS
passed=0
failed=0

stage() { printf '\n==> [%4ds] %s\n' $((SECONDS - STARTED)) "$*"; }

# Debian packages the tests and benchmarks use. Installed only when missing, and only as root.
APT_PACKAGES=(build-essential pkg-config valgrind iproute2 liburcu-dev tcpdump qemu-system-x86 busybox-static cpio fonts-dejavu-core iptables ethtool bison flex)
install_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { echo "all Debian packages present"; return; }
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages (run as root to install): ${missing[*]}" >&2
    return
  fi
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Runs a cargo test command, echoing its output, and adds its "test result" counts to the totals.
run_tests() {
  local name=$1
  shift
  local out="$LOG/$name.log"
  set +e
  "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  set -e
  local p f
  p=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$out" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  f=$(grep -Eo '[0-9]+ failed' "$out" | awk '{s+=$1} END {print s+0}')
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ]; then
    echo "stage '$name' failed (exit $rc)" >&2
    echo "tests: $passed passed, $((failed > 0 ? failed : 1)) failed"
    exit "$rc"
  fi
}

stage "Debian packages"
install_packages

if [ "$QUICK" != 1 ]; then
  stage "nightly toolchain (sanitizers, fuzzing)"
  rustup toolchain list | grep -q "^$NIGHTLY" || { echo "the $NIGHTLY toolchain is not installed" >&2; exit 1; }
  # rust-src lets the TSan run rebuild std instrumented (-Zbuild-std); without it we run uninstrumented std.
  if ! rustup component list --toolchain "$NIGHTLY" --installed | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain "$NIGHTLY" || echo "rust-src unavailable; TSan runs without -Zbuild-std"
  fi
  if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "installing cargo-fuzz"
    cargo +"$NIGHTLY" install cargo-fuzz --locked --quiet
  fi
fi

stage "rustfmt"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

stage "clippy (-D warnings)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

stage "rustdoc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked

stage "tests"
run_tests tests cargo test --workspace --all-features --locked

stage "the echo example: a short run on the 82599 model (the README's main job)"
if cargo run --locked --example echo -- --conns 32 --messages 100 --size 1..8192; then
  passed=$((passed + 1))
else
  echo "the echo example failed" >&2
  echo "tests: $passed passed, $((failed + 1)) failed"
  exit 1
fi

# packetdrill, built from ../shared/packetdrill, runs the Linux TCP developers' scripts against
# tcp-lib through crates/packetdrill-shim (seconds: virtual time); fails when a script outside
# crates/packetdrill-shim/expectations.txt fails, or a listed one starts passing.
stage "packetdrill against tcp-lib (scripts/packetdrill.sh --check)"
timeout 600 scripts/packetdrill.sh --check || { echo "tests: $passed passed, $((failed + 1)) failed"; exit 1; }

if [ "$QUICK" != 1 ]; then
  stage "loom models"
  run_tests loom env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    cargo test --release --locked -p netchannel -p accept-affinity --test 'loom_*'

  stage "ThreadSanitizer (nightly) on the concurrent stress tests"
  tsan_flags=(-Zbuild-std --target x86_64-unknown-linux-gnu)
  rustup component list --toolchain "$NIGHTLY" --installed | grep -q '^rust-src' || tsan_flags=()
  run_tests tsan env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    NETCHANNEL_STRESS_ITEMS="${NETCHANNEL_STRESS_ITEMS:-200000}" ACCEPT_STRESS_CONNS="${ACCEPT_STRESS_CONNS:-20000}" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p netchannel -p accept-affinity --test '*_stress'
  # The 82599 driver's queues on their own threads beside the model's thread (DMA through atomics).
  run_tests tsan-ixgbe env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p ixgbe-vfio --test driver_datapath
  # The runtime: cores, channelizer threads, the model's thread, steals handed between cores.
  run_tests tsan-runtime env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p netchannel-runtime --test serve
fi

stage "benchmarks compile (cargo bench --no-run)"
cargo bench --workspace --all-features --no-run --locked

if [ "$QUICK" != 1 ]; then
  # Fails when a data-path count rises more than ICOUNT_LIMIT_PCT (3) percent over
  # benches/icount/baseline.tsv; `scripts/icount.sh update` moves the baseline on purpose.
  stage "instruction counts (scripts/icount.sh check)"
  gungraun_version=$(awk '$0 == "name = \"gungraun\"" { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  if [ "$(gungraun-runner --version 2>/dev/null | awk '{ print $NF }')" != "$gungraun_version" ]; then
    echo "installing gungraun-runner $gungraun_version"
    cargo install gungraun-runner --version "$gungraun_version" --locked --quiet --force
  fi
  scripts/icount.sh check || { echo "tests: $passed passed, $((failed + 1)) failed"; exit 1; }
  passed=$((passed + 1))
fi

if [ "$QUICK" != 1 ]; then
  # Every committed input (seeds and past findings) once, then a timed run that starts from them;
  # scripts/fuzz.sh fails when a target has no seeds or `cargo fuzz list` names none.
  stage "fuzz: replay the committed corpus, then ${FUZZ_SECONDS}s per target"
  fuzz_targets=$(cargo +"$NIGHTLY" fuzz list | wc -l)
  scripts/fuzz.sh replay || { echo "tests: $passed passed, $((failed + 1)) failed"; exit 1; }
  scripts/fuzz.sh run -t "$FUZZ_SECONDS" || { echo "tests: $passed passed, $((failed + 1)) failed"; exit 1; }
  passed=$((passed + 2 * fuzz_targets))
fi

stage "done in $((SECONDS - STARTED)) s"
echo "tests: $passed passed, $failed failed"
