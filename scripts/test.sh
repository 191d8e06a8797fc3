#!/usr/bin/env bash
# Runs every check the project has, installing what the checks need first.
#
#   scripts/test.sh            everything (what CI runs through .ci/run)
#   QUICK=1 scripts/test.sh    skip the sanitizer, loom, instruction-count and fuzz stages (a fast local loop)
#
# Stages: Debian packages (as root) and cargo-fuzz, then fmt, clippy, doc, the README's benchmark
# table against BENCHMARKS.md (scripts/readme_bench.py), all tests, loom models, ThreadSanitizer on the
# concurrent stress tests (nightly), `cargo bench --no-run`, the publishable crates packed and built
# from their packages (scripts/package.sh), the docs' shell commands
# (scripts/readme_commands.sh: README.md and docs/USAGE.md, as root in namespaces), the instruction
# counts against their committed baselines (scripts/icount.sh check; installs gungraun-runner), and every
# fuzz target's committed corpus replayed, then fuzzed on for a short while (nightly; scripts/fuzz.sh).
# Knobs: FUZZ_SECONDS (per target, default 20), LOOM_MAX_PREEMPTIONS (default 3), and
# NETCHANNEL_STRESS_ITEMS and ACCEPT_STRESS_CONNS for the TSan run (default 200000, 20000).
#
# Skips: a test that cannot run here calls `netns_test::skip`, which appends `<test> <reason>` to
# the file this script exports as NETCHANNEL_SKIP_LOG (any stage, a shell script too, may append
# lines of that form). The summary counts such a test as skipped, not passed, and lists every skip
# with its reason. Under CI=true a skip whose test matches no pattern in scripts/allowed-skips.txt
# fails the run. As root the script reserves a few 2 MiB hugepages for the real-hugepage test and
# gives them back at exit.
#
# The closing line counts test cases (cargo's `test NAME ... ok|FAILED|ignored` lines), each once
# however many stages ran it (the TSan stages rerun some): a failure anywhere makes it failed, a
# skip or an #[ignore] makes it skipped. The echo run, the instruction counts and the fuzz targets
# are stages, reported on the `stages:` line above it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
QUICK=${QUICK:-0}
NIGHTLY=${NIGHTLY:-nightly}
CI=${CI:-false}
LOG=$(mktemp -d)/test-logs
mkdir -p "$LOG"
STARTED=$SECONDS
# One line per test case a cargo stage ran: `<binary>::<test>\t<ok|FAILED|ignored>`.
RESULTS="$LOG/results.tsv"
: >"$RESULTS"
NETCHANNEL_SKIP_LOG="$LOG/skips.log"
: >"$NETCHANNEL_SKIP_LOG"
export NETCHANNEL_SKIP_LOG
ALLOWED_SKIPS=scripts/allowed-skips.txt
# The non-test stages and how they ended, for the summary.
stages=()
# Undone at exit (the hugepage reservation).
restore_hugepages=""

stage() { printf '\n==> [%4ds] %s\n' $((SECONDS - STARTED)) "$*"; }

# Whether test NAME matches a pattern (a bash glob, the first field of a line) of the allow-list.
skip_allowed() {
  local name=$1 pattern _
  [ -f "$ALLOWED_SKIPS" ] || return 1
  while read -r pattern _; do
    case "$pattern" in '' | '#'*) continue ;; esac
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    [[ $name == $pattern ]] && return 0
  done <"$ALLOWED_SKIPS"
  return 1
}

