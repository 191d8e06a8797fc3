//! The BPF side of [`AfXdp`](super::AfXdp), with the raw `bpf(2)` system call and nothing else: an
//! `XSKMAP` (receive queue index → AF_XDP socket), a five-instruction XDP program that redirects every
//! frame of a queue to that queue's socket, and a BPF link that attaches the program to the interface.
//!
//! No libbpf, no ELF object, no bpffs: the map, the program and the link are file descriptors this
//! process holds ([`OwnedFd`]), so the program is detached when the link's descriptor closes (on drop,
//! or when the process dies), and nothing is pinned anywhere.
//!
//! The program is what libxdp's default program does on current kernels, in eBPF assembly
//! (Documentation/bpf/standardization/instruction-set.rst for the encoding):
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)        ; ctx->rx_queue_index (struct xdp_md: data, data_end, data_meta,
//!                               ;  ingress_ifindex, rx_queue_index)
//! r1 = map_fd ll                ; BPF_LD_IMM64 with src = BPF_PSEUDO_MAP_FD
//! r3 = 2                        ; XDP_PASS: the action when the queue has no socket in the map
//! call bpf_redirect_map         ; helper 51; its result is the program's verdict
//! exit
//! ```
//!
//! It reads the context and nothing else: it never writes packet memory, and it neither moves the
//! data start (`bpf_xdp_adjust_head`) nor writes metadata, which the UMEM layout relies on (see the
//! [parent module](super)).
//!
//! The constants and structures below are from `include/uapi/linux/bpf.h` and `if_link.h` (Linux 5.9+
//! for XDP links); `libc` has none of them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// bpf(2) commands.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;

/// `BPF_MAP_TYPE_XSKMAP`.
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`, the attach type of an XDP link.
const BPF_XDP: u32 = 37;
/// `BPF_ANY`: create or update a map element.
const BPF_ANY: u64 = 0;
/// `BPF_PSEUDO_MAP_FD`: the immediate of a 64-bit load is a map's file descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `BPF_FUNC_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`.
const XDP_PASS: i32 = 2;

/// `XDP_FLAGS_SKB_MODE` (if_link.h): generic XDP, in the stack after the skb is built.
pub(super) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the driver's receive path.
pub(super) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The verifier's log, when a load fails: enough for a five-instruction program.
const LOG_SIZE: usize = 4096;

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one (little-endian bitfields; on big-endian
    /// targets the kernel's bitfields are the other way round).
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    #[cfg(target_endian = "little")]
    let regs = (src << 4) | (dst & 0x0f);
    #[cfg(target_endian = "big")]
    let regs = (dst << 4) | (src & 0x0f);
    Insn { code, regs, off, imm }
}

/// The redirect program for the map `map_fd`.
fn program(map_fd: RawFd) -> [Insn; 6] {
    [
        // BPF_LDX | BPF_MEM | BPF_W: r2 = *(u32 *)(r1 + 16)
        insn(0x61, 2, 1, 16, 0),
        // BPF_LD | BPF_DW | BPF_IMM (two slots): r1 = map
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // BPF_ALU64 | BPF_MOV | BPF_K: r3 = XDP_PASS
        insn(0xb7, 3, 0, 0, XDP_PASS),
        // BPF_JMP | BPF_CALL
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // BPF_JMP | BPF_EXIT
        insn(0x95, 0, 0, 0, 0),
    ]
}

/// The head of `union bpf_attr` for `BPF_MAP_CREATE`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The head of `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The head of `union bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    /// The rest of the union's `link_create` member (unused here, zero).
    _rest: [u64; 4],
}

/// `bpf(cmd, attr, size_of::<T>())`, returning the new descriptor.
///
/// # Safety
///
/// `attr` is the attribute structure the kernel expects for `cmd` (a prefix of `union bpf_attr`), and
/// every pointer in it is valid for what the command does with it for the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    let size = libc::c_uint::try_from(size_of::<T>()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: the caller vouches for `attr` and its pointers; the kernel reads (and for some commands
    // writes) at most `size` bytes of it.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), size) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// Wraps a descriptor a `bpf(2)` command returned.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    let raw = RawFd::try_from(fd).map_err(|_| io::Error::other("bpf returned an impossible descriptor"))?;
    // SAFETY: the kernel just returned `raw` as a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (d, s) in out.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    out
}

/// An `XSKMAP` of `entries` slots (one per receive queue index).
pub(super) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name16("nc_xsks"),
        ..MapCreateAttr::default()
    };
    // SAFETY: a map-create attribute with no pointers.
    owned(unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?)
}

/// `map[queue] = socket`.
pub(super) fn set_xsk(map: &OwnedFd, queue: u32, socket: &OwnedFd) -> io::Result<()> {
    let key = queue;
    let value = u32::try_from(socket.as_raw_fd()).map_err(|_| io::Error::other("negative descriptor"))?;
    let mut attr = MapElemAttr {
        map_fd: u32::try_from(map.as_raw_fd()).map_err(|_| io::Error::other("negative descriptor"))?,
        key: std::ptr::from_ref(&key) as u64,
        value: std::ptr::from_ref(&value) as u64,
        flags: BPF_ANY,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` and `value` are live `u32`s (the map's key and value sizes) for the call; the
    // kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// Why loading the program failed: the error, and the verifier's log when it said anything.
pub(super) struct LoadError {
    pub(super) error: io::Error,
    pub(super) log: String,
}

/// Loads the redirect program for `map`.
pub(super) fn load_redirect_program(map: &OwnedFd) -> Result<OwnedFd, LoadError> {
    let insns = program(map.as_raw_fd());
    let license = c"MIT OR Apache-2.0";
    let mut log = vec![0u8; LOG_SIZE];
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: u32::try_from(insns.len()).unwrap_or(0),
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: u32::try_from(log.len()).unwrap_or(0),
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name16("nc_xsk_redirect"),
        expected_attach_type: BPF_XDP,
        ..ProgLoadAttr::default()
    };
    // SAFETY: `insns` (insn_cnt instructions), `license` (NUL-terminated) and `log` (log_size bytes,
    // written by the kernel) all live across the call.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) } {
        Ok(fd) => owned(fd).map_err(|error| LoadError { error, log: String::new() }),
        Err(error) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(LoadError { error, log: String::from_utf8_lossy(&log[..end]).trim().to_owned() })
        }
    }
}

