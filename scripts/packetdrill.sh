#!/usr/bin/env bash
# Runs packetdrill's TCP scripts against tcp-lib (through crates/packetdrill-shim, on virtual time)
# or against the Linux kernel, each script in a network namespace of its own, in parallel.
#
#   scripts/packetdrill.sh                    every script under gtests/net/tcp/, against tcp-lib
#   scripts/packetdrill.sh A.pkt B.pkt ...    these scripts (any packetdrill scripts), the same way
#   scripts/packetdrill.sh --linux [...]      against the kernel instead (packetdrill's normal mode)
#   scripts/packetdrill.sh --check            against tcp-lib, then compare with the expectations
#                                             file: fails when a script that should pass fails, or
#                                             when one listed as failing passes (update the file)
#   scripts/packetdrill.sh --ipv6 [...]       the scripts' IPv6 runs (packetdrill --ip_version=ipv6,
#                                             its run_all.py addresses); --check holds them to the
#                                             same expectations file as the IPv4 runs
#
# Needs root (namespaces), gcc, make, bison and flex (scripts/test.sh installs them). packetdrill's
# source is read from ../shared/packetdrill (PACKETDRILL_SRC) and built in the scratch directory
# target/packetdrill (PACKETDRILL_WORK); the source directory is never written.
# Knobs: PACKETDRILL_JOBS (parallel scripts; default: cores, or 1 with --linux, whose timing
# tolerances a loaded 2-core machine misses), PACKETDRILL_TIMEOUT (seconds per script; default 60
# against tcp-lib, 120 against Linux).
# Output: one line per script (PASS/FAIL/N/A and the first error), the totals, and the logs and a
# results table (results-shim.tsv or results-linux.tsv: script, status, first error) in the
# scratch directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

MODE=shim
CHECK=0
FAMILY=ipv4
SCRIPTS=()
for arg in "$@"; do
  case "$arg" in
    --linux) MODE=linux ;;
    --check) CHECK=1 ;;
    --ipv6) FAMILY=ipv6 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "unknown option $arg (see --help)" >&2; exit 2 ;;
    *) SCRIPTS+=("$(realpath "$arg")") ;;
  esac
done

SRC=${PACKETDRILL_SRC:-$ROOT/../shared/packetdrill}
WORK=${PACKETDRILL_WORK:-$ROOT/target/packetdrill}
EXPECT=$ROOT/crates/packetdrill-shim/expectations.txt
if [ "$MODE" = linux ]; then JOBS=${PACKETDRILL_JOBS:-1}; TIMEOUT=${PACKETDRILL_TIMEOUT:-120}
else JOBS=${PACKETDRILL_JOBS:-$(nproc)}; TIMEOUT=${PACKETDRILL_TIMEOUT:-60}; fi

if [ ! -d "$SRC/gtests/net/packetdrill" ]; then
  # A skip the test command reports (and fails under CI=true unless scripts/allowed-skips.txt
  # lists it), as netns_test::skip does for the Rust tests.
  why="no packetdrill source at $SRC (set PACKETDRILL_SRC)"
  echo "skipped: packetdrill: $why"
  [ -n "${NETCHANNEL_SKIP_LOG:-}" ] && echo "packetdrill $why" >>"$NETCHANNEL_SKIP_LOG"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "packetdrill: needs root for its network namespaces" >&2; exit 1; }
for tool in gcc make bison flex unshare ip; do
  command -v "$tool" >/dev/null || { echo "packetdrill: $tool is missing (apt-get install gcc make bison flex iproute2)" >&2; exit 1; }
done

