//! Software segmentation of TCP super-segments and software completion of partial checksums:
//! what a device does with a frame whose [`Offload`] asks for TCP segmentation offload (TSO) or
//! checksum offload, for a device (or a test link) that cannot.
//!
//! [`segment`] cuts a super-segment (an Ethernet frame with an IPv4 or IPv6 header, no IPv6
//! extension headers, and a TCP header whose checksum field holds the pseudo-header sum over the
//! whole TCP length) into wire segments as Linux's `tcp_gso_segment` does: each one the headers
//! (the first `header_len` bytes) and `mss` payload bytes (the last one what is left), with its
//! own sequence number, IP length (and, over IPv4, identification, incremented from the
//! super-segment's, and header checksum), and a full TCP checksum; FIN and PSH only on the last,
//! CWR only on the first. A frame with only a partial checksum comes out once with the checksum
//! finished (virtio-net's `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the one's-complement sum of the bytes from
//! the checksum start to the frame's end, the field included, complemented); a frame with no
//! offload comes out unchanged.
//!
//! ```
//! use netchannel::pool::{GsoKind, Offload};
//! use tcp_lib::wire::gso;
//!
//! // A frame that is not a super-segment passes through whole.
//! let mut seen = Vec::new();
//! let n = gso::segment(&[0u8; 60], Offload::NONE, |f| seen.push(f.len()))?;
//! assert_eq!((n, seen), (1, vec![60]));
//! // A super-segment without a partial checksum is refused, as a device refuses it.
//! let bad = Offload::NONE.with_segmentation(GsoKind::Tcp4, 1448, 54);
//! assert!(gso::segment(&[0u8; 60], bad, |_| {}).is_err());
//! # Ok::<(), tcp_lib::wire::Error>(())
//! ```

use netchannel::pool::{GsoKind, Offload};

use super::{Error, Result, checksum};

const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;
/// The TCP checksum field's offset in the TCP header.
const TCP_CHECKSUM: usize = 16;

/// Hands `out` the wire frames of `frame` as its `offload` asks (see the
/// [module documentation](self)), one at a time in a buffer reused between them; returns how
/// many.
///
/// # Errors
/// [`Error::Malformed`] for metadata that does not fit the frame (a super-segment without a
/// partial checksum, an MSS of 0, a checksum start or header length past the frame, a TCP
/// checksum not at offset 16, an EtherType or IP version other than the kind says, a TCP
/// header whose length is not what `header_len` implies); [`Error::Truncated`] for headers
/// shorter than their length fields. Nothing is handed to `out` then.
pub fn segment(frame: &[u8], offload: Offload, mut out: impl FnMut(&[u8])) -> Result<usize> {
    let partial = offload.partial_checksum();
    let Some((kind, mss, header_len)) = offload.segmentation() else {
        match partial {
            None => out(frame),
            Some((start, offset)) => {
                let mut buf = frame.to_vec();
                finish_checksum(&mut buf, usize::from(start), usize::from(offset))?;
                out(&buf);
            }
        }
        return Ok(1);
    };
    let Some((l4, offset)) = partial.map(|(s, o)| (usize::from(s), usize::from(o))) else {
        return Err(Error::Malformed);
    };
    let (mss, header_len) = (usize::from(mss), usize::from(header_len));
    check_headers(frame, kind, l4, offset, header_len)?;
    if mss == 0 {
        return Err(Error::Malformed);
    }
    let payload = &frame[header_len..];
    let total_tcp = frame.len() - l4;
    // The field holds the pseudo-header sum over the whole TCP length: take that length out,
    // each cut's is put in below (as tcp_gso_segment's `delta`).
    let old_len = u16::try_from(total_tcp).map_err(|_| Error::Malformed)?;
    let base = checksum::add(read_u16(frame, l4 + TCP_CHECKSUM), !old_len);
    let seq = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
    let flags = frame[l4 + 13];
    let ident = read_u16(frame, ETH_LEN + 4);
    let count = payload.len().div_ceil(mss).max(1);
    let mut buf = Vec::with_capacity(header_len + mss.min(payload.len()));
    for i in 0..count {
        let chunk = payload.get(i * mss..).map_or(&[][..], |rest| &rest[..rest.len().min(mss)]);
        buf.clear();
        buf.extend_from_slice(&frame[..header_len]);
        buf.extend_from_slice(chunk);
        let last = i + 1 == count;
        let ip_payload = buf.len() - ETH_LEN;
        match kind {
            GsoKind::Tcp4 => {
                let ihl = usize::from(buf[ETH_LEN] & 0x0f) * 4;
                write_u16(&mut buf, ETH_LEN + 2, u16::try_from(ip_payload).map_err(|_| Error::Malformed)?);
                let n = u16::try_from(i).unwrap_or(u16::MAX);
                write_u16(&mut buf, ETH_LEN + 4, ident.wrapping_add(n));
                write_u16(&mut buf, ETH_LEN + 10, 0);
                let sum = checksum::finish(checksum::data(&buf[ETH_LEN..ETH_LEN + ihl]));
                write_u16(&mut buf, ETH_LEN + 10, sum);
            }
            GsoKind::Tcp6 => {
                let len = u16::try_from(ip_payload - 40).map_err(|_| Error::Malformed)?;
                write_u16(&mut buf, ETH_LEN + 4, len);
            }
        }
        let n = u32::try_from(i * mss).unwrap_or(u32::MAX);
        buf[l4 + 4..l4 + 8].copy_from_slice(&seq.wrapping_add(n).to_be_bytes());
        let mut f = flags;
        if !last {
            f &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            f &= !TCP_CWR;
        }
        buf[l4 + 13] = f;
        let tcp_len = u16::try_from(buf.len() - l4).map_err(|_| Error::Malformed)?;
        write_u16(&mut buf, l4 + TCP_CHECKSUM, checksum::add(base, tcp_len));
        finish_checksum(&mut buf, l4, TCP_CHECKSUM)?;
        out(&buf);
    }
    Ok(count)
}

