//! The C side: `struct packetdrill_interface` and the functions packetdrill calls through it.
//!
//! Every function here copies what packetdrill passes (buffers, addresses, option values) into
//! owned Rust values, runs the call on the host's thread ([`Actor`]), and copies the result back,
//! setting `errno` on the calling thread and returning -1 on failure, as the system calls do. No
//! pointer from packetdrill crosses to the host's thread.
//!
//! `fcntl` and `ioctl` are variadic in C. Stable Rust cannot define a variadic function, so they
//! are defined with their one optional argument as a fixed trailing parameter: on the System V
//! x86-64 and AArch64 (Linux) ABIs an integer or pointer argument travels in the same register
//! whether the callee is variadic or not. packetdrill passes either no argument (the value read is
//! then unspecified and not used: `F_GETFL`, `FIONREAD` write-only) or one `int`/pointer.

use std::ffi::{CStr, c_char, c_int, c_long, c_ulong, c_void};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use libc::{iovec, msghdr, pollfd, size_t, sockaddr, sockaddr_in, sockaddr_in6, socklen_t, ssize_t, timeval};

use crate::actor::Actor;
use crate::fds::Errno;
use crate::profile::Profile;
use crate::socket::Outcome;

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!(
    "the packetdrill shim's fcntl/ioctl entry points rely on the Linux x86-64/AArch64 calling convention"
);

type Ud = *mut c_void;

/// `struct packetdrill_interface` from packetdrill's `packetdrill.h`, field for field.
#[repr(C)]
#[derive(Debug)]
pub struct PacketdrillInterface {
    userdata: Ud,
    free: Option<unsafe extern "C" fn(Ud)>,
    socket: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int) -> c_int>,
    bind: Option<unsafe extern "C" fn(Ud, c_int, *const sockaddr, socklen_t) -> c_int>,
    listen: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    accept: Option<unsafe extern "C" fn(Ud, c_int, *mut sockaddr, *mut socklen_t) -> c_int>,
    connect: Option<unsafe extern "C" fn(Ud, c_int, *const sockaddr, socklen_t) -> c_int>,
    read: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, size_t) -> ssize_t>,
    readv: Option<unsafe extern "C" fn(Ud, c_int, *const iovec, c_int) -> ssize_t>,
    recv: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, size_t, c_int) -> ssize_t>,
    recvfrom: Option<
        unsafe extern "C" fn(Ud, c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t,
    >,
    recvmsg: Option<unsafe extern "C" fn(Ud, c_int, *mut msghdr, c_int) -> ssize_t>,
    write: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, size_t) -> ssize_t>,
    writev: Option<unsafe extern "C" fn(Ud, c_int, *const iovec, c_int) -> ssize_t>,
    send: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, size_t, c_int) -> ssize_t>,
    sendto: Option<
        unsafe extern "C" fn(Ud, c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t,
    >,
    sendmsg: Option<unsafe extern "C" fn(Ud, c_int, *const msghdr, c_int) -> ssize_t>,
    fcntl: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_long) -> c_int>,
    ioctl: Option<unsafe extern "C" fn(Ud, c_int, c_ulong, *mut c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    shutdown: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    getsockopt: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int>,
    setsockopt: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *const c_void, socklen_t) -> c_int>,
    poll: Option<unsafe extern "C" fn(Ud, *mut pollfd, libc::nfds_t, c_int) -> c_int>,
    netdev_send: Option<unsafe extern "C" fn(Ud, *const c_void, size_t) -> c_int>,
    netdev_receive: Option<unsafe extern "C" fn(Ud, *mut c_void, *mut size_t, *mut i64) -> c_int>,
    usleep: Option<unsafe extern "C" fn(Ud, libc::useconds_t) -> c_int>,
    gettimeofday: Option<unsafe extern "C" fn(Ud, *mut timeval, *mut c_void) -> c_int>,
    epoll_create: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    epoll_ctl: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut libc::epoll_event) -> c_int>,
    epoll_wait: Option<unsafe extern "C" fn(Ud, c_int, *mut libc::epoll_event, c_int, c_int) -> c_int>,
    pipe: Option<unsafe extern "C" fn(Ud, *mut c_int) -> c_int>,
    splice: Option<
        unsafe extern "C" fn(Ud, c_int, *mut libc::loff_t, c_int, *mut libc::loff_t, size_t, u32) -> ssize_t,
    >,
}

