#!/usr/bin/env bash
# Packs every publishable crate of the workspace and builds each package as crates.io would get it:
# `cargo publish --dry-run` for all of them, in dependency order, without a registry.
#
#   scripts/package.sh
#
# The publishable crates are the members without `publish = false` (read from `cargo metadata`).
# For each, `cargo package --list` must name LICENSE-MIT, LICENSE-APACHE and README.md, and no test,
# example or bench it ships may use `netns_test`, the workspace's unpublished test helper (such a test
# goes into the crate's `exclude`). Then `cargo package --workspace --exclude <the unpublished>` packs
# them and builds each from its .crate against the others' .crates (cargo's local overlay registry),
# so a package that needs a file it does not ship, or an unpublished crate, fails here; so does
# cargo's warning that a manifest has no documentation, homepage or repository. It runs `--offline`:
# the crates come from cargo's cache, which the build stages of scripts/test.sh filled (standalone,
# `cargo fetch --locked` first). About 25 s on 2 busy cores when target/debug holds the workspace's
# dependencies, about 1 min from a cold target dir.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
  echo "package: $*" >&2
  exit 1
}

# `<name> <manifest dir> <publishable: 1|0>` per workspace member. Fails on a publishable crate's
# keywords that crates.io would refuse (cargo does not check them): at most 5, each at most 20
# characters, a letter first, then letters, digits, `_`, `-` or `+`.
members=$(cargo metadata --format-version 1 --no-deps --offline --locked | python3 -c '
import json, os, re, sys
bad = []
for p in json.load(sys.stdin)["packages"]:
    publish = p["publish"] != []
    print(p["name"], os.path.dirname(p["manifest_path"]), int(publish))
    kw = p["keywords"]
    wrong = [k for k in kw if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+-]{0,19}", k)]
    if publish and (len(kw) > 5 or wrong):
        bad.append("%s: %d keywords, refused: %s" % (p["name"], len(kw), wrong))
if bad:
    sys.exit("package: crates.io refuses these keywords (at most 5; a letter first, then letters, digits, _ - +; 20 characters): " + "; ".join(bad))') ||
  exit 1

publishable=()
excludes=()
while read -r name dir publish; do
  if [ "$publish" = 0 ]; then
    excludes+=(--exclude "$name")
    continue
  fi
  publishable+=("$name")
  list=$(cargo package --list --allow-dirty --offline --locked -p "$name" 2>/dev/null) ||
    die "cargo package --list -p $name failed: run it to see why"
  for f in LICENSE-MIT LICENSE-APACHE README.md; do
    grep -qx "$f" <<<"$list" ||
      die "$name's package has no $f: add it to $dir (a symlink to the root's will do)"
  done
  while read -r f; do
    if grep -q 'netns_test' "$dir/$f"; then
      die "$name's package ships $f, which uses the unpublished netns-test: add it to exclude in $dir/Cargo.toml"
    fi
  done < <(grep -E '^(tests|examples|benches)/.*\.rs$' <<<"$list" || true)
done <<<"$members"
[ ${#publishable[@]} -gt 0 ] || die "no publishable member found in cargo metadata"
echo "package: ${publishable[*]} (skipping the publish = false members: ${excludes[*]})"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --allow-dirty: CI and local runs package the tree as it is, committed or not.
if ! cargo package --workspace "${excludes[@]}" --allow-dirty --offline --locked >"$log" 2>&1; then
  cat "$log" >&2
  die "cargo package failed (offline: if a crate is missing from cargo's cache, cargo fetch --locked first)"
fi
grep -v -e '^warning: ignoring \(test\|example\|benchmark\) `' "$log" || true
if grep -q '^warning: manifest has no' "$log"; then
  die "a publishable crate's manifest lacks metadata (above): set documentation in its Cargo.toml"
fi
echo "package: ${#publishable[@]} crates packed and built from their packages"
