#!/usr/bin/env bash
# Boots a QEMU guest with an emulated Intel IOMMU and runs the ixgbe-vfio VFIO probe
# (crates/ixgbe-vfio/examples/vfio_probe.rs) inside it: the test crates/ixgbe-vfio/tests/qemu_vfio.rs
# calls this, and it works by hand too.
#
#   scripts/qemu-vfio-guest.sh build            build the guest image (kernel cached, probe + initramfs)
#   scripts/qemu-vfio-guest.sh run SCENARIO     boot it: SCENARIO is `main` or `noiommu`
#   scripts/qemu-vfio-guest.sh check            exit 0 when qemu-system-x86_64 and busybox are present
#
# Everything comes from Debian packages (qemu-system-x86, busybox-static, and a linux-image-6.1 .deb
# fetched with `apt-get download`) and is cached under target/qemu-vfio/; nothing prebuilt is committed.
# QEMU runs with TCG only (accel=tcg): no KVM.
#
# The guest: q35 + intel-iommu (aw-bits=48, so that IOVA = virtual address fits), an `edu` device and an
# e1000e bound to vfio-pci, a second `edu` left unbound, and behind a PCI-to-PCI bridge (one IOMMU group)
# a third `edu` bound to vfio-pci next to a `pci-serial` owned by the kernel's 8250 driver (a group that
# is not viable). The `noiommu` scenario has no intel-iommu device at all.
# QEMU options are comma-separated inside one argument:
# shellcheck disable=SC2054
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${QEMU_VFIO_DIR:-target/qemu-vfio}
MODULES=(vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio-pci-core vfio-pci)
TRIPLE=x86_64-unknown-linux-gnu

log() { echo "qemu-vfio: $*" >&2; }

