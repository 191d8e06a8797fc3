#!/usr/bin/env bash
# Interleaved rounds of benches/xdp_echo.rs: two builds of the bench (BEFORE and AFTER a change) side
# by side in one run, each round running both, for each place the client's receive can run
# (NC_XDP_BENCH_PEER: softirq, threaded), then the median of each column per build.
#
#   scripts/xdp-echo-rounds.sh BEFORE AFTER [ROUNDS]
#
# BEFORE and AFTER are bench binaries (`cargo bench -p netchannels-benches --bench xdp_echo --no-run` prints the path;
# copy it away before building the other one). Needs root, `ip` and `ethtool`; no network and no
# cargo. Knobs, passed through to the bench: NC_XDP_BENCH_CONNS (default 16), NC_XDP_BENCH_SIZE (64),
# NC_XDP_BENCH_SECS (here 5), NC_XDP_BENCH_SERVERS (here generic,native,kernel), NC_XDP_BENCH_BUSY_POLL,
# NC_XDP_BENCH_QUEUES;
# XDP_ROUNDS_PEERS (default "softirq threaded"). Each table row is printed as the bench prints it,
# prefixed with the round, the build and the peer; the medians follow.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,12p' "$0"
    exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
rounds=${3:-5}
export NC_XDP_BENCH_SECS=${NC_XDP_BENCH_SECS:-5}
export NC_XDP_BENCH_SERVERS=${NC_XDP_BENCH_SERVERS:-generic,native,kernel}
peers=${XDP_ROUNDS_PEERS:-softirq threaded}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "xdp-echo-rounds: $rounds rounds, peers: $peers, $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for peer in $peers; do
        for build in before after; do
            bin=$before
            [[ $build == after ]] && bin=$after
            NC_XDP_BENCH_PEER=$peer "$bin" 2>&1 | grep -E '^\| (ours|kernel)' | sed "s/^/$round $build $peer /" | tee -a "$out"
        done
    done
done

# Medians of transactions/s, server CPU/packet and machine CPU/packet per build, peer and server.
echo
echo "| peer | server | build | transactions/s | server CPU/packet | machine CPU/packet |"
echo "|---|---|---|---:|---:|---:|"
awk -F'|' '
    {
        split($1, head, " "); key = head[3] "|" $2 "|" head[2]
        gsub(/[ a-z%]/, "", $3); gsub(/[ a-z%]/, "", $6); gsub(/[ a-z%]/, "", $7)
        tps[key] = tps[key] " " $3; srv[key] = srv[key] " " $6; mach[key] = mach[key] " " $7
    }
    function median(list,   n, v, i, j, t) {
        n = split(list, v, " ")
        for (i = 1; i <= n; i++) { v[i] = v[i] + 0 }
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    END {
        for (key in tps) {
            split(key, k, "|")
            printf "| %s |%s| %s | %.0f | %.2f us | %.2f us |\n", k[1], k[2], k[3], median(tps[key]), median(srv[key]), median(mach[key])
        }
    }' "$out" | sort