/// packetdrill's entry point: parses `flags` ([`Profile::parse`]), starts the host and fills in
/// `ifc`. A flag it cannot use, or a host that cannot start, ends the process with status 2 and
/// a message naming the cause (the interface has no way to report a failure).
///
/// # Safety
/// `flags` is null or a NUL-terminated string; `ifc` points to a writable
/// `struct packetdrill_interface`. packetdrill guarantees both.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn packetdrill_interface_init(flags: *const c_char, ifc: *mut PacketdrillInterface) {
    let flags = if flags.is_null() {
        String::new()
    } else {
        // SAFETY: packetdrill passes its `--so_flags` argument, a NUL-terminated string.
        unsafe { CStr::from_ptr(flags) }.to_string_lossy().into_owned()
    };
    let actor = match Profile::parse(&flags).map_err(|e| e.to_string()).and_then(Actor::spawn) {
        Ok(actor) => actor,
        Err(e) => {
            eprintln!("packetdrill-shim: {e}");
            std::process::exit(2);
        }
    };
    let actor = Box::into_raw(Box::new(actor));
    // Release: pairs with the Acquire load in the interposed getsockopt.
    crate::tcp_info::ACTOR.store(actor, std::sync::atomic::Ordering::Release);
    let filled = PacketdrillInterface {
        userdata: actor.cast(),
        free: Some(free),
        socket: Some(socket),
        bind: Some(bind),
        listen: Some(listen),
        accept: Some(accept),
        connect: Some(connect),
        read: Some(read),
        readv: Some(readv),
        recv: Some(recv),
        recvfrom: Some(recvfrom),
        recvmsg: Some(recvmsg),
        write: Some(write),
        writev: Some(writev),
        send: Some(send),
        sendto: Some(sendto),
        sendmsg: Some(sendmsg),
        fcntl: Some(fcntl),
        ioctl: Some(ioctl),
        close: Some(close),
        shutdown: Some(shutdown),
        getsockopt: Some(getsockopt),
        setsockopt: Some(setsockopt),
        poll: Some(poll),
        netdev_send: Some(netdev_send),
        netdev_receive: Some(netdev_receive),
        usleep: Some(usleep),
        gettimeofday: Some(gettimeofday),
        epoll_create: Some(epoll_create),
        epoll_ctl: Some(epoll_ctl),
        epoll_wait: Some(epoll_wait),
        pipe: Some(pipe),
        splice: Some(splice),
    };
    // SAFETY: `ifc` points to a writable interface struct (packetdrill's `so_instance`).
    unsafe { ifc.write(filled) };
}

/// The actor behind `ud`.
///
/// # Safety
/// `ud` is the `userdata` [`packetdrill_interface_init`] filled in, not yet passed to `free`.
unsafe fn actor<'a>(ud: Ud) -> &'a Actor {
    // SAFETY: the caller guarantees `ud` is our live `Box<Actor>`; calls only read it.
    unsafe { &*ud.cast::<Actor>() }
}

fn int_result(r: Result<i32, Errno>) -> c_int {
    r.unwrap_or_else(|e| {
        e.set();
        -1
    })
}

fn len_result(r: Result<usize, Errno>) -> ssize_t {
    match r {
        Ok(n) => ssize_t::try_from(n).unwrap_or(ssize_t::MAX),
        Err(e) => {
            e.set();
            -1
        }
    }
}