# 1. packetdrill, built in a scratch copy of its source (rebuilt when the source changes).
mkdir -p "$WORK"
stamp=$(cd "$SRC" && find gtests/net/packetdrill -type f -newer "$WORK/packetdrill.stamp" 2>/dev/null | head -1 || true)
if [ ! -x "$WORK/build/packetdrill" ] || [ ! -e "$WORK/packetdrill.stamp" ] || [ -n "$stamp" ]; then
  echo "packetdrill: building from $SRC"
  rm -rf "$WORK/build"
  cp -r "$SRC/gtests/net/packetdrill" "$WORK/build"
  chmod -R u+w "$WORK/build"
  (cd "$WORK/build" && ./configure >/dev/null && make -j"$(nproc)" packetdrill >"$WORK/build.log" 2>&1) \
    || { echo "packetdrill: build failed; see $WORK/build.log" >&2; tail -20 "$WORK/build.log" >&2; exit 1; }
  touch "$WORK/packetdrill.stamp"
fi
PD=$WORK/build/packetdrill

# 2. The scripts, copied so their init commands are executable. The shared copy stores the
# symbolic link tcp/common/defaults.sh as a file holding its target; it becomes a link again.
rm -rf "$WORK/net"
mkdir -p "$WORK/net"
cp -r "$SRC/gtests/net/tcp" "$SRC/gtests/net/common" "$WORK/net/"
chmod -R u+w "$WORK/net"
find "$WORK/net" -name '*.sh' -o -name '*.py' | while read -r f; do
  if [ ! -L "$f" ] && [ "$(wc -l <"$f")" -le 1 ] && grep -qE '^\.\./.*\.sh$' "$f"; then
    target=$(cat "$f"); rm "$f"; ln -s "$target" "$f"
  fi
  chmod +x "$f"
