#!/usr/bin/env bash
# TCP through loss against the kernel, in rounds: runs tcp-lib's `kernel_tap` lossy transfers
# (2 MiB each way at once through about 10% loss each way, reordering and duplication; our stack
# with its defaults, `Config::linux()` and `Config::bbr()`, and a second kernel in our stack's
# place as the anchor, with CUBIC and with BBR; and BBR, ours and the kernel's, through the same
# faults behind a 10 ms, 20 MB/s bottleneck: path `bottleneck`) ROUNDS times, one test at a time,
# and prints per binary, path, side, congestion control, family and role the median time, RTOs,
# recovery episodes and retransmissions. Needs root (the tests make their own network namespaces).
#
#   scripts/lossy-rounds.sh [ROUNDS] [KERNEL_TAP_BINARY ...]
#
# `data s` times the same transfer from the moment the side in our place was established: a lost
# SYN or SYN-ACK costs any TCP a 1 s timeout, and with the tests' fixed seeds it falls on one side
# more than the other (the injector decides by the order of frames, and a kernel in our place sends
# frames of its own before its SYN).
#
# With binaries (e.g. target/release/deps/kernel_tap-<hash> of two commits, copied away) the
# rounds interleave them, each round running every binary once; without, the one cargo builds
# from this tree. `TCP_KERNEL_LOSSY_BYTES` sets the bytes each way; `LOSSY_FILTER` the tests
# (default `lossy`). Every run's lines are kept in target/lossy-rounds/.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
shift || true
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
    bin=$(cargo test --release -p tcp-lib --test kernel_tap --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "kernel_tap" and m.get("executable"):
        print(m["executable"])')
    bins=("$bin")
fi
out=target/lossy-rounds
mkdir -p "$out"
: > "$out/results.txt"
filter=${LOSSY_FILTER:-lossy}

for r in $(seq "$rounds"); do
    for i in "${!bins[@]}"; do
        b=${bins[$i]}
        log="$out/round$r-bin$i.log"
        # A failed run is reported and its results kept; the rounds go on.
        timeout 1800 "$b" "$filter" --nocapture --test-threads 1 > "$log" 2>&1 || echo "round $r, $b: failed (see $log)" >&2
        grep -h '^lossy result:' "$log" | sed "s|^|bin=$i |" >> "$out/results.txt" || true
        echo "round $r/$rounds, binary $i: $(grep -c '^lossy result:' "$log" || true) transfers" >&2
    done
done

python3 - "$out/results.txt" "${bins[@]}" <<'EOF'
import statistics, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.replace("lossy result:", "").split())
    rows[(f["bin"], f.get("path", "lossy"), f["side"], f["cc"], f["family"], f["role"])].append(
        (float(f["secs"]), float(f["both_secs"]), int(f["timeouts"]), int(f["recoveries"]),
         int(f["retransmits"]), int(f["kernel_retransmits"]), f["peer_cc"],
         # Binaries from before the field: the whole time stands in.
         float(f.get("data_secs", f["secs"]))))
for i, b in enumerate(sys.argv[2:]):
    print(f"binary {i}: {b}")
print("s: until the far kernel had read all that the side in our place sent; data s: the same from the moment the side in")
print("our place was established (no handshake timeouts); both s: both ways; medians but min and max")
print(f"{'bin':>3} {'path':<10} {'side':<9} {'cc':<6} {'family':<6} {'role':<13} {'runs':>4} {'median s':>9} {'min s':>7} {'max s':>7} "
      f"{'data s':>7} {'both s':>7} {'RTOs':>5} {'recov':>5} {'retx':>5} {'peer retx':>9} peer cc")
for key in sorted(rows):
    v = rows[key]
    secs = [x[0] for x in v]
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{key[0]:>3} {key[1]:<10} {key[2]:<9} {key[3]:<6} {key[4]:<6} {key[5]:<13} {len(v):>4} {statistics.median(secs):>9.2f} "
          f"{min(secs):>7.2f} {max(secs):>7.2f} {med(7):>7.2f} {med(1):>7.2f} {med(2):>5.0f} {med(3):>5.0f} {med(4):>5.0f} "
          f"{med(5):>9.0f} {','.join(sorted(set(x[6] for x in v)))}")
EOF