/// Attaches `prog` to interface `ifindex` in `xdp_flags` mode (`XDP_FLAGS_SKB_MODE` or
/// `XDP_FLAGS_DRV_MODE`); the program stays attached while the returned link is open.
pub(super) fn attach_xdp(prog: &OwnedFd, ifindex: u32, xdp_flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: u32::try_from(prog.as_raw_fd()).map_err(|_| io::Error::other("negative descriptor"))?,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: xdp_flags,
        ..LinkCreateAttr::default()
    };
    // SAFETY: a link-create attribute with no pointers.
    owned(unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?)
}

/// The map, the program and its link: dropping this detaches the program (the link first).
#[derive(Debug)]
pub(super) struct Redirect {
    // Held only to be closed on drop. Field order is drop order: the link (detaching the program)
    // goes first.
    pub(super) _link: OwnedFd,
    pub(super) _prog: OwnedFd,
    pub(super) _map: OwnedFd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_encodes_as_the_kernel_expects() {
        let p = program(7);
        assert_eq!(size_of::<Insn>(), 8);
        // r2 = *(u32 *)(r1 + 16)
        assert_eq!((p[0].code, p[0].regs, p[0].off), (0x61, 0x12, 16));
        // ld_imm64 r1, map fd 7 (src = BPF_PSEUDO_MAP_FD)
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[3].code, p[3].regs, p[3].imm), (0xb7, 0x03, 2));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(size_of::<MapCreateAttr>(), 44);
    }
}