/// Reads an IPv4 or IPv6 socket address.
///
/// # Safety
/// `addr` is null or valid for `len` bytes.
unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Result<SocketAddr, Errno> {
    if addr.is_null() || (len as usize) < size_of::<libc::sa_family_t>() {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: `addr` is valid for at least the family field (checked above); read unaligned.
    let family = unsafe { addr.cast::<libc::sa_family_t>().read_unaligned() };
    match c_int::from(family) {
        libc::AF_INET => {
            if (len as usize) < size_of::<sockaddr_in>() {
                return Err(Errno(libc::EINVAL));
            }
            // SAFETY: `addr` is valid for `len >= size_of::<sockaddr_in>()` bytes (checked above).
            let sin = unsafe { addr.cast::<sockaddr_in>().read_unaligned() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            if (len as usize) < size_of::<sockaddr_in6>() {
                return Err(Errno(libc::EINVAL));
            }
            // SAFETY: `addr` is valid for `len >= size_of::<sockaddr_in6>()` bytes (checked above).
            let sin6 = unsafe { addr.cast::<sockaddr_in6>().read_unaligned() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), 0, 0)))
        }
        _ => Err(Errno(libc::EAFNOSUPPORT)),
    }
}

/// Writes a socket address (`sockaddr_in` or `sockaddr_in6`) where `addr`/`len` ask for one,
/// truncated to `*len` as the system calls do, and sets `*len` to its full size.
///
/// # Safety
/// `addr` and `len` are null, or `len` is valid and `addr` valid for `*len` bytes.
unsafe fn write_addr(addr: *mut sockaddr, len: *mut socklen_t, a: SocketAddr) {
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: all-zero is a valid `sockaddr_in`.
            let mut sin: sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2);
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            // SAFETY: the caller's guarantee, passed on.
            unsafe { copy_sockaddr(addr, len, &sin) };
        }
        SocketAddr::V6(a) => {
            // SAFETY: all-zero is a valid `sockaddr_in6`.
            let mut sin6: sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::sa_family_t::try_from(libc::AF_INET6).unwrap_or(10);
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            // SAFETY: the caller's guarantee, passed on.
            unsafe { copy_sockaddr(addr, len, &sin6) };
        }
    }
}

/// Copies `value` to `addr`, truncated to `*len`, and sets `*len` to its size.
///
/// # Safety
/// As [`write_addr`].
unsafe fn copy_sockaddr<T>(addr: *mut sockaddr, len: *mut socklen_t, value: &T) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: `len` is valid (checked non-null; the caller guarantees the rest).
    let room = unsafe { len.read() } as usize;
    let n = room.min(size_of::<T>());
    // SAFETY: `addr` is valid for `room >= n` bytes; `value` is `size_of::<T>() >= n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(std::ptr::from_ref(value).cast::<u8>(), addr.cast::<u8>(), n) };
    let full = socklen_t::try_from(size_of::<T>()).unwrap_or(16);
    // SAFETY: as above.
    unsafe { len.write(full) };
}

/// The bytes of `iov[..iovcnt]`, gathered.
///
/// # Safety
/// `iov` is valid for `iovcnt` entries, each valid for its length (or null with length 0).
unsafe fn gather(iov: *const iovec, iovcnt: c_int) -> Result<Vec<u8>, Errno> {
    let count = usize::try_from(iovcnt).map_err(|_| Errno(libc::EINVAL))?;
    if count == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller guarantees `iov` holds `count` entries.
    let entries = unsafe { std::slice::from_raw_parts(iov, count) };
    let mut out = Vec::new();
    for e in entries {
        if e.iov_len == 0 {
            continue;
        }
        if e.iov_base.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: the caller guarantees each entry's base is valid for its length.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(e.iov_base.cast::<u8>(), e.iov_len) });
    }
    Ok(out)
}

/// The total room of `iov[..iovcnt]`.
///
/// # Safety
/// As [`gather`].
unsafe fn room(iov: *const iovec, iovcnt: c_int) -> usize {
    let count = usize::try_from(iovcnt).unwrap_or(0);
    if iov.is_null() || count == 0 {
        return 0;
    }
    // SAFETY: the caller guarantees `iov` holds `count` entries.
    unsafe { std::slice::from_raw_parts(iov, count) }.iter().map(|e| e.iov_len).sum()
}

