#!/usr/bin/env python3
"""A workload's code footprint: the distinct 64-byte lines of code it runs per unit of work.

Usage: scripts/hot_lines.py SHORT.out LONG.out UNITS [TOP]

SHORT.out and LONG.out are callgrind outputs of the same binary and workload that differ only in
how many units they run (UNITS more in LONG), written with instruction-level positions:

    valgrind --tool=callgrind --dump-instr=yes --dump-line=no --compress-pos=no \\
        --compress-strings=no --callgrind-out-file=SHORT.out $B --child txn-lockstep tcp-lib 10000
    (the same with 20000 and LONG.out; UNITS is then 10000)

An instruction is hot when LONG executed it at least UNITS / 2 times more than SHORT (at least once
per two units: start-up and one-off code cancel out). The script prints the number of 64-byte lines
that hold hot instructions (what the instruction cache must hold for the loop to run from it: a
32 KiB L1i holds 512), the instructions per unit, the lines by how often per unit their most-run
instruction runs (at most twice: in a transaction, once at each end, a connection's opening and
closing; over twice and at most eight times; over eight: the per-segment code), and the TOP functions (default 0) by the hot
lines they occupy (a line shared by functions is split between them). Unlike a cache simulation's
miss count, which moves by +-10% with the code layout alone when the footprint is well past the cache,
this count only moves when the code that runs does.
"""

import collections
import sys


def load(path):
    """Ir per instruction address, and each address's function, from a callgrind output."""
    ir = collections.Counter()
    fn_of = {}
    fn = None
    skip = False
    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                # The next line is the call site with the callee's inclusive cost: not this code's.
                skip = True
            elif skip:
                skip = False
            elif line.startswith("0x"):
                fields = line.split()
                if len(fields) >= 2:
                    addr = int(fields[0], 16)
                    ir[addr] += int(fields[1])
                    fn_of[addr] = fn
    return ir, fn_of


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    short, _ = load(sys.argv[1])
    long, fn_of = load(sys.argv[2])
    units = int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) == 5 else 0
    lines = collections.defaultdict(set)
    most_runs = collections.defaultdict(float)
    total = 0
    for addr, count in long.items():
        delta = count - short.get(addr, 0)
        total += delta
        if delta >= units // 2:
            lines[addr >> 6].add(fn_of[addr])
            most_runs[addr >> 6] = max(most_runs[addr >> 6], delta / units)
    print(f"hot lines {len(lines)} ({len(lines) * 64 / 1024:.1f} KiB), instructions per unit {total / units:.0f}")
    bands = [("at most 2", 2), ("over 2 to 8", 8), ("over 8", float("inf"))]
    counts = collections.Counter(next(name for name, most in bands if runs <= most + 0.01) for runs in most_runs.values())
    print("lines by runs per unit: " + "; ".join(f"{name}: {counts[name]}" for name, _ in bands))
    by_fn = collections.Counter()
    for fns in lines.values():
        for fn in fns:
            by_fn[fn] += 1 / len(fns)
    for fn, count in by_fn.most_common(top):
        print(f"{count:7.1f}  {fn}")


if __name__ == "__main__":
    main()