done
if [ ${#SCRIPTS[@]} -eq 0 ]; then
  mapfile -t SCRIPTS < <(find "$WORK/net/tcp" -name '*.pkt' | sort)
  SUITE=1
else
  SUITE=0
fi

# 3. The shim.
SO=
if [ "$MODE" = shim ]; then
  cargo build --release --locked -p packetdrill-shim --quiet
  SO=$ROOT/target/release/libpacketdrill_shim.so
fi

# The expectations: "<script> n/a|fails <reason>", paths relative to gtests/net/tcp.
declare -A EXPECTED=()
if [ -f "$EXPECT" ]; then
  while read -r path status _; do
    case "$path" in ''|'#'*) continue ;; esac
    EXPECTED[$path]=$status
  done <"$EXPECT"
fi
rel() { local p=$1; p=${p#"$WORK/net/tcp/"}; echo "$p"; }

SUFFIX=$([ "$FAMILY" = ipv6 ] && echo "-ipv6" || true)
LOGS=$WORK/logs-$MODE$SUFFIX
rm -rf "$LOGS"
mkdir -p "$LOGS"
# packetdrill's IPv4 or IPv6 configuration, as its own run_all.py runs the suite.
if [ "$FAMILY" = ipv6 ]; then
  FLAGS=(--ip_version=ipv6 --mtu=1520 --local_ip=fd3d:0a0b:17d6::1 --gateway_ip=fd3d:0a0b:17d6:8888::1
    --remote_ip=fd3d:fa7b:d17d::1 -D TFO_COOKIE=c1d1e9742a47a9bc -D CMSG_LEVEL_IP=SOL_IPV6
    -D CMSG_TYPE_RECVERR=IPV6_RECVERR)
  SO_FLAGS="profile=linux,local_ip=fd3d:0a0b:17d6::1,mtu=1520"
else
  FLAGS=(--ip_version=ipv4 --local_ip=192.168.0.1 --gateway_ip=192.168.0.1 --netmask_ip=255.255.0.0
    --remote_ip=192.0.2.1 -D TFO_COOKIE=3021b9d889017eeb -D CODE=host_unreachable
    -D CMSG_LEVEL_IP=SOL_IP -D CMSG_TYPE_RECVERR=IP_RECVERR)
  SO_FLAGS="profile=linux"
fi
[ "$MODE" = shim ] && FLAGS+=(--so_filename="$SO" --so_flags="$SO_FLAGS")

run_one() {
  local script=$1 name log rc
  name=$(rel "$script")
  log=$LOGS/${name//\//__}.log
  local -a flags
  read -r -a flags <<<"$FLAGS_STR"
  if [ "$MODE" = shim ] && grep -qxF "$name" <<<"$NA_LIST"; then
    printf 'N/A  %s\n' "$name"
    return
  fi
  # The init command (defaults.sh) sets sysctls and a qdisc on tun0: a namespace of its own keeps
  # them off the host; against the shim a tun0 must exist for it, though no packet crosses it.
  set +e
  (cd "$(dirname "$script")" && timeout -k 5 "$TIMEOUT" unshare -n bash -c '
      ip link set lo up
      [ "$1" = shim ] && ip tuntap add tun0 mode tun && ip link set tun0 up
      # The shim is also preloaded: its getsockopt answers TCP_INFO for the Python assertions.
      [ "$1" = shim ] && export LD_PRELOAD="$2"
      shift 2
      exec "$@"' _ "$MODE" "$SO" "$PD" "${flags[@]}" "$(basename "$script")") >"$log" 2>&1
  rc=$?
  set -e
  local first
  first=$(grep -v -e 'Operation not permitted' -e '^sysctl: ' -e 'Specified qdisc kind is unknown' "$log" | head -3 | tr '\n\t' '  ' | cut -c1-300)
  if [ "$rc" -eq 0 ]; then
    printf 'PASS %s\n' "$name"
  elif [ "$rc" -ge 124 ]; then
    printf 'FAIL %s\t(timed out after %ss) %s\n' "$name" "$TIMEOUT" "$first"
  else
    printf 'FAIL %s\t%s\n' "$name" "$first"
  fi
}
# Arrays do not cross `export`: the flags (none has a space) and the n/a list travel as text.
FLAGS_STR="${FLAGS[*]}"
NA_LIST=$(for k in "${!EXPECTED[@]}"; do if [ "${EXPECTED[$k]}" = n/a ]; then echo "$k"; fi; done | sort)
export -f run_one rel
export MODE LOGS TIMEOUT PD WORK SO FLAGS_STR NA_LIST

RESULTS=$WORK/results-$MODE$SUFFIX.txt
printf '%s\n' "${SCRIPTS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$1"' _ {} | tee "$RESULTS.unsorted"
sort -k2 "$RESULTS.unsorted" >"$RESULTS"
rm -f "$RESULTS.unsorted"

passed=$(grep -c '^PASS' "$RESULTS" || true)
failed=$(grep -c '^FAIL' "$RESULTS" || true)
na=$(grep -c '^N/A' "$RESULTS" || true)
total=${#SCRIPTS[@]}
target=$([ "$MODE" = shim ] && echo "tcp-lib" || echo "Linux $(uname -r)")
echo
echo "packetdrill ($target, $FAMILY): $passed passed, $failed failed, $na not applicable of $total"

[ "$CHECK" = 1 ] && [ "$MODE" = shim ] || exit 0

# 4. The ratchet: every applicable script passes unless the expectations file says it fails.
bad=0
while read -r status name _; do
  expected=${EXPECTED[$name]:-pass}
  if [ "$status" = FAIL ] && [ "$expected" != fails ]; then
    echo "REGRESSION: $name failed (the expectations file says it passes); log: $LOGS/${name//\//__}.log"
    bad=1
  elif [ "$status" = PASS ] && [ "$expected" = fails ]; then
    echo "NOW PASSES: $name is listed in $EXPECT as failing: remove its line"
    bad=1
  fi
done <"$RESULTS"
if [ "$SUITE" = 1 ]; then
  for name in "${!EXPECTED[@]}"; do
    [ -e "$WORK/net/tcp/$name" ] || { echo "STALE: $EXPECT lists $name, which is not in the suite"; bad=1; }
  done
fi
exit "$bad"