/// Copies `data` into `iov[..iovcnt]` in order.
///
/// # Safety
/// As [`gather`], with the entries writable.
unsafe fn scatter(iov: *const iovec, iovcnt: c_int, mut data: &[u8]) {
    let count = usize::try_from(iovcnt).unwrap_or(0);
    if iov.is_null() || count == 0 {
        return;
    }
    // SAFETY: the caller guarantees `iov` holds `count` entries.
    let entries = unsafe { std::slice::from_raw_parts(iov, count) };
    for e in entries {
        if data.is_empty() {
            break;
        }
        let n = e.iov_len.min(data.len());
        if n == 0 || e.iov_base.is_null() {
            continue;
        }
        // SAFETY: the caller guarantees the entry's base is writable for its length (>= n).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), e.iov_base.cast::<u8>(), n) };
        data = &data[n..];
    }
}

/// Flags a receive or send call may carry: `MSG_DONTWAIT` (this call does not block) and
/// `MSG_NOSIGNAL` (no signal exists here anyway). Others fail with `EOPNOTSUPP`.
fn dontwait(flags: c_int) -> Result<bool, Errno> {
    if flags & !(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) != 0 {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    Ok(flags & libc::MSG_DONTWAIT != 0)
}

/// Receives up to `len` bytes.
fn receive(ud: &Actor, fd: c_int, len: usize, flags: c_int) -> Result<Vec<u8>, Errno> {
    let dontwait = dontwait(flags)?;
    ud.call(move |h| h.read(fd, len, dontwait))
}

/// Sends all of `data` (a blocking socket) or what fits.
fn transmit(ud: &Actor, fd: c_int, data: Vec<u8>, flags: c_int) -> Result<usize, Errno> {
    let dontwait = dontwait(flags)?;
    let mut written = 0;
    ud.call(move |h| h.write(fd, &data, &mut written, dontwait))
}

/// Copies `data` to `buf`.
///
/// # Safety
/// `buf` is valid for `data.len()` bytes (the call asked for at most the buffer's size).
unsafe fn copy_out(buf: *mut c_void, data: &[u8]) {
    if !data.is_empty() {
        // SAFETY: the caller guarantees `buf` has room for `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
    }
}

/// # Safety
/// `ud` is ours and live (packetdrill calls `free` once, last).
unsafe extern "C" fn free(ud: Ud) {
    if !ud.is_null() {
        // Release: the interposed getsockopt stops using the actor before it is dropped (packetdrill
        // calls free after its last event, when no getsockopt is in flight).
        let _ = crate::tcp_info::ACTOR.compare_exchange(
            ud.cast(),
            std::ptr::null_mut(),
            std::sync::atomic::Ordering::Release,
            std::sync::atomic::Ordering::Relaxed,
        );
        // SAFETY: `ud` came from `Box::into_raw` in init and is freed once, here.
        drop(unsafe { Box::from_raw(ud.cast::<Actor>()) });
    }
}

unsafe extern "C" fn socket(ud: Ud, domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    int_result(a.call(move |h| h.socket(domain, ty, protocol).into()))
}

unsafe extern "C" fn bind(ud: Ud, fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    // SAFETY: packetdrill passes a socket address of `len` bytes.
    let r = unsafe { read_addr(addr, len) }.and_then(|addr| a.call(move |h| h.bind(fd, addr).into()));
    int_result(r.map(|()| 0))
}

unsafe extern "C" fn listen(ud: Ud, fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    int_result(a.call(move |h| h.listen(fd, backlog).into()).map(|()| 0))
}

unsafe extern "C" fn accept(ud: Ud, fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    let r = a.call(move |h| h.accept(fd));
    if let Ok((_, peer)) = r {
        // SAFETY: packetdrill passes null or an address buffer with its length.
        unsafe { write_addr(addr, len, peer) };
    }
    int_result(r.map(|(fd, _)| fd))
}

unsafe extern "C" fn connect(ud: Ud, fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    // SAFETY: packetdrill passes a socket address of `len` bytes.
    let r = unsafe { read_addr(addr, len) }.and_then(|remote| a.call(move |h| h.connect(fd, remote)));
    int_result(r.map(|()| 0))
}

unsafe extern "C" fn read(ud: Ud, fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if buf.is_null() && count > 0 {
        return len_result(Err(Errno(libc::EFAULT)));
    }
    let r = receive(a, fd, count, 0);
    if let Ok(data) = &r {
        // SAFETY: `buf` has room for `count >= data.len()` bytes.
        unsafe { copy_out(buf, data) };
    }
    len_result(r.map(|d| d.len()))
}

unsafe extern "C" fn readv(ud: Ud, fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    // SAFETY: packetdrill passes `iovcnt` valid entries.
    let len = unsafe { room(iov, iovcnt) };
    let r = receive(a, fd, len, 0);
    if let Ok(data) = &r {
        // SAFETY: as above, writable; `data` fits their total room.
        unsafe { scatter(iov, iovcnt, data) };
    }
    len_result(r.map(|d| d.len()))
}

unsafe extern "C" fn recv(ud: Ud, fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if buf.is_null() && len > 0 {
        return len_result(Err(Errno(libc::EFAULT)));
    }
    let r = receive(a, fd, len, flags);
    if let Ok(data) = &r {
        // SAFETY: `buf` has room for `len >= data.len()` bytes.
        unsafe { copy_out(buf, data) };
    }
    len_result(r.map(|d| d.len()))
}

unsafe extern "C" fn recvfrom(
    ud: Ud,
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in; the rest as for `recv`.
    let n = unsafe { recv(ud, fd, buf, len, flags) };
    if n >= 0 {
        // SAFETY: packetdrill passes the userdata init filled in.
        let a = unsafe { actor(ud) };
        if let Ok(Some(peer)) = a.call(move |h| Outcome::Done(Ok(h.peer(fd)))) {
            // SAFETY: packetdrill passes null or an address buffer with its length.
            unsafe { write_addr(addr, addrlen, peer) };
        }
    }
    n
}

unsafe extern "C" fn recvmsg(ud: Ud, fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if msg.is_null() {
        return len_result(Err(Errno(libc::EFAULT)));
    }
    // SAFETY: `msg` is a valid, writable msghdr (checked non-null).
    let m = unsafe { &mut *msg };
    // SAFETY: its iovecs are valid, as `recvmsg` requires.
    let len = unsafe { room(m.msg_iov, c_int::try_from(m.msg_iovlen).unwrap_or(0)) };
    let r = receive(a, fd, len, flags);
    if let Ok(data) = &r {
        // SAFETY: as above, writable; `data` fits their total room.
        unsafe { scatter(m.msg_iov, c_int::try_from(m.msg_iovlen).unwrap_or(0), data) };
        m.msg_controllen = 0;
        m.msg_flags = 0;
        if !m.msg_name.is_null()
            && let Ok(Some(peer)) = a.call(move |h| Outcome::Done(Ok(h.peer(fd))))
        {
            // SAFETY: `msg_name` holds `msg_namelen` bytes.
            unsafe { write_addr(m.msg_name.cast(), &raw mut m.msg_namelen, peer) };
        }
    }
    len_result(r.map(|d| d.len()))
}

unsafe extern "C" fn write(ud: Ud, fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in, and its buffer; `send` with no flags.
    unsafe { send(ud, fd, buf, count, 0) }
}

unsafe extern "C" fn writev(ud: Ud, fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    // SAFETY: packetdrill passes `iovcnt` valid entries.
    let r = unsafe { gather(iov, iovcnt) }.and_then(|data| transmit(a, fd, data, 0));
    len_result(r)
}

unsafe extern "C" fn send(ud: Ud, fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if buf.is_null() && len > 0 {
        return len_result(Err(Errno(libc::EFAULT)));
    }
    let data = if len == 0 {
        Vec::new()
    } else {
        // SAFETY: `buf` is valid for `len` bytes (non-null, checked).
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
    };
    len_result(transmit(a, fd, data, flags))
}

unsafe extern "C" fn sendto(
    ud: Ud,
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    _addr: *const sockaddr,
    _addrlen: socklen_t,
) -> ssize_t {
    // SAFETY: as `send`; a connected TCP socket ignores the address, as Linux does.
    unsafe { send(ud, fd, buf, len, flags) }
}

unsafe extern "C" fn sendmsg(ud: Ud, fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if msg.is_null() {
        return len_result(Err(Errno(libc::EFAULT)));
    }
    // SAFETY: `msg` is a valid msghdr (checked non-null).
    let m = unsafe { &*msg };
    if m.msg_controllen != 0 {
        return len_result(Err(Errno(libc::EOPNOTSUPP)));
    }
    // SAFETY: its iovecs are valid, as `sendmsg` requires.
    let r = unsafe { gather(m.msg_iov, c_int::try_from(m.msg_iovlen).unwrap_or(0)) }
        .and_then(|data| transmit(a, fd, data, flags));
    len_result(r)
}

unsafe extern "C" fn fcntl(ud: Ud, fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    int_result(a.call(move |h| h.fcntl(fd, cmd, arg).into()))
}

unsafe extern "C" fn ioctl(ud: Ud, fd: c_int, request: c_ulong, argp: *mut c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    let reads_arg = request == libc::FIONBIO;
    let writes_arg = request == libc::FIONREAD || request == libc::TIOCOUTQ;
    if (reads_arg || writes_arg) && argp.is_null() {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    let value = if reads_arg {
        // SAFETY: FIONBIO's argument points to an int (checked non-null).
        unsafe { argp.read_unaligned() }
    } else {
        0
    };
    let r = a.call(move |h| h.ioctl(fd, request, value).into());
    match r {
        Ok(v) if writes_arg => {
            // SAFETY: FIONREAD/SIOCOUTQ's argument points to a writable int (checked non-null).
            unsafe { argp.write_unaligned(v) };
            0
        }
        r => int_result(r),
    }
}

unsafe extern "C" fn close(ud: Ud, fd: c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    int_result(a.call(move |h| h.close(fd).into()).map(|()| 0))
}

unsafe extern "C" fn shutdown(ud: Ud, fd: c_int, how: c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    int_result(a.call(move |h| h.shutdown(fd, how).into()).map(|()| 0))
}

unsafe extern "C" fn getsockopt(
    ud: Ud,
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if optval.is_null() || optlen.is_null() {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    let r = a.call(move |h| h.getsockopt(fd, level, name).into());
    match r {
        Ok(v) => {
            // SAFETY: `optlen` is valid (non-null, checked).
            let room = unsafe { optlen.read() } as usize;
            let n = room.min(v.len());
            // SAFETY: `optval` is writable for `room >= n` bytes.
            unsafe { copy_out(optval, &v[..n]) };
            // SAFETY: as above.
            unsafe { optlen.write(socklen_t::try_from(n).unwrap_or(0)) };
            0
        }
        Err(e) => int_result(Err(e)),
    }
}

unsafe extern "C" fn setsockopt(
    ud: Ud,
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    let value = if optval.is_null() || optlen == 0 {
        Vec::new()
    } else {
        // SAFETY: `optval` is valid for `optlen` bytes (non-null, checked).
        unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen as usize) }.to_vec()
    };
    int_result(a.call(move |h| h.setsockopt(fd, level, name, &value).into()).map(|()| 0))
}

unsafe extern "C" fn poll(ud: Ud, fds: *mut pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    let count = usize::try_from(nfds).unwrap_or(0);
    if fds.is_null() && count > 0 {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    let entries = if count == 0 {
        &mut [][..]
    } else {
        // SAFETY: `fds` holds `nfds` writable entries (non-null, checked).
        unsafe { std::slice::from_raw_parts_mut(fds, count) }
    };
    let wanted: Vec<(i32, i16)> = entries.iter().map(|p| (p.fd, p.events)).collect();
    let mut deadline = None;
    let r = a.call(move |h| {
        let d = *deadline.get_or_insert_with(|| {
            let d = u64::try_from(timeout).ok().map(|ms| h.now() + Duration::from_millis(ms));
            if let Some(d) = d {
                h.wake_at(d);
            }
            d
        });
        h.poll(&wanted, d)
    });
    match r {
        Ok(revents) => {
            for (p, r) in entries.iter_mut().zip(&revents) {
                p.revents = *r;
            }
            int_result(Ok(i32::try_from(revents.iter().filter(|&&r| r != 0).count()).unwrap_or(i32::MAX)))
        }
        Err(e) => int_result(Err(e)),
    }
}

unsafe extern "C" fn netdev_send(ud: Ud, buf: *const c_void, count: size_t) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if buf.is_null() {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    // SAFETY: `buf` holds `count` bytes of packet (non-null, checked).
    let packet = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) }.to_vec();
    int_result(a.step(move |h, _| h.inject(&packet)).map(|()| 0))
}

