#!/usr/bin/env bash
# Hands Intel NICs (PCI functions) to vfio-pci for the ixgbe-vfio userspace driver and reserves 2 MiB
# hugepages. Run as root; --dry-run prints every command instead of running it (no root needed).
#
# Checks, for each address, before anything changes: the address's form, that the device exists, that it
# is an Intel network controller (82599 expected), that the IOMMU gives it a group (or --noiommu),
# which driver owns it, and that none of its network interfaces is up (unless --force).
#
# SYSFS_ROOT (default /sys) points the script at another sysfs tree: the tests run it against a fake one.
set -euo pipefail

SYSFS_ROOT=${SYSFS_ROOT:-/sys}
DRY_RUN=0
FORCE=0
NOIOMMU=0
HUGEPAGES=512
ADDRESSES=()

# The 82599 device ids (Linux ixgbe_type.h); other Intel NICs are bound with a warning.
IXGBE_82599_IDS=" 0x10f7 0x1514 0x1517 0x10f8 0x10f9 0x10fb 0x152a 0x1529 0x1507 0x154d 0x154a 0x154f 0x1557 0x1558 0x10fc 0x151c "

usage() {
  cat <<EOF
Usage: $(basename "$0") [OPTIONS] PCI_ADDRESS...

Binds each PCI_ADDRESS (full form, e.g. 0000:03:00.0; see \`lspci -D -d 8086:\`) to vfio-pci and
reserves 2 MiB hugepages, so that ixgbe-vfio can drive the NIC from userspace.

Options:
  --dry-run        print every command instead of running it (reads sysfs, changes nothing)
  --force          bind even if a network interface of the device is up (its traffic stops)
  --hugepages N    reserve N hugepages of 2 MiB (default 512 = 1 GiB; 0 leaves them alone)
  --noiommu        without an IOMMU, turn on vfio's enable_unsafe_noiommu_mode (UNSAFE: the NIC can
                   then DMA anywhere in memory; development machines only)
  -h, --help       this text

Environment:
  SYSFS_ROOT       the sysfs tree to use (default /sys)
EOF
}

die() {
  printf 'vfio-bind: error: %s\n' "$*" >&2
  exit 1
}

note() {
  printf 'vfio-bind: %s\n' "$*" >&2
}

# Runs a command, or prints it in dry-run mode.
run() {
  if ((DRY_RUN)); then
    printf '%s\n' "$*"
  else
    "$@" || die "command failed: $*"
  fi
}

# Writes VALUE to the sysfs FILE, or prints the equivalent shell command in dry-run mode.
write_sysfs() {
  local value=$1 file=$2
  if ((DRY_RUN)); then
    printf 'echo %s > %s\n' "$value" "$file"
  else
    printf '%s\n' "$value" >"$file" || die "writing '$value' to $file failed"
  fi
}

# The last path component of a symlink's target, or nothing when the link does not exist.
link_name() {
  if [[ -L $1 ]]; then
    basename "$(readlink "$1")"
  fi
}

while (($#)); do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --force) FORCE=1 ;;
    --noiommu) NOIOMMU=1 ;;
    --hugepages)
      (($# >= 2)) || die "--hugepages needs a number"
      HUGEPAGES=$2
      shift
      ;;
    --hugepages=*) HUGEPAGES=${1#--hugepages=} ;;
    -h | --help)
      usage
      exit 0
      ;;
    --)
      shift
      ADDRESSES+=("$@")
      break
      ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) ADDRESSES+=("$1") ;;
  esac
  shift
done

[[ $HUGEPAGES =~ ^[0-9]+$ ]] || die "--hugepages wants a whole number, got '$HUGEPAGES'"
((${#ADDRESSES[@]})) || {
  usage >&2
  die "no PCI address given"
}
if ((!DRY_RUN)) && ((EUID != 0)); then
  die "binding drivers needs root: run with sudo (or with --dry-run to see the plan)"
fi

# ---- checks: nothing changes until every address passed them ----
GROUPS_DIR=$SYSFS_ROOT/kernel/iommu_groups
NEED_NOIOMMU=0
declare -A DRIVER_OF=()
for i in "${!ADDRESSES[@]}"; do
  addr=${ADDRESSES[$i]}
  if [[ $addr =~ ^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]]; then
    die "'$addr' lacks the PCI domain: did you mean 0000:$addr?"
  fi
  if ! [[ $addr =~ ^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-1][0-9a-fA-F]\.[0-7]$ ]]; then
    die "'$addr' is not a PCI address of the form 0000:03:00.0 (domain:bus:device.function)"
  fi
  addr=${addr,,}
  ADDRESSES[i]=$addr
  dev=$SYSFS_ROOT/bus/pci/devices/$addr
  [[ -d $dev ]] || die "no PCI device $addr ($dev does not exist); list the Intel NICs with: lspci -D -d 8086:"

  vendor=$(<"$dev/vendor")
  device=$(<"$dev/device")
  class=$(<"$dev/class")
  [[ $vendor == 0x8086 ]] || die "$addr is not an Intel device (vendor $vendor, want 0x8086)"
  [[ $class == 0x02* ]] || die "$addr is not a network controller (class $class, want 0x02xxxx)"
  if [[ $IXGBE_82599_IDS != *" ${device,,} "* ]]; then
    note "warning: $addr is Intel $device, not an 82599; ixgbe-vfio will refuse to drive it"
  fi

  driver=$(link_name "$dev/driver")
  DRIVER_OF[$addr]=$driver
  note "$addr: Intel $device, driver ${driver:-(none)}"

  up=()
  for netdir in "$dev"/net/*; do
    [[ -e $netdir ]] || continue
    ifname=$(basename "$netdir")
    flags=$(<"$netdir/flags")
    if ((flags & 0x1)); then
      up+=("$ifname")
    fi
  done
  if ((${#up[@]})); then
    if ((FORCE)); then
      note "warning: interface(s) ${up[*]} of $addr are up; --force: binding anyway, their traffic stops"
    else
      die "interface(s) ${up[*]} of $addr are up (in use?); take them down first (ip link set ${up[0]} down) or pass --force"
    fi
  fi

  group=$(link_name "$dev/iommu_group")
  if [[ -n $group ]]; then
    for member in "$GROUPS_DIR/$group/devices"/*; do
      [[ -e $member || -L $member ]] || continue
      peer=$(basename "$member")
      [[ $peer == "$addr" ]] && continue
      peer_driver=$(link_name "$member/driver")
      case ${peer_driver:-none} in
        none | vfio-pci | pci-stub | pcieport) ;;
        *) note "warning: IOMMU group $group also holds $peer (driver $peer_driver): bind it to vfio-pci too, or VFIO will say the group is not viable" ;;
      esac
    done
  else
    shopt -s nullglob
    groups=("$GROUPS_DIR"/*)
    shopt -u nullglob
    if ((${#groups[@]})); then
      die "$addr has no IOMMU group although $GROUPS_DIR has groups; is it behind a bridge the IOMMU does not cover?"
    fi
    if ((!NOIOMMU)); then
      die "no IOMMU groups ($GROUPS_DIR is empty): the IOMMU is off. Turn it on (intel_iommu=on iommu=pt, or amd_iommu=on, on the kernel command line) and reboot; or pass --noiommu to use vfio's enable_unsafe_noiommu_mode (UNSAFE: no DMA protection)"
    fi
    NEED_NOIOMMU=1
  fi
done

# ---- actions ----
if ((DRY_RUN)); then
  echo "# dry run: these commands would run (SYSFS_ROOT=$SYSFS_ROOT)"
fi

if ((NEED_NOIOMMU)); then
  note "WARNING: enabling vfio's enable_unsafe_noiommu_mode: the NIC can DMA anywhere; never in production"
  run modprobe vfio enable_unsafe_noiommu_mode=1
  write_sysfs 1 "$SYSFS_ROOT/module/vfio/parameters/enable_unsafe_noiommu_mode"
fi
run modprobe vfio-pci

for addr in "${ADDRESSES[@]}"; do
  dev=$SYSFS_ROOT/bus/pci/devices/$addr
  driver=${DRIVER_OF[$addr]}
  if [[ $driver == vfio-pci ]]; then
    note "$addr is already bound to vfio-pci"
    continue
  fi
  if [[ -n $driver ]]; then
    write_sysfs "$addr" "$dev/driver/unbind"
  fi
  write_sysfs vfio-pci "$dev/driver_override"
  write_sysfs "$addr" "$SYSFS_ROOT/bus/pci/drivers/vfio-pci/bind"
  if ((!DRY_RUN)); then
    now=$(link_name "$dev/driver")
    [[ $now == vfio-pci ]] || die "$addr is bound to '${now:-nothing}' after the bind, not vfio-pci; see dmesg"
    group=$(link_name "$dev/iommu_group")
    note "$addr is bound to vfio-pci${group:+ (IOMMU group $group: /dev/vfio/$group)}"
  fi
done

if ((HUGEPAGES > 0)); then
  nr=$SYSFS_ROOT/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
  write_sysfs "$HUGEPAGES" "$nr"
  if ((!DRY_RUN)); then
    got=$(<"$nr")
    if ((got < HUGEPAGES)); then
      note "warning: asked for $HUGEPAGES hugepages, the kernel reserved $got (memory fragmented? reserve at boot with hugepages=$HUGEPAGES)"
    else
      note "$got hugepages of 2 MiB reserved"
    fi
  fi
fi
