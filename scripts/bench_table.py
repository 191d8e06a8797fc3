#!/usr/bin/env python3
"""Prints the BENCHMARKS.md tables for `cargo bench -p netchannels-benches --bench channel`.

Usage: scripts/bench_table.py [--interleaved FILE] [CRITERION_DIR ...]
(default: $CARGO_TARGET_DIR/criterion, else the workspace's target/criterion: where Criterion writes,
whichever package, benches/ included, the bench is in)

For each Criterion directory (one per `cargo bench` run; copy `target/criterion` away between runs) it
reads `<dir>/<group>/<function>[/<burst>]/new/estimates.json` and uses Criterion's median of the
samples' per-iteration times (`median.point_estimate`); throughput rows are divided by the burst to give
ns per item. `--interleaved FILE` adds the output of
`NETCHANNEL_BENCH_INTERLEAVE=<rounds> cargo bench -p netchannels-benches --bench channel` (its medians
and its median per-round paired ratios). Ratios are anchor_time / our_time, so > 1 means the net
channel is faster.
"""

import json
import os
import re
import sys

args = sys.argv[1:]
interleaved = None
if "--interleaved" in args:
    i = args.index("--interleaved")
    interleaved = args[i + 1]
    del args[i : i + 2]
target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target")
runs = args or [os.path.join(target, "criterion")]

# Interleaved output: "| id | iters | median | min | max |" and "| ours-id | anchor | 1.23x | ... |".
inter_ns, inter_ratio = {}, {}
if interleaved:
    for line in open(interleaved):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[\d.]+", cells[2]) and cells[1].isdigit():
            inter_ns[cells[0]] = float(cells[2])
        elif len(cells) == 5 and cells[2].endswith("x") and "/" in cells[0]:
            inter_ratio[(cells[0], cells[1])] = float(cells[2][:-1])


def crit(run, group, name, burst=None):
    parts = [run, group, name] + ([str(burst)] if burst else [])
    try:
        with open(os.path.join(*parts, "new", "estimates.json")) as f:
            return json.load(f)["median"]["point_estimate"] / (burst or 1)
    except FileNotFoundError:
        return None


def fmt(x):
    if x is None:
        return "—"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def ratio(anchor, ours):
    return "—" if anchor is None or ours is None else f"{anchor / ours:.2f}x"


def table(group, ours, anchors, burst=None, unit="ns/item"):
    ident = lambda name: f"{group}/{name}" + (f"/{burst}" if burst else "")
    heads = [f"run {i + 1} {unit}" for i in range(len(runs))]
    if interleaved:
        heads.append(f"interleaved {unit}")
    for o in ours:
        short = o.replace("netchannel-", "")
        heads.append(f"anchor/{short} ({', '.join([f'run {i + 1}' for i in range(len(runs))] + (['paired'] if interleaved else []))})")
    print("| contender | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    t = {n: [crit(r, group, n, burst) for r in runs] for n in ours + anchors}
    for name in ours + anchors:
        cells = [fmt(v) for v in t[name]]
        if interleaved:
            cells.append(fmt(inter_ns.get(ident(name))))
        for o in ours:
            if name in ours:
                cells.append("")
                continue
            rs = [ratio(a, b) for a, b in zip(t[name], t[o])]
            if interleaved:
                p = inter_ratio.get((ident(o), name))
                rs.append("—" if p is None else f"**{p:.2f}x**")
            cells.append(" / ".join(rs))
        label = f"**{name}**" if name in ours else name
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()


for burst in (1, 32, 256):
    anchors = (["rtrb-single"] if burst == 1 else ["rtrb-chunk", "rtrb-single"]) + ["arrayqueue", "std-sync-channel"]
    print(f"### Throughput, burst {burst} (ns per item)\n")
    table("throughput", ["netchannel-park", "netchannel-poll"], anchors, burst)
print("### Busy-polling ping-pong (ns per round trip)\n")
table("ping_pong", ["netchannel-park", "netchannel-poll"], ["rtrb", "bare-atomic"], unit="ns/rt")
for group, title in [("wakeup", "consumer asleep"), ("wakeup_back_to_back", "back to back")]:
    print(f"### Wakeup round trip, {title} (ns per round trip)\n")
    # Spinning contenders are named so (issue 25): compare a spinning one with the spinning anchor.
    table(
        group,
        ["netchannel-park-spin20us", "netchannel-eventfd-spin20us", "netchannel-park-nospin"],
        ["thread-park-spin20us", "thread-park", "std-sync-channel"],
        unit="ns/rt",
    )