unsafe extern "C" fn netdev_receive(
    ud: Ud,
    buf: *mut c_void,
    count: *mut size_t,
    time_usecs: *mut i64,
) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if buf.is_null() || count.is_null() || time_usecs.is_null() {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    match a.step(|h, parked| (h.next_packet(&mut |h| parked.retry(h)), h.profile.horizon)) {
        Ok((Some(sent), _)) => {
            // SAFETY: `count` is valid (non-null, checked).
            let room = unsafe { count.read() };
            let n = room.min(sent.packet.len());
            // SAFETY: `buf` is writable for `room >= n` bytes.
            unsafe { copy_out(buf, &sent.packet[..n]) };
            // SAFETY: `count` and `time_usecs` are valid (non-null, checked).
            unsafe { count.write(n) };
            // SAFETY: as above.
            unsafe { time_usecs.write(sent.time_usecs) };
            0
        }
        Ok((None, horizon)) => {
            eprintln!(
                "packetdrill-shim: the stack sent nothing in the next {} s of virtual time \
                 (no timer due that sends; the script waits for a packet that will not come)",
                horizon.as_secs()
            );
            // An empty packet: packetdrill fails the script with a parse error, where waiting
            // would hang it.
            // SAFETY: `count` is valid (non-null, checked).
            unsafe { count.write(0) };
            0
        }
        Err(e) => int_result(Err(e)),
    }
}