# The closing summary: every skip with its reason, the stages, and the test count. Under CI a skip
# the allow-list does not name turns a passing run into a failing one. Runs at exit, always.
summary() {
  local rc=$1 name reason unallowed=0 verdict
  trap - EXIT
  if [ -n "$restore_hugepages" ]; then
    echo "$restore_hugepages" >/proc/sys/vm/nr_hugepages || echo "could not restore nr_hugepages to $restore_hugepages" >&2
  fi
  # The worst outcome of each test over all stages; a skipped test that did not fail is skipped.
  local counts
  counts=$(awk -F'\t' -v skips="$NETCHANNEL_SKIP_LOG" '
    BEGIN { while ((getline line < skips) > 0) { split(line, f, " "); if (f[1] != "") skipped[f[1]] = 1 } }
    { rank = ($2 == "FAILED") ? 3 : ($2 == "ok") ? 2 : 1
      if (rank > worst[$1]) worst[$1] = rank }
    END {
      for (t in worst) {
        if (worst[t] == 3) failed++
        else if (t in skipped || worst[t] == 1) skip++
        else passed++
      }
      for (t in skipped) if (!(t in worst)) skip++
      printf "%d %d %d\n", passed, failed, skip
    }' "$RESULTS")
  read -r n_passed n_failed n_skipped <<<"$counts"
  # Tests that only ever reported `ignored` are skips too, with #[ignore] as the reason.
  awk -F'\t' '{ if ($2 != "ignored") ran[$1] = 1; else ign[$1] = 1 }
    END { for (t in ign) if (!(t in ran)) print t " #[ignore]" }' "$RESULTS" >>"$NETCHANNEL_SKIP_LOG"
  printf '\n==> [%4ds] summary\n' $((SECONDS - STARTED))
  if [ -s "$NETCHANNEL_SKIP_LOG" ]; then
    echo "skipped (test, reason):"
    while read -r name reason; do
      if skip_allowed "$name"; then
        echo "  $name: $reason (allowed: $ALLOWED_SKIPS)"
      else
        echo "  $name: $reason (NOT in $ALLOWED_SKIPS)"
        unallowed=$((unallowed + 1))
      fi
    done < <(sort -u "$NETCHANNEL_SKIP_LOG")
  fi
  if [ ${#stages[@]} -gt 0 ]; then
    local joined="" s
    for s in "${stages[@]}"; do joined+="${joined:+; }$s"; done
    echo "stages: $joined"
  fi
  if [ "$rc" -eq 0 ] && [ "$CI" = true ] && [ "$unallowed" -gt 0 ]; then
    echo "CI=true: $unallowed skip(s) not in $ALLOWED_SKIPS: a test that cannot run here is a failure in CI" >&2
    rc=1
  fi
  verdict=$([ "$rc" -eq 0 ] && echo ok || echo FAILED)
  echo "tests: $n_passed passed, $n_failed failed, $n_skipped skipped ($verdict)"
  exit "$rc"
}
trap 'summary $?' EXIT

# Debian packages the tests and benchmarks use. Installed only when missing, and only as root.
# hping3 and nmap: tests/adversarial (floods beside kernel clients, port scans); python3-scapy: its crafted frames too.
# curl: the httpd command of docs/USAGE.md (scripts/readme_commands.sh).
APT_PACKAGES=(build-essential pkg-config valgrind iproute2 liburcu-dev tcpdump qemu-system-x86 busybox-static cpio fonts-dejavu-core iptables ethtool bison flex python3-scapy hping3 nmap curl)
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

# Runs a cargo test command, echoing its output, and records each test case it ran in $RESULTS,
# named `<binary>::<test>` as `netns_test::skip` names them (`doc:<crate>::<item>` for doctests).
# Fails when the cases it found do not add up to cargo's own `test result:` totals.
run_tests() {
  local name=$1
  shift
  local out="$LOG/$name.log"
  set +e
  "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  set -e
  local found totals
  awk '
    /^ *Running / { bin = $NF; gsub(/[()]/, "", bin); sub(/.*\//, "", bin)
      if (match(bin, /-[0-9a-f]+$/) && RLENGTH == 17) bin = substr(bin, 1, RSTART - 1) }
    /^ *Doc-tests / { bin = "doc:" $2 }
    /^test .* \.\.\. (ok|FAILED|ignored)/ {
      line = $0; sub(/^test /, "", line); outcome = $NF
      sub(/ \.\.\. [^ ]+$/, "", line); sub(/ - should panic$/, "", line)
      printf "%s::%s\t%s\n", bin, line, outcome; n++
    }
    END { printf "%d\n", n > "/dev/stderr" }' "$out" 2>"$out.count" >>"$RESULTS"
  found=$(cat "$out.count")
  totals=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$out" |
    awk '{ s += $4 + $6 + $8 } END { print s + 0 }')
  if [ "$rc" -ne 0 ]; then
    echo "stage '$name' failed (exit $rc)" >&2
    exit "$rc"
  fi
  if [ "$found" -ne "$totals" ]; then
    echo "stage '$name': cargo reported $totals test results but $found 'test NAME ... RESULT' lines were found" >&2
    exit 1
  fi
}

# Runs a script stage that ends with a summary line, echoing its output into $LOG/NAME.log, and adds
# that line (the last match of PATTERN; FALLBACK when there is none) to the stages with ok, or with
# FAILED, and then exits, when the script fails.
run_script_stage() {
  local name=$1 pattern=$2 fallback=$3 rc line
  shift 3
  set +e
  "$@" 2>&1 | tee "$LOG/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  line=$(grep -Eo "$pattern" "$LOG/$name.log" | tail -1 || true)
  if [ "$rc" -ne 0 ]; then
    stages+=("${line:-$name} FAILED")
    exit 1
  fi
  stages+=("${line:-$fallback} ok")
}

# As root, makes sure a few 2 MiB hugepages are free for platform_sysfs's real-hugepage test, and
# gives back at exit (summary) what it reserved.
reserve_hugepages() {
  local want=4 nr free
  [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/nr_hugepages ] || { echo "not root: no hugepages reserved"; return; }
  nr=$(cat /proc/sys/vm/nr_hugepages)
  free=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)
  [ "$free" -ge "$want" ] && { echo "$free 2 MiB hugepages free already"; return; }
  restore_hugepages=$nr
  echo $((nr + want - free)) >/proc/sys/vm/nr_hugepages
  free=$(awk '/^HugePages_Free:/ { print $2 }' /proc/meminfo)
  echo "nr_hugepages $nr -> $(cat /proc/sys/vm/nr_hugepages) ($free free; restored at exit)"
}

stage "Debian packages"
install_packages

stage "hugepages for the real-hugepage test"
reserve_hugepages

if [ "$QUICK" != 1 ]; then
  stage "nightly toolchain (sanitizers, fuzzing)"
  rustup toolchain list | grep -q "^$NIGHTLY" || { echo "the $NIGHTLY toolchain is not installed" >&2; exit 1; }
  # rust-src lets the TSan run rebuild std instrumented (-Zbuild-std). Without it TSan would see
  # std's synchronisation as uninstrumented code: no run at all rather than a run that sees less.
  if ! rustup component list --toolchain "$NIGHTLY" --installed | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain "$NIGHTLY" ||
      { echo "rust-src is unavailable for $NIGHTLY: ThreadSanitizer cannot get an instrumented std" >&2; exit 1; }
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
# The private items too, as a contributor reads them: their links must resolve as well.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked --document-private-items

stage "the README's benchmark table against BENCHMARKS.md (scripts/readme_bench.py --check)"
if scripts/readme_bench.py --check; then
  stages+=("README benchmark table ok")
else
  stages+=("README benchmark table FAILED")
  exit 1
fi

stage "tests"
run_tests tests cargo test --workspace --all-features --locked

stage "the echo example: a short run on the 82599 model (the README's main job)"
if cargo run --locked --example echo -- --conns 32 --messages 100 --size 1..8192; then
  stages+=("echo example ok")
else
  stages+=("echo example FAILED")
  echo "the echo example failed" >&2
  exit 1
fi

# packetdrill, built from ../shared/packetdrill, runs the Linux TCP developers' scripts against
# tcp-lib through crates/packetdrill-shim (seconds: virtual time), their IPv4 runs and then their
# IPv6 runs; fails when a script outside crates/packetdrill-shim/expectations.txt fails, or a
# listed one starts passing, over either family.
for family in ipv4 ipv6; do
  flag=$([ "$family" = ipv6 ] && echo "--ipv6" || true)
  stage "packetdrill against tcp-lib, $family (scripts/packetdrill.sh --check $flag)"
  # shellcheck disable=SC2086 # $flag is empty for IPv4
  run_script_stage "packetdrill-$family" 'packetdrill \(tcp-lib, ipv[46]\): .*' "packetdrill $family skipped" \
    timeout 600 scripts/packetdrill.sh --check $flag
done

if [ "$QUICK" != 1 ]; then
  stage "loom models"
  run_tests loom env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    cargo test --release --locked -p netchannel -p accept-affinity --test 'loom_*'

  stage "ThreadSanitizer (nightly) on the concurrent stress tests"
  tsan_flags=(-Zbuild-std --target x86_64-unknown-linux-gnu)
  run_tests tsan env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    NETCHANNEL_STRESS_ITEMS="${NETCHANNEL_STRESS_ITEMS:-200000}" ACCEPT_STRESS_CONNS="${ACCEPT_STRESS_CONNS:-20000}" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p netchannel -p accept-affinity --test '*_stress'
  # The liburcu reclaimer (registry_stress's liburcu_stress, `--features liburcu`) is not run under
  # TSan: liburcu-qsbr is uninstrumented C, so TSan cannot see the ordering its grace periods give
  # (a reader's quiescent state, synchronize_rcu, then the free) and reports the free as racing with
  # the reader's last read. It runs, uninstrumented, in the tests stage (--all-features).
  stages+=("liburcu stress under TSan: not run (liburcu-qsbr is uninstrumented C; TSan cannot see its grace periods and reports false races; it runs in the tests stage)")
  # The 82599 driver's queues on their own threads beside the model's thread (DMA through atomics).
  run_tests tsan-ixgbe env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p ixgbe-vfio --test driver_datapath
  # The runtime: cores, channelizer threads, the model's thread, steals handed between cores.
  run_tests tsan-runtime env RUSTFLAGS="-Zsanitizer=thread" RUSTDOCFLAGS="-Zsanitizer=thread" \
    CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    cargo +"$NIGHTLY" test "${tsan_flags[@]}" --locked -p netchannel-runtime --test serve
fi

stage "benchmarks compile (cargo bench --no-run; the benches are the netchannels-benches package, benches/)"
cargo bench --workspace --all-features --no-run --locked

# Budget: under 4 minutes (about 30 s on 2 busy cores to build the five packages, target/debug warm
# from the stages above, and up to 2 minutes for their tests' `cargo test --no-run`). Packs every
# publishable crate and builds the packages and their tests together, offline.
stage "packages: cargo package --workspace of the publishable crates, each built from its .crate (scripts/package.sh)"
run_script_stage packages 'package: [0-9]+ crates packed and built from their packages' "packages" scripts/package.sh

# After the benches: the release dependencies they built are reused by the examples' release build.
stage "the README's commands (scripts/readme_commands.sh: the blocks marked <!-- ci: NAME -->)"
run_script_stage readme-commands 'readme commands: .*' "readme commands" scripts/readme_commands.sh

if [ "$QUICK" != 1 ]; then
  # Fails when a data-path count rises more than ICOUNT_LIMIT_PCT (3) percent over
  # benches/icount/baseline.tsv; `scripts/icount.sh update` moves the baseline on purpose.
  stage "instruction counts (scripts/icount.sh check)"
  gungraun_version=$(awk '$0 == "name = \"gungraun\"" { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  if [ "$(gungraun-runner --version 2>/dev/null | awk '{ print $NF }')" != "$gungraun_version" ]; then
    echo "installing gungraun-runner $gungraun_version"
    cargo install gungraun-runner --version "$gungraun_version" --locked --quiet --force
  fi
  scripts/icount.sh check || { stages+=("instruction counts FAILED"); exit 1; }
  stages+=("instruction counts ok")
fi

if [ "$QUICK" != 1 ]; then
  # Every committed input (seeds and past findings) once, then a timed run that starts from them;
  # scripts/fuzz.sh fails when a target has no seeds or `cargo fuzz list` names none.
  stage "fuzz: replay the committed corpus, then ${FUZZ_SECONDS}s per target"
  fuzz_list=$(cd fuzz && cargo +"$NIGHTLY" fuzz list) ||
    { stages+=("fuzz FAILED (cargo fuzz list failed)"); echo "'cargo fuzz list' failed" >&2; exit 1; }
  fuzz_targets=$(grep -c . <<<"$fuzz_list" || true)
  if [ "$fuzz_targets" -eq 0 ]; then
    stages+=("fuzz FAILED (no targets)")
    echo "'cargo fuzz list' names no fuzz target" >&2
    exit 1
  fi
  scripts/fuzz.sh replay || { stages+=("fuzz replay FAILED"); exit 1; }
  scripts/fuzz.sh run -t "$FUZZ_SECONDS" || { stages+=("fuzz run FAILED"); exit 1; }
  stages+=("fuzz: $fuzz_targets targets replayed and run ${FUZZ_SECONDS}s each ok")
fi

stage "done in $((SECONDS - STARTED)) s"