# The guest kernel: the linux-image-6.1.0-N-amd64 that Debian's linux-image-amd64 points at, extracted
# once into $OUT/kernel/<version>/ (vmlinuz + the six modules).
kernel_dir() {
  local cached
  cached=$(find "$OUT/kernel" -mindepth 2 -maxdepth 2 -name vmlinuz -printf '%h\n' 2>/dev/null | sort -V | tail -1)
  if [ -n "$cached" ]; then
    echo "$cached"
    return
  fi
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$pkg" ] && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >&2
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$pkg" ] || { log "cannot find a linux-image package (run apt-get update)"; return 1; }
  local version=${pkg#linux-image-}
  local dir="$OUT/kernel/$version" dl="$OUT/kernel/download"
  rm -rf "$dl" && mkdir -p "$dl"
  log "downloading $pkg"
  (cd "$dl" && apt-get download -q "$pkg" >&2 2>/dev/null) || (cd "$dl" && apt-get download "$pkg" >&2)
  local deb
  deb=$(ls "$dl"/*.deb)
  local wanted=("./boot/vmlinuz-$version")
  for m in "${MODULES[@]}"; do
    case $m in
      vfio-pci | vfio-pci-core) wanted+=("./lib/modules/$version/kernel/drivers/vfio/pci/$m.ko") ;;
      irqbypass) wanted+=("./lib/modules/$version/kernel/virt/lib/$m.ko") ;;
      *) wanted+=("./lib/modules/$version/kernel/drivers/vfio/$m.ko") ;;
    esac
  done
  mkdir -p "$dl/x"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dl/x" "${wanted[@]}"
  mkdir -p "$dir.tmp/modules"
  cp "$dl/x/boot/vmlinuz-$version" "$dir.tmp/vmlinuz"
  for m in "${MODULES[@]}"; do
    cp "$(find "$dl/x/lib/modules" -name "$m.ko")" "$dir.tmp/modules/"
  done
  rm -rf "$dl" "$dir"
  mv "$dir.tmp" "$dir"
  echo "$dir"
}

# The probe, statically linked (glibc, crt-static) so it runs on busybox alone; a target dir of its
# own so that the different RUSTFLAGS do not rebuild the workspace's main one.
build_probe() {
  RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --locked -p ixgbe-vfio --example vfio_probe \
    --target "$TRIPLE" --target-dir "$OUT/cargo" >&2
  echo "$OUT/cargo/$TRIPLE/debug/examples/vfio_probe"
}

write_init() {
  cat >"$1" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in vfio vfio_iommu_type1 vfio_virqfd irqbypass vfio-pci-core vfio-pci; do
  insmod "/modules/$m.ko" || echo "init: insmod $m failed"
done
args=
for word in $(cat /proc/cmdline); do
  case $word in
    vfio_bind=*)
      for a in $(echo "${word#vfio_bind=}" | tr , ' '); do
        echo vfio-pci > "/sys/bus/pci/devices/$a/driver_override"
        echo "$a" > /sys/bus/pci/drivers_probe 2>/dev/null || true
      done ;;
    probe=*) args=$(echo "${word#probe=}" | tr , ' ') ;;
  esac
done
echo "init: groups: $(ls /dev/vfio 2>/dev/null | tr '\n' ' ')"
for d in /sys/bus/pci/devices/*; do
  drv=-
  [ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
  grp=-
  [ -e "$d/iommu_group" ] && grp=$(basename "$(readlink "$d/iommu_group")")
  echo "init: $(basename "$d") $(cat "$d/vendor"):$(cat "$d/device") group $grp driver $drv"
done
echo "init: running vfio_probe $args"
/vfio_probe $args
echo "init: vfio_probe exited with $?"
poweroff -f
INIT
  chmod +x "$1"
}

build() {
  command -v busybox >/dev/null || { log "busybox not found (apt-get install busybox-static)"; return 1; }
  local kdir probe root
  kdir=$(kernel_dir)
  probe=$(build_probe)
  root="$OUT/root"
  rm -rf "$root" && mkdir -p "$root"/{bin,dev,proc,sys,modules}
  cp "$(command -v busybox)" "$root/bin/busybox"
  cp "$probe" "$root/vfio_probe"
  cp "$kdir"/modules/*.ko "$root/modules/"
  write_init "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet) >"$OUT/initramfs.cpio.tmp"
  mv "$OUT/initramfs.cpio.tmp" "$OUT/initramfs.cpio"
  rm -rf "$root"
  ln -sfn "$(realpath "$kdir/vmlinuz")" "$OUT/vmlinuz"
  log "image: $OUT/vmlinuz $OUT/initramfs.cpio ($(du -h "$OUT/initramfs.cpio" | cut -f1))"
}

run() {
  local scenario=${1:?scenario: main or noiommu}
  local iommu=(-device intel-iommu,intremap=on,caching-mode=on,aw-bits=48)
  local append="console=ttyS0 intel_iommu=on panic=-1 loglevel=4"
  # edu's DMA engine masks addresses to 28 bits unless told otherwise.
  local devices=(
    -device edu,addr=03.0,dma_mask=0xffffffffffffffff
    -device e1000e,addr=04.0
    -device edu,addr=05.0
    -device pci-bridge,id=br1,chassis_nr=1,addr=06.0
    -device edu,bus=br1,addr=01.0,dma_mask=0xffffffffffffffff
    -device pci-serial,bus=br1,addr=02.0
  )
  case $scenario in
    main)
      append+=" vfio_bind=0000:00:03.0,0000:00:04.0,0000:01:01.0"
      append+=" probe=main,--edu,0000:00:03.0,--e1000e,0000:00:04.0,--unbound,0000:00:05.0,--not-viable,0000:01:01.0"
      ;;
    noiommu)
      iommu=()
      append="console=ttyS0 panic=-1 loglevel=4 vfio_bind=0000:00:03.0 probe=noiommu,--edu,0000:00:03.0"
      devices=(-device edu,addr=03.0)
      ;;
    *)
      log "unknown scenario $scenario"
      return 2
      ;;
  esac
  exec qemu-system-x86_64 -machine q35,accel=tcg "${iommu[@]}" -m 512 -smp 1 \
    -nodefaults -display none -serial stdio -no-reboot -nic none \
    -kernel "$OUT/vmlinuz" -initrd "$OUT/initramfs.cpio" -append "$append" "${devices[@]}"
}

case ${1:-} in
  check) command -v qemu-system-x86_64 >/dev/null && command -v busybox >/dev/null ;;
  build) build ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: $0 check | build | run main|noiommu" >&2
    exit 2
    ;;
esac
