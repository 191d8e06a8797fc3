#!/usr/bin/env python3
"""The README's benchmark table, rebuilt from named rows of BENCHMARKS.md so that it cannot drift.

    scripts/readme_bench.py --check    exit 1 (with a diff) when the README's table differs from BENCHMARKS.md
    scripts/readme_bench.py --write    rewrite the table between the README's bench markers

Each row of the README table names a table of BENCHMARKS.md by a line just above it (a heading or the
caption of a generated table, matched as a substring), a row of that table by its first cells, and the
columns to show. A table, row or column that is no longer there is an error that names it: update ROWS
below together with BENCHMARKS.md.
"""

import argparse
import difflib
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

# (what the README row says, the line above the table, the row's first cells, our column,
#  (anchor's name, anchor's row's first cells or None for the same row, anchor's column) or None,
#  ratio column or None)
ROWS = [
    (
        "net channel pop, burst 32 (instructions per item)",
        "`icount_channel/pop`",
        ("burst32",),
        "netchannel_park_pop",
        ("rtrb", None, "rtrb_pop"),
        "rtrb_pop / netchannel_park_pop",
    ),
    (
        "classify an IPv4/TCP frame (instructions)",
        "`icount_classify/parse`",
        ("ipv4_tcp",),
        "classifier",
        ("etherparse", None, "etherparse_sliced"),
        "etherparse_sliced / classifier",
    ),
    (
        "registry lookup, 10k entries (instructions)",
        "`icount_registry/lookup`",
        ("entries10k",),
        "qsbr",
        None,
        None,
    ),
    (
        "channelizer, per packet, 10k signatures (instructions)",
        "`icount_channelizer/poll`",
        ("sigs10k",),
        "channelizer",
        None,
        None,
    ),
    (
        "82599 driver RX on the model, burst 32 (instructions per packet)",
        "`icount_driver/rx_group`",
        ("burst32",),
        "rx_driver",
        ("bare ring read", None, "rx_anchor"),
        "rx_anchor / rx_driver",
    ),
    (
        "send a segment by reference vs by copy (instructions)",
        "`icount_pool/send`",
        ("mss",),
        "by_reference",
        ("copy", None, "by_copy_anchor"),
        "by_copy_anchor / by_reference",
    ),
    (
        "TCP segment + ACK, tcp-lib vs smoltcp (instructions)",
        "`icount_tcp/segment_ack`",
        ("segment_ack",),
        "tcplib_segment_ack",
        ("smoltcp", None, "smoltcp_segment_ack"),
        "smoltcp_segment_ack / tcplib_segment_ack",
    ),
    (
        "httpd, 1 KiB objects over TAP, vs nginx over veth (requests per server CPU-s, two runs)",
        "### httpd over TAP with offloads",
        ("ours, TAP + offloads, prepared", "1 KiB"),
        "requests/s per server CPU-s",
        ("nginx", ("nginx, veth", "1 KiB"), "requests/s per server CPU-s"),
        None,
    ),
]


class Missing(Exception):
    pass


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_after(lines, marker):
    """The first Markdown table after the first line containing `marker`: (header, rows)."""
    start = next((i for i, line in enumerate(lines) if marker in line), None)
    if start is None:
        raise Missing(f"BENCHMARKS.md has no line containing {marker!r}")
    i = start + 1
    while i < len(lines) and not lines[i].startswith("|"):
        if lines[i].startswith("#") and i > start + 1:
            break
        i += 1
    if i >= len(lines) or not lines[i].startswith("|"):
        raise Missing(f"no table follows {marker!r} in BENCHMARKS.md")
    header = cells(lines[i])
    rows = []
    i += 2  # the header and its |---| line
    while i < len(lines) and lines[i].startswith("|"):
        rows.append(cells(lines[i]))
        i += 1
    return header, rows


def cell(table, marker, key, column):
    header, rows = table
    if column not in header:
        raise Missing(f"the table after {marker!r} has no column {column!r} (it has {header})")
    row = next((r for r in rows if tuple(r[: len(key)]) == tuple(key)), None)
    if row is None:
        raise Missing(f"the table after {marker!r} has no row starting {' | '.join(key)!r}")
    value = row[header.index(column)] if header.index(column) < len(row) else ""
    if not value:
        raise Missing(f"row {' | '.join(key)!r} of the table after {marker!r} has no {column!r}")
    return value


def generate():
    lines = BENCHMARKS.read_text().splitlines()
    out = [
        "| what | ours | anchor, same run | anchor ÷ ours | BENCHMARKS.md table |",
        "|---|---:|---:|---:|---|",
    ]
    for what, marker, key, ours_col, anchor, ratio_col in ROWS:
        table = table_after(lines, marker)
        ours = cell(table, marker, key, ours_col)
        anchor_text = ratio = "—"
        if anchor:
            name, anchor_key, anchor_col = anchor
            anchor_text = f"{name}: {cell(table, marker, anchor_key or key, anchor_col)}"
        if ratio_col:
            ratio = cell(table, marker, key, ratio_col)
        source = marker.lstrip("# ").strip()
        out.append(f"| {what} | {ours} | {anchor_text} | {ratio} | {source} |")
    return "\n".join(out)


def split_readme(text):
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise Missing(f"README.md needs exactly one {BEGIN} followed by one {END}")
    head, rest = text.split(BEGIN)
    body, tail = rest.split(END)
    return head, body, tail


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = parser.parse_args()
    try:
        table = generate()
        head, body, tail = split_readme(README.read_text())
    except Missing as e:
        print(f"readme_bench.py: {e}", file=sys.stderr)
        return 1
    want = f"\n{table}\n"
    if args.write:
        README.write_text(head + BEGIN + want + END + tail)
        print(f"README.md: benchmark table rewritten ({len(ROWS)} rows)")
        return 0
    if body == want:
        print(f"README.md: benchmark table matches BENCHMARKS.md ({len(ROWS)} rows)")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            body.splitlines(keepends=True), want.splitlines(keepends=True), "README.md", "from BENCHMARKS.md"
        )
    )
    print(
        "README.md's benchmark table differs from BENCHMARKS.md: run scripts/readme_bench.py --write",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