/// Checks that a super-segment's headers are what its metadata says: the EtherType and IP
/// version of `kind`, the TCP header from `l4` (checksum at `offset` 16) ending at `header_len`,
/// all inside `frame`.
fn check_headers(frame: &[u8], kind: GsoKind, l4: usize, offset: usize, header_len: usize) -> Result<()> {
    if offset != TCP_CHECKSUM || header_len > frame.len() || l4 + 20 > header_len {
        return Err(Error::Malformed);
    }
    if frame.len() < ETH_LEN + 20 {
        return Err(Error::Truncated);
    }
    let ethertype = read_u16(frame, 12);
    let (want_type, version, ip_min) = match kind {
        GsoKind::Tcp4 => (ETHERTYPE_IPV4, 4, 20),
        GsoKind::Tcp6 => (ETHERTYPE_IPV6, 6, 40),
    };
    if ethertype != want_type || frame[ETH_LEN] >> 4 != version {
        return Err(Error::Malformed);
    }
    let ip_len = match kind {
        GsoKind::Tcp4 => usize::from(frame[ETH_LEN] & 0x0f) * 4,
        GsoKind::Tcp6 => 40,
    };
    if ip_len < ip_min || ETH_LEN + ip_len != l4 {
        return Err(Error::Malformed);
    }
    if l4 + usize::from(frame[l4 + 12] >> 4) * 4 != header_len {
        return Err(Error::Malformed);
    }
    Ok(())
}

/// Finishes a partial checksum in place: the field at `start + offset` holds the pseudo-header
/// sum; the sum of the bytes from `start` on (the field included), complemented, replaces it.
fn finish_checksum(buf: &mut [u8], start: usize, offset: usize) -> Result<()> {
    let at = start.checked_add(offset).ok_or(Error::Malformed)?;
    if at + 2 > buf.len() {
        return Err(Error::Truncated);
    }
    let sum = checksum::finish(checksum::data(&buf[start..]));
    write_u16(buf, at, sum);
    Ok(())
}

/// The big-endian 16-bit word at `at` (callers checked the length).
fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

fn write_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
#[path = "gso_tests.rs"]
mod tests;
