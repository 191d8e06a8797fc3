#!/usr/bin/env bash
# Instruction counts of the data path (gungraun under callgrind), checked against committed baselines.
#
#   scripts/icount.sh [check]       run every `icount_*` bench, compare with benches/icount/baseline.tsv,
#                                   print the before/after table; exit 1 when a count rose more than
#                                   ICOUNT_LIMIT_PCT percent (default 3) over its baseline or fell more
#                                   than that below it (the baseline, and the tables and ratios made
#                                   from it, would be stale: an anchor that got cheaper with its old
#                                   count still published would flatter us), or when a benchmark is in
#                                   the run but not the baseline or the other way round
#   scripts/icount.sh update        run them and rewrite the baseline (commit it, saying why it moved)
#   scripts/icount.sh report        print BENCHMARKS.md's instruction-count tables from the baseline
#   scripts/icount.sh report --write   replace the block between `<!-- icount:begin -->` and
#                                   `<!-- icount:end -->` in BENCHMARKS.md with those tables
#
# The benches are the `[[bench]]` entries of benches/Cargo.toml (package netchannels-benches) named
# `icount_*` (each a gungraun `main!`). A benchmark is named `<bench>/<group>/<function>/<id>`, and its
# id ends with `_n<N>`: the items (packets, lookups, frames) it processes per run, so the per-item count
# is Ir / N. In the report,
# a function whose name starts with one of $ANCHORS or ends in `_anchor` is an anchor (another library,
# or the bare loop) and gets a ratio column against the group's first function that is not an anchor.
#
# Knobs: ICOUNT_LIMIT_PCT (default 3), ICOUNT_BENCHES (space-separated bench names: run and compare only
# those), ICOUNT_KEEP=1 (keep the gungraun output directory and say where it is).
# Needs valgrind and `gungraun-runner` of the same version as the `gungraun` crate in Cargo.lock.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BASELINE=benches/icount/baseline.tsv
MANIFEST=benches/Cargo.toml
DOC=BENCHMARKS.md
LIMIT=${ICOUNT_LIMIT_PCT:-3}
ANCHORS='^(anchor|rtrb|etherparse|smoltcp|bare)|_anchor$'

die() {
  echo "icount: $*" >&2
  exit 2
}