unsafe extern "C" fn usleep(ud: Ud, usec: libc::useconds_t) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    let r = a.step(move |h, parked| {
        let target = h.now() + Duration::from_micros(u64::from(usec));
        h.advance_to(target, &mut |h| parked.retry(h));
    });
    int_result(r.map(|()| 0))
}

unsafe extern "C" fn gettimeofday(ud: Ud, tv: *mut timeval, _tz: *mut c_void) -> c_int {
    // SAFETY: packetdrill passes the userdata init filled in.
    let a = unsafe { actor(ud) };
    if tv.is_null() {
        return int_result(Err(Errno(libc::EFAULT)));
    }
    match a.step(|h, parked| {
        h.tick(&mut |h| parked.retry(h));
        h.now_usecs()
    }) {
        Ok(us) => {
            let t = timeval { tv_sec: us.div_euclid(1_000_000), tv_usec: us.rem_euclid(1_000_000) };
            // SAFETY: `tv` is writable (non-null, checked).
            unsafe { tv.write(t) };
            0
        }
        Err(e) => int_result(Err(e)),
    }
}

/// `epoll` is not offered: scripts that use it fail with `ENOSYS` at their first epoll call.
unsafe extern "C" fn epoll_create(_ud: Ud, _size: c_int) -> c_int {
    int_result(Err(Errno(libc::ENOSYS)))
}

unsafe extern "C" fn epoll_ctl(
    _ud: Ud,
    _epfd: c_int,
    _op: c_int,
    _fd: c_int,
    _e: *mut libc::epoll_event,
) -> c_int {
    int_result(Err(Errno(libc::ENOSYS)))
}

unsafe extern "C" fn epoll_wait(
    _ud: Ud,
    _epfd: c_int,
    _e: *mut libc::epoll_event,
    _max: c_int,
    _t: c_int,
) -> c_int {
    int_result(Err(Errno(libc::ENOSYS)))
}

/// Pipes and `splice` move bytes between kernel objects the library does not have.
unsafe extern "C" fn pipe(_ud: Ud, _fds: *mut c_int) -> c_int {
    int_result(Err(Errno(libc::ENOSYS)))
}

unsafe extern "C" fn splice(
    _ud: Ud,
    _fd_in: c_int,
    _off_in: *mut libc::loff_t,
    _fd_out: c_int,
    _off_out: *mut libc::loff_t,
    _len: size_t,
    _flags: u32,
) -> ssize_t {
    len_result(Err(Errno(libc::ENOSYS)))
}
