#!/usr/bin/env bash
# A change's effect on lock-step TCP transactions (benches/tcp `--child txn-lockstep`), told apart
# from its effect on code layout: the bench of two commits, built twice each (the default bench
# profile, and with every function aligned to 64 bytes and every block not reached by fall-through
# to 32, so that code a change moves shifts less of the rest), run in interleaved rounds pinned to
# one CPU; per build flavour, the paired median of AFTER / BEFORE for tcp-lib and for smoltcp 0.14
# (whose code no tcp-lib change touches: where it moves, the layout moved it), and tcp-lib / smoltcp
# per binary. A change that holds in both flavours is the code's; one that holds only in the default
# build is its layout's (BENCHMARKS.md, "Stores read back before they retire").
#
#   scripts/txn-rounds.sh BEFORE AFTER [ROUNDS] [TXNS]
#
# BEFORE and AFTER are commits (anything `git worktree add` takes); each is built in a worktree under
# $TXN_ROUNDS_DIR (default /tmp/txn-rounds), with one target directory per flavour, so a second run
# rebuilds little. ROUNDS defaults to 15, TXNS (transactions per run) to 200000. Knobs:
# TXN_ROUNDS_FLAVOURS ("default aligned"), TXN_ROUNDS_CPU (the CPU to pin to; default the last one).
# About 1.5 minutes a build on 2 cores, then ROUNDS x 8 runs of TXNS transactions.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,17p' "$0"
    exit 2
fi
repo=$(git rev-parse --show-toplevel)
before=$(git -C "$repo" rev-parse --verify "$1^{commit}")
after=$(git -C "$repo" rev-parse --verify "$2^{commit}")
rounds=${3:-15}
txns=${4:-200000}
dir=${TXN_ROUNDS_DIR:-/tmp/txn-rounds}
flavours=${TXN_ROUNDS_FLAVOURS:-default aligned}
cpu=${TXN_ROUNDS_CPU:-$(($(nproc) - 1))}
command -v taskset >/dev/null || { echo "txn-rounds: taskset is not installed: apt-get install util-linux" >&2; exit 2; }
mkdir -p "$dir/bin"

rustflags() {
    case "$1" in
        default) echo "" ;;
        aligned) echo "-C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=5" ;;
    esac
}
# Checked here: inside the build's command substitution an unknown flavour would only empty
# RUSTFLAGS and build the default one under its name.
for flavour in $flavours; do
    case "$flavour" in
        default | aligned) ;;
        *) echo "txn-rounds: unknown flavour '$flavour' in TXN_ROUNDS_FLAVOURS (default, aligned)" >&2; exit 2 ;;
    esac
done

# Builds the tcp bench of commit $1 in flavour $2; prints the binary's path.
build() {
    local rev=$1 flavour=$2 tree="$dir/tree-${1:0:12}" bin="$dir/bin/tcp-${1:0:12}-$2"
    if [[ ! -x $bin ]]; then
        [[ -d $tree ]] || git -C "$repo" worktree add -q --detach "$tree" "$rev"
        echo "txn-rounds: building ${rev:0:12} ($flavour)" >&2
        local built
        built=$(cd "$tree" && RUSTFLAGS="$(rustflags "$flavour")" CARGO_TARGET_DIR="$dir/target-$flavour" \
            cargo bench -p netchannels-benches --bench tcp --no-run --message-format=json-render-diagnostics \
            | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "tcp" and m.get("executable"):
        print(m["executable"])')
        [[ -n $built ]] || { echo "txn-rounds: no tcp bench binary from the build of ${rev:0:12}" >&2; exit 1; }
        cp "$built" "$bin"
    fi
    echo "$bin"
}

declare -A bins
for flavour in $flavours; do
    bins[$flavour,before]=$(build "$before" "$flavour")
    bins[$flavour,after]=$(build "$after" "$flavour")
done

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "txn-rounds: ${before:0:12} -> ${after:0:12}, $rounds rounds of $txns transactions on CPU $cpu, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
    for flavour in $flavours; do
        for side in before after; do
            for stack in tcp-lib smoltcp; do
                rate=$(taskset -c "$cpu" "${bins[$flavour,$side]}" --child txn-lockstep "$stack" "$txns" \
                    | grep -o 'per_cpu_sec=[0-9.]*' | cut -d= -f2)
                echo "$round $flavour $side $stack $rate" >>"$out"
            done
        done
    done
    echo "txn-rounds: round $round of $rounds done" >&2
done

python3 - "$out" <<'EOF'
import statistics, sys
rate = {}
for line in open(sys.argv[1]):
    r, flavour, side, stack, v = line.split()
    rate[(r, flavour, side, stack)] = float(v)
rounds = sorted({k[0] for k in rate}, key=int)
for flavour in dict.fromkeys(k[1] for k in rate):
    print(f"{flavour} build, transactions per CPU-second (medians of {len(rounds)} rounds):")
    for stack in ("tcp-lib", "smoltcp"):
        b = [rate[(r, flavour, "before", stack)] for r in rounds]
        a = [rate[(r, flavour, "after", stack)] for r in rounds]
        pairs = [y / x for x, y in zip(b, a)]
        print(f"  {stack:8} before {statistics.median(b):9.0f}  after {statistics.median(a):9.0f}  "
              f"after/before paired {statistics.median(pairs):.3f} ({min(pairs):.3f}-{max(pairs):.3f})")
    for side in ("before", "after"):
        ratio = [rate[(r, flavour, side, "tcp-lib")] / rate[(r, flavour, side, "smoltcp")] for r in rounds]
        print(f"  tcp-lib / smoltcp, {side:6} {statistics.median(ratio):.3f}")
EOF