# The `icount_*` bench names of the benches package's manifest, in file order.
all_benches() {
  awk '/^\[\[bench\]\]/ { inbench = 1; next }
       /^\[/ { inbench = 0 }
       inbench && $1 == "name" { gsub(/"/, "", $3); if ($3 ~ /^icount_/) print $3 }' "$MANIFEST"
}

benches() {
  if [ -n "${ICOUNT_BENCHES:-}" ]; then
    local b
    for b in $ICOUNT_BENCHES; do
      all_benches | grep -qx "$b" || die "ICOUNT_BENCHES names '$b', which is not an icount_* [[bench]] in $MANIFEST"
      echo "$b"
    done
  else
    all_benches
  fi
}

preflight() {
  command -v valgrind >/dev/null 2>&1 || die "valgrind is not installed: apt-get install valgrind"
  command -v python3 >/dev/null 2>&1 || die "python3 is not installed (it reads gungraun's JSON summaries)"
  local want have
  want=$(awk '$0 == "name = \"gungraun\"" { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  [ -n "$want" ] || die "no gungraun package in Cargo.lock: cargo generate-lockfile (or cargo build) first"
  if ! command -v gungraun-runner >/dev/null 2>&1; then
    die "gungraun-runner $want is not installed: cargo install gungraun-runner --version $want --locked"
  fi
  have=$(gungraun-runner --version 2>/dev/null | awk '{ print $NF }')
  [ "$have" = "$want" ] ||
    die "gungraun-runner is $have but the gungraun crate is $want: cargo install gungraun-runner --version $want --locked --force"
}

# Runs the benches and prints `<name>\t<Ir>\t<N>` lines, sorted by name.
measure() {
  preflight
  local home out log b list
  list=$(benches)
  home=$(mktemp -d -t icount.XXXXXX)
  out="$home/counts.tsv"
  for b in $list; do
    log="$home/$b.log"
    echo "icount: running $b" >&2
    if ! GUNGRAUN_HOME="$home/gungraun" GUNGRAUN_SAVE_SUMMARY=json \
      cargo bench -p netchannels-benches --locked --bench "$b" >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      die "cargo bench -p netchannels-benches --bench $b failed (full log: $log)"
    fi
  done
  python3 - "$home/gungraun" >"$out" <<'EOF'
import json, pathlib, re, sys

def ir(metrics):
    """The new Ir of a callgrind total: {"Ir": {"values": {"new": N, ...}}, ...} (schema v6)."""
    try:
        return int(metrics["Ir"]["values"]["new"])
    except (KeyError, TypeError, ValueError):
        sys.exit(f"icount: no Ir in gungraun's summary ({str(metrics)[:200]}): has its JSON schema changed?")

rows = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("summary.json")):
    s = json.loads(path.read_text())
    parts = s["module_path"].split("::")
    if len(parts) != 3:
        sys.exit(f"icount: {path}: expected <bench>::<group>::<function>, got {s['module_path']}")
    bench_id = s.get("id") or ""
    n = re.search(r"_n([0-9]+)$", bench_id)
    if not n:
        sys.exit(f"icount: {s['module_path']} id '{bench_id}' does not end with _n<N> (the items per run)")
    counts = [ir(p["data"]["total"]["metrics"]) for p in s["profiles"] if p["tool"] == "Callgrind"]
    if not counts or counts[0] is None:
        sys.exit(f"icount: {path}: no callgrind Ir")
    rows.append(f"{'/'.join(parts)}/{bench_id}\t{counts[0]}\t{n.group(1)}")
if not rows:
    sys.exit("icount: gungraun wrote no summary.json (is GUNGRAUN_SAVE_SUMMARY honoured by this version?)")
natural = lambda row: [int(t) if t.isdigit() else t for t in re.split(r"([0-9]+)", row.split("\t")[0])]
print("\n".join(sorted(rows, key=natural)))
EOF
  if [ "${ICOUNT_KEEP:-0}" = 1 ]; then
    echo "icount: gungraun output kept in $home" >&2
  fi
  cat "$out"
  [ "${ICOUNT_KEEP:-0}" = 1 ] || rm -rf "$home"
}

# The baseline's data lines, restricted to the benches being run.
baseline_rows() {
  [ -f "$BASELINE" ] || die "no baseline at $BASELINE: scripts/icount.sh update, then commit it"
  local pattern
  pattern="^($(benches | paste -sd'|' -))/"
  grep -v '^#' "$BASELINE" | grep -E "$pattern" || true
}

check() {
  local now base rc
  now=$(measure)
  base=$(baseline_rows)
  awk -v limit="$LIMIT" -F'\t' '
    FNR == 1 { file++ }
    NF == 3 && !($1 in seen) { seen[$1] = 1; order[++n] = $1 }
    file == 1 && NF == 3 { bir[$1] = $2; bn[$1] = $3 }
    file == 2 && NF == 3 { nir[$1] = $2; nn[$1] = $3 }
    END {
      fmt = "%-62s %12s %12s %9s  %s\n"
      printf fmt, "benchmark", "base Ir/item", "now Ir/item", "change", "verdict"
      fails = 0
      for (i = 1; i <= n; i++) {
        k = order[i]
        if (!(k in bir)) { printf fmt, k, "-", sprintf("%.2f", nir[k] / nn[k]), "new", "FAIL (not in the baseline)"; fails++; continue }
        if (!(k in nir)) { printf fmt, k, sprintf("%.2f", bir[k] / bn[k]), "-", "gone", "FAIL (not in this run)"; fails++; continue }
        if (bn[k] != nn[k]) { printf fmt, k, bn[k], nn[k], "N moved", "FAIL (items per run changed)"; fails++; continue }
        pct = bir[k] > 0 ? 100 * (nir[k] - bir[k]) / bir[k] : 0
        verdict = pct > limit ? "FAIL" : pct < -limit ? "FAIL (fell: the baseline is stale)" : "PASS"
        if (pct > limit || pct < -limit) fails++
        printf fmt, k, sprintf("%.2f", bir[k] / bn[k]), sprintf("%.2f", nir[k] / nn[k]), sprintf("%+.2f%%", pct), verdict
      }
      printf "\n%d benchmarks, %d beyond the %s%% limit either way or unmatched\n", n, fails, limit
      exit fails > 0 ? 1 : 0
    }' <(echo "$base") <(echo "$now") && return 0 || rc=$?
  [ "$rc" -eq 1 ] || die "comparing the counts failed (awk exit $rc)"
  echo "icount: instruction counts rose over the baseline, or fell below it (a stale baseline: the" >&2
  echo "icount: published tables and ratios would not be this code's), or benchmarks were added or removed." >&2
  echo "icount: if that is intended: scripts/icount.sh update, then commit $BASELINE saying why." >&2
  return 1
}

update() {
  [ -z "${ICOUNT_BENCHES:-}" ] || die "update rewrites the whole baseline: unset ICOUNT_BENCHES"
  local now
  now=$(measure)
  mkdir -p "$(dirname "$BASELINE")"
  {
    echo "# Instruction counts (callgrind Ir) per benchmark run: <bench>/<group>/<function>/<id>, Ir, N items."
    echo "# Generated by scripts/icount.sh update; checked by scripts/icount.sh check (scripts/test.sh)."
    echo "$now"
  } >"$BASELINE"
  echo "icount: wrote $BASELINE ($(echo "$now" | wc -l) benchmarks)." >&2
  echo "icount: commit it with a message that says why the counts moved; scripts/icount.sh report --write refreshes $DOC." >&2
}

# Markdown tables from the baseline: one per bench and group, ids as rows, functions as columns.
report() {
  [ -f "$BASELINE" ] || die "no baseline at $BASELINE: scripts/icount.sh update first"
  grep -v '^#' "$BASELINE" | awk -v anchors="$ANCHORS" -F'\t' '
    NF == 3 {
      split($1, p, "/"); table = p[1] "/" p[2]; fn = p[3]; id = p[4]; sub(/_n[0-9]+$/, "", id)
      n = $3
      if (!(table in seen)) { seen[table] = 1; tables[++nt] = table }
      if (!((table, fn) in hasfn)) { hasfn[table, fn] = 1; fns[table, ++nf[table]] = fn }
      if (!((table, id) in hasid)) { hasid[table, id] = 1; ids[table, ++ni[table]] = id }
      val[table, fn, id] = sprintf("%.2f", $2 / n); per[table] = n
    }
    END {
      for (t = 1; t <= nt; t++) {
        table = tables[t]; ours = ""
        for (f = 1; f <= nf[table]; f++) if (fns[table, f] !~ anchors) { ours = fns[table, f]; break }
        printf "Instructions per item, `%s` (%d items per run; regenerate: `scripts/icount.sh update && scripts/icount.sh report --write`)\n\n", table, per[table]
        head = "| case |"; rule = "|---|"
        for (f = 1; f <= nf[table]; f++) { head = head " " fns[table, f] " |"; rule = rule "---:|" }
        for (f = 1; f <= nf[table]; f++) if (ours != "" && fns[table, f] ~ anchors) {
          head = head " " fns[table, f] " / " ours " |"; rule = rule "---:|"
        }
        print head; print rule
        for (i = 1; i <= ni[table]; i++) {
          id = ids[table, i]; line = "| " id " |"
          for (f = 1; f <= nf[table]; f++) {
            v = ((table, fns[table, f], id) in val) ? val[table, fns[table, f], id] : "-"
            line = line " " v " |"
          }
          for (f = 1; f <= nf[table]; f++) if (ours != "" && fns[table, f] ~ anchors) {
            a = val[table, fns[table, f], id]; o = val[table, ours, id]
            line = line " " ((a != "" && o > 0) ? sprintf("%.2fx", a / o) : "-") " |"
          }
          print line
        }
        print ""
      }
    }'
}

report_write() {
  grep -q '^<!-- icount:begin -->$' "$DOC" && grep -q '^<!-- icount:end -->$' "$DOC" ||
    die "$DOC has no '<!-- icount:begin -->' / '<!-- icount:end -->' lines to write between"
  local tables tmp
  tables=$(mktemp)
  tmp=$(mktemp)
  report >"$tables"
  awk -v tables="$tables" '
    $0 == "<!-- icount:begin -->" { print; print ""; while ((getline line < tables) > 0) print line; skip = 1; next }
    $0 == "<!-- icount:end -->" { skip = 0 }
    !skip { print }' "$DOC" >"$tmp"
  mv "$tmp" "$DOC"
  rm -f "$tables"
  echo "icount: rewrote the generated block in $DOC from $BASELINE" >&2
}

case "${1:-check}" in
  check) check ;;
  update) update ;;
  report)
    case "${2:-}" in
      "") report ;;
      --write) report_write ;;
      *) die "unknown report option '$2' (only --write)" ;;
    esac
    ;;
  -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "unknown command '$1': check, update, report [--write]" ;;
esac
