#!/usr/bin/env bash
# Runs the shell commands that the docs mark as CI-runnable, so a command a reader copies works.
#
#   scripts/readme_commands.sh [--list] [FILE...]     (default: README.md docs/USAGE.md)
#
# A block runs when the line before its ```sh fence is `<!-- ci: NAME -->` or `<!-- ci: NAME root -->`
# (root: it makes network namespaces, so it needs root and /dev/net/tun, and skips without them the
# way netns_test::skip does: `skipped:` on stdout, `readme::NAME <why>` appended to NETCHANNEL_SKIP_LOG,
# which scripts/test.sh reports and, under CI=true, fails unless scripts/allowed-skips.txt lists it).
# Blocks without the marker (the test command itself, the ones that need an 82599) are not run.
#
# The blocks of one file run in order in one bash (`set -euo pipefail`), as a reader pastes them into
# one terminal: a variable one block sets is there for the next. The examples they use are built first
# (release, not counted in the budget); then each file's blocks must finish within README_BUDGET
# seconds (default 90). A failing block fails the script and names the block; so does the budget.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUDGET=${README_BUDGET:-90}
list=0
if [ "${1:-}" = --list ]; then
  list=1
  shift
fi
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(README.md docs/USAGE.md)

# Prints each marked block of FILE as `NAME<TAB>FLAGS` on one line, then its lines with the fence's
# indentation removed, then a line `\x1e` (ASCII record separator) that ends the block.
extract() {
  awk '
    function ltrim(s) { sub(/^[ \t]+/, "", s); return s }
    inside {
      if (ltrim($0) == "```") { inside = 0; print "\036"; next }
      line = $0
      if (substr(line, 1, indent) ~ /^[ ]*$/) line = substr(line, indent + 1)
      print line; next
    }
    match($0, /^[ \t]*<!-- ci: [A-Za-z0-9_-]+( root)? -->[ \t]*$/) {
      spec = ltrim($0); sub(/^<!-- ci: /, "", spec); sub(/ -->[ \t]*$/, "", spec)
      n = split(spec, f, " "); pending = f[1]; flags = (n > 1) ? f[2] : "-"; next
    }
    pending != "" && /^[ \t]*```sh[ \t]*$/ {
      indent = match($0, /[^ ]/) - 1; inside = 1
      printf "%s\t%s\n", pending, flags; pending = ""; next
    }
    pending != "" && !/^[ \t]*$/ { printf "a ci marker (%s) not followed by a ```sh block\n", pending > "/dev/stderr"; exit 1 }
  ' "$1"
}

# Why root blocks cannot run here, or nothing.
root_missing() {
  [ "$(id -u)" -eq 0 ] || { echo "not root"; return; }
  [ -c /dev/net/tun ] || { echo "no /dev/net/tun"; return; }
  command -v ip >/dev/null || { echo "no ip(8) (iproute2)"; return; }
  command -v unshare >/dev/null || echo "no unshare(1)"
}

total=0
skipped=0
for file in "${files[@]}"; do
  script=$(mktemp)
  # The generated script: each block between a line that names it and one that reports its time.
  {
    echo 'set -euo pipefail'
    echo 'trap '\''echo "readme_commands.sh: '"$file"': block \"$__block\" failed (exit $?)" >&2'\'' ERR'
    echo '__started() { __block=$1; __t0=$SECONDS; echo "--- $__block"; }'
    echo '__done() { echo "--- $__block ok ($((SECONDS - __t0)) s)"; }'
  } >"$script"
  names=()
  blocks=$(mktemp)
  extract "$file" >"$blocks" || { echo "readme_commands.sh: $file: a marker without its block" >&2; exit 1; }
  while IFS= read -r header; do
    name=${header%%$'\t'*}
    flags=${header#*$'\t'}
    body=$(mktemp)
    while IFS= read -r line && [ "$line" != $'\036' ]; do printf '%s\n' "$line" >>"$body"; done
    names+=("$name")
    if [ "$flags" = root ] && why=$(root_missing) && [ -n "$why" ]; then
      echo "skipped: readme block $name ($file): $why"
      [ -z "${NETCHANNEL_SKIP_LOG:-}" ] || echo "readme::$name $why" >>"$NETCHANNEL_SKIP_LOG"
      skipped=$((skipped + 1))
    else
      { echo "__started $name"; cat "$body"; echo "__done"; } >>"$script"
      total=$((total + 1))
    fi
    rm -f "$body"
  done <"$blocks"
  rm -f "$blocks"
  if [ "$list" = 1 ]; then
    echo "$file: ${names[*]:-(none)}"
    rm -f "$script"
    continue
  fi
  [ ${#names[@]} -gt 0 ] || { echo "$file: no block is marked <!-- ci: NAME -->" >&2; rm -f "$script"; exit 1; }
  # What the blocks build, built first so that the budget counts the commands, not the compiler.
  for example in $(grep -Eo 'cargo (build|run) --release --example [a-z_]+' "$script" | awk '{ print $NF }' | sort -u); do
    cargo build --release --locked --quiet --example "$example"
  done
  echo "== $file: ${names[*]} (budget ${BUDGET}s)"
  started=$SECONDS
  set +e
  timeout --kill-after=5 "$BUDGET" bash "$script"
  rc=$?
  set -e
  rm -f "$script"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "readme_commands.sh: $file's commands ran past their budget of ${BUDGET}s" >&2
    exit 1
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
  echo "== $file: done in $((SECONDS - started)) s"
done
[ "$list" = 1 ] || echo "readme commands: $total run, $skipped skipped"
