//! IPv6 fragment reassembly (RFC 8200 §4.5), sans-IO: the caller passes `now` with every call and
//! no clock is read. The table and its bounds are shared with the IPv4 reassembler
//! ([`ipv4::reassembly`](crate::wire::ipv4::reassembly), whose documentation describes the
//! runs, the budgets and the oldest-first eviction); what is IPv6's is here.
//!
//! Fragments belong to one packet when they agree on source, destination and identification (RFC
//! 8200 §4.5). The reassembled packet gets the first fragment's fixed header; its extension headers
//! (the unfragmentable part, and those that start the fragmentable part) are walked and not kept:
//! [`Datagram::header`] is an [`ipv6::Repr`](super::Repr) whose `next_header` is the upper-layer
//! protocol, and [`Datagram::payload`] is the upper-layer payload.
//!
//! # Policy
//!
//! * **Timeout:** 60 seconds after the first fragment arrived ([`TIMEOUT`], RFC 8200 §4.5), whatever
//!   arrives later. No ICMPv6 "fragment reassembly time exceeded" is generated here.
//! * **Overlaps** discard the whole packet (RFC 5722, RFC 8200 §4.5), except an exact duplicate of a
//!   fragment received (same range, same bytes), which is dropped as RFC 8200 §4.5 allows. To tell
//!   exact duplicates, each fragment received stays a run of its own (IPv4 merges adjacent runs),
//!   so [`Config::max_runs`] bounds the fragments one packet may have: the default 64 covers a
//!   65535-byte packet in 1280-byte fragments (52) with room to spare.
//! * **Atomic fragments** (offset zero, M clear; RFC 6946) are whole packets: they are returned at
//!   once, never entered in the table, so they cannot mix with fragments of the same
//!   identification.
//! * **Lengths:** a fragment with M set must carry a non-empty multiple of 8 bytes
//!   ([`FragmentError::BadLength`]); a fragment that would make the reassembled payload length
//!   (unfragmentable part, offset and data) exceed 65535 is [`FragmentError::TooLong`] (RFC 8200
//!   §4.5).
//! * **Header chain:** the first fragment must hold the whole extension-header chain (RFC 7112 §5),
//!   else [`FragmentError::IncompleteChain`]; a second Fragment header in it is
//!   [`FragmentError::Packet`] ([`Error::Malformed`]).

use std::time::{Duration, Instant};

use super::ext::{self, FragmentHeader};
use super::{Address, MAX_PAYLOAD_LEN, Packet, Repr};
use crate::wire::Error;
pub use crate::wire::fragments::{Config, FragmentError};
use crate::wire::fragments::{Duplicates, Piece, Table, table_accessors};

/// How long a packet may take to reassemble (RFC 8200 §4.5: 60 seconds).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A reassembled packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The first fragment's header, `next_header` the upper-layer protocol and `payload_len` the
    /// upper-layer length.
    pub header: Repr,
    /// The upper-layer payload.
    pub payload: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    src: Address,
    dst: Address,
    ident: u32,
}

/// The first fragment's header and where the upper layer starts in the fragmentable part.
type First = (Repr, usize);

/// Reassembles IPv6 packets from fragments in any order, within fixed bounds (see the module
/// documentation for the policy).
#[derive(Debug)]
pub struct FragmentReassembler {
    table: Table<Key, First>,
}

impl Default for FragmentReassembler {
    /// The default bounds of [`Config`] with the [`TIMEOUT`] of RFC 8200.
    fn default() -> Self {
        Self::new(Config { timeout: TIMEOUT, ..Config::default() })
    }
}

impl FragmentReassembler {
    /// An empty reassembler with these bounds.
    #[must_use]
    pub const fn new(config: Config) -> Self {
        Self { table: Table::new(config, Duplicates::Exact) }
    }

    table_accessors!("packets");

    /// Adds a received packet at time `now`. Returns the reassembled packet when this fragment
    /// completes one, `None` while it is incomplete (or the fragment was an exact duplicate), and
    /// the packet itself as a [`Datagram`] when it is not a fragment (atomic fragments included).
    ///
    /// The packet is validated as by [`Repr::parse`], so any bytes may be passed. Packets due at
    /// `now` are expired first.
    ///
    /// # Errors
    /// See [`FragmentError`]; every error leaves the reassembler within its bounds.
    pub fn add<T: AsRef<[u8]>>(
        &mut self,
        packet: &Packet<T>,
        now: Instant,
    ) -> Result<Option<Datagram>, FragmentError> {
        self.table.expire(now);
        let walk = match Repr::parse_with_payload(packet) {
            Ok((header, payload)) => return Ok(Some(Datagram { header, payload: payload.to_vec() })),
            Err(Error::Fragmented) => packet.walk()?,
            Err(e) => return Err(e.into()),
        };
        // Only a fragment is Fragmented.
        let FragmentHeader { offset, more_frags: more, ident, .. } = walk.fragment.ok_or(Error::Malformed)?;
        let offset = usize::from(offset);
        let payload = packet.payload();
        let data = &payload[walk.offset..];
        if more && (data.is_empty() || !data.len().is_multiple_of(8)) {
            return Err(FragmentError::BadLength);
        }
        // The reassembled payload: the unfragmentable part (before the Fragment header) and the
        // fragmentable part.
        if walk.offset - FragmentHeader::LEN + offset + data.len() > MAX_PAYLOAD_LEN {
            return Err(FragmentError::TooLong);
        }
        let header = if offset == 0 {
            let on = ext::walk_on(walk, payload).map_err(|e| match e {
                Error::Truncated => FragmentError::IncompleteChain,
                e => FragmentError::Packet(e),
            })?;
            Some((Repr::from_fields(packet, on.protocol, 0), on.offset - walk.offset))
        } else {
            None
        };
        let key = Key { src: packet.src_addr(), dst: packet.dst_addr(), ident };
        let piece = Piece { offset, data, more, header };
        let Some(((mut header, skip), mut payload)) = self.table.add(key, now, piece)? else {
            return Ok(None);
        };
        // The first fragment's data holds the chain and the packet ends at or after it.
        payload.drain(..skip.min(payload.len()));
        header.payload_len = payload.len();
        Ok(Some(Datagram { header, payload }))
    }
}

#[cfg(test)]
mod tests;
