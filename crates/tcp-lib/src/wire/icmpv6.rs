//! ICMPv6 (RFC 4443): echo request and reply, destination unreachable, packet too big (the MTU for
//! path MTU discovery, RFC 8201), time exceeded and parameter problem; and the Neighbor Discovery
//! messages of RFC 4861, whose bodies [`ndp`] parses.
//!
//! Layout: type (1), code (1), checksum (2, over the IPv6 pseudo-header of RFC 8200 §8.1 and the
//! whole message, RFC 4443 §2.3), then the body; for the messages here, four bytes whose meaning
//! depends on the type (echo: identifier and sequence number; packet too big: the MTU; parameter
//! problem: the pointer; others: unused) and the data. Error messages quote as much of the invoking
//! packet as fits (RFC 4443 §2.4 (c)), which [`Repr`] parses as an [`ipv6::Repr`] (its extension
//! headers walked) plus the quoted upper-layer bytes, so the stack can find the connection it
//! concerns.

use std::net::Ipv6Addr;

use super::ipv6::{self, HEADER_LEN as IPV6_HEADER_LEN};
use super::ndp;
use super::{ChecksumPolicy, Error, Result, be16, be32, checksum, put16, put32};

mod field {
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQNO: usize = 6;
    pub(super) const PARAM: usize = 4;
}

/// The length of the header this module reads: type, code, checksum and four type-specific bytes.
pub const HEADER_LEN: usize = 8;
const PROTOCOL: u8 = 58;

/// ICMPv6 type of destination unreachable.
pub const DST_UNREACHABLE: u8 = 1;
/// ICMPv6 type of packet too big.
pub const PKT_TOO_BIG: u8 = 2;
/// ICMPv6 type of time exceeded.
pub const TIME_EXCEEDED: u8 = 3;
/// ICMPv6 type of parameter problem.
pub const PARAM_PROBLEM: u8 = 4;
/// ICMPv6 type of echo request.
pub const ECHO_REQUEST: u8 = 128;
/// ICMPv6 type of echo reply.
pub const ECHO_REPLY: u8 = 129;

/// Defines a code enum with its `from_code` and `code`, the codes counting up from zero.
macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The reason with code `code`, if it is defined.
            #[must_use]
            pub fn from_code(code: u8) -> Option<Self> {
                Self::ALL.get(usize::from(code)).copied()
            }

            /// The code.
            #[must_use]
            pub fn code(self) -> u8 {
                Self::ALL.iter().zip(0u8..).find(|&(&r, _)| r == self).map_or(0, |(_, c)| c)
            }
        }
    };
}

codes! {
    /// The codes of destination unreachable (RFC 4443 §3.1).
    DstUnreachable {
        /// 0: no route to destination.
        NoRoute,
        /// 1: communication administratively prohibited.
        AdminProhibited,
        /// 2: beyond the scope of the source address.
        BeyondScope,
        /// 3: address unreachable.
        AddrUnreachable,
        /// 4: port unreachable.
        PortUnreachable,
        /// 5: source address failed ingress/egress policy.
        FailedPolicy,
        /// 6: reject route to destination.
        RejectRoute,
    }
}

codes! {
    /// The codes of time exceeded (RFC 4443 §3.3).
    TimeExceeded {
        /// 0: hop limit exceeded in transit.
        HopLimitExceeded,
        /// 1: fragment reassembly time exceeded.
        FragReassemblyExceeded,
    }
}

codes! {
    /// The codes of parameter problem (RFC 4443 §3.4, RFC 7112 §5).
    ParamProblem {
        /// 0: erroneous header field.
        ErroneousHeader,
        /// 1: unrecognized Next Header type.
        UnrecognizedNextHeader,
        /// 2: unrecognized IPv6 option.
        UnrecognizedOption,
        /// 3: the first fragment has an incomplete header chain.
        IncompleteChain,
    }
}

/// A zero-copy view of an ICMPv6 message (the whole upper-layer payload).
///
/// **No-panic contract:** after [`check_len`](Self::check_len) has succeeded, no accessor panics,
/// whatever the bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and [`check_len`](Self::check_len)s it.
    ///
    /// # Errors
    /// As [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 8-byte header.
    ///
    /// # Errors
    /// [`Error::Truncated`] if it does not.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN { Err(Error::Truncated) } else { Ok(()) }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// The code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The echo identifier (echo request and reply).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// The echo sequence number (echo request and reply).
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// The four type-specific bytes as a number: the MTU of packet too big, the pointer of
    /// parameter problem.
    pub fn param(&self) -> u32 {
        be32(self.buffer.as_ref(), field::PARAM)
    }

    /// The data after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    fn sum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u16 {
        let b = self.buffer.as_ref();
        let length = u32::try_from(b.len()).unwrap_or(u32::MAX);
        checksum::combine(&[checksum::pseudo_header_v6(src, dst, PROTOCOL, length), checksum::data(b)])
    }

    /// Whether the checksum over the pseudo-header for `src -> dst` and the message verifies.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        self.sum(src, dst) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    /// Sets the code.
    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_IDENT, v);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::ECHO_SEQNO, v);
    }

    /// Sets the four type-specific bytes (MTU, pointer, or zero).
    pub fn set_param(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::PARAM, v);
    }

    /// The data after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and writes the checksum for `src -> dst`.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let sum = checksum::finish(self.sum(src, dst));
        self.set_checksum(sum);
    }
}

/// The meaning of the ICMPv6 messages this stack handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr<'a> {
    /// An echo request.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data, echoed back by the reply.
        data: &'a [u8],
    },
    /// An echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data.
        data: &'a [u8],
    },
    /// Destination unreachable.
    DstUnreachable {
        /// The code.
        reason: DstUnreachable,
        /// The quoted header of the packet that could not be delivered.
        header: ipv6::Repr,
        /// The quoted upper-layer bytes (to be emitted, at most `header.payload_len` of them).
        data: &'a [u8],
    },
    /// Packet too big (RFC 4443 §3.2): the next hop's MTU, for path MTU discovery (RFC 8201).
    PktTooBig {
        /// The MTU of the next-hop link.
        mtu: u32,
        /// The quoted header of the packet that was too big.
        header: ipv6::Repr,
        /// The quoted upper-layer bytes (to be emitted, at most `header.payload_len` of them).
        data: &'a [u8],
    },
    /// Time exceeded.
    TimeExceeded {
        /// The code.
        reason: TimeExceeded,
        /// The quoted header of the packet that was dropped.
        header: ipv6::Repr,
        /// The quoted upper-layer bytes (to be emitted, at most `header.payload_len` of them).
        data: &'a [u8],
    },
    /// Parameter problem.
    ParamProblem {
        /// The code.
        reason: ParamProblem,
        /// The offset in the invoking packet of the octet where the problem was found.
        pointer: u32,
        /// The quoted header of the packet that was dropped.
        header: ipv6::Repr,
        /// The quoted upper-layer bytes (to be emitted, at most `header.payload_len` of them).
        data: &'a [u8],
    },
    /// A Neighbor Discovery message (RFC 4861).
    Ndp(ndp::Repr),
}

impl<'a> Repr<'a> {
    /// Parses a message received from `src` to `dst` (the pseudo-header's addresses).
    ///
    /// # Errors
    /// [`Error::Truncated`] for a buffer shorter than the header or a quoted header;
    /// [`Error::Checksum`] if the policy verifies and the checksum is wrong;
    /// [`Error::Unrecognized`] for other types and undefined codes; the errors of
    /// [`ndp::Repr::parse`] for Neighbor Discovery; the errors of the extension-header walk for a
    /// quoted packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        policy: ChecksumPolicy,
    ) -> Result<Self> {
        packet.check_len()?;
        if policy.verify() && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let bytes: &'a [u8] = packet.buffer.as_ref();
        let data = &bytes[HEADER_LEN..];
        let code = packet.msg_code();
        let undefined = Error::Unrecognized;
        Ok(match (packet.msg_type(), code) {
            (ECHO_REQUEST, 0) => {
                Self::EchoRequest { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data }
            }
            (ECHO_REPLY, 0) => {
                Self::EchoReply { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data }
            }
            (DST_UNREACHABLE, code) => {
                let reason = DstUnreachable::from_code(code).ok_or(undefined)?;
                let (header, data) = ipv6::Repr::parse_quoted(data)?;
                Self::DstUnreachable { reason, header, data }
            }
            (PKT_TOO_BIG, 0) => {
                let (header, data) = ipv6::Repr::parse_quoted(data)?;
                Self::PktTooBig { mtu: packet.param(), header, data }
            }
            (TIME_EXCEEDED, code) => {
                let reason = TimeExceeded::from_code(code).ok_or(undefined)?;
                let (header, data) = ipv6::Repr::parse_quoted(data)?;
                Self::TimeExceeded { reason, header, data }
            }
            (PARAM_PROBLEM, code) => {
                let reason = ParamProblem::from_code(code).ok_or(undefined)?;
                let (header, data) = ipv6::Repr::parse_quoted(data)?;
                Self::ParamProblem { reason, pointer: packet.param(), header, data }
            }
            (msg_type @ ndp::ROUTER_SOLICIT..=ndp::REDIRECT, code) => {
                Self::Ndp(ndp::Repr::parse(msg_type, code, &bytes[4..])?)
            }
            _ => return Err(undefined),
        })
    }

    /// The message length.
    #[must_use]
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::EchoRequest { data, .. } | Self::EchoReply { data, .. } => HEADER_LEN + data.len(),
            Self::DstUnreachable { data, .. }
            | Self::PktTooBig { data, .. }
            | Self::TimeExceeded { data, .. }
            | Self::ParamProblem { data, .. } => HEADER_LEN + IPV6_HEADER_LEN + data.len(),
            Self::Ndp(ndp) => 4 + ndp.buffer_len(),
        }
    }

    /// Writes the message and fills the checksum for `src -> dst`.
    ///
    /// # Panics
    /// If the buffer is not exactly [`buffer_len`](Self::buffer_len) bytes long, or a quoted
    /// header's `payload_len` exceeds 65535 (caller bugs, not input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, src: Ipv6Addr, dst: Ipv6Addr) {
        assert_eq!(packet.buffer.as_ref().len(), self.buffer_len(), "ICMPv6 buffer length");
        let (msg_type, code) = match *self {
            Self::EchoRequest { ident, seq_no, data } | Self::EchoReply { ident, seq_no, data } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                packet.data_mut().copy_from_slice(data);
                (if matches!(self, Self::EchoRequest { .. }) { ECHO_REQUEST } else { ECHO_REPLY }, 0)
            }
            Self::DstUnreachable { reason, header, data } => {
                emit_error(packet, 0, &header, data);
                (DST_UNREACHABLE, reason.code())
            }
            Self::PktTooBig { mtu, header, data } => {
                emit_error(packet, mtu, &header, data);
                (PKT_TOO_BIG, 0)
            }
            Self::TimeExceeded { reason, header, data } => {
                emit_error(packet, 0, &header, data);
                (TIME_EXCEEDED, reason.code())
            }
            Self::ParamProblem { reason, pointer, header, data } => {
                emit_error(packet, pointer, &header, data);
                (PARAM_PROBLEM, reason.code())
            }
            Self::Ndp(ndp) => {
                ndp.emit(&mut packet.buffer.as_mut()[4..]);
                (ndp.msg_type(), 0)
            }
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        packet.fill_checksum(src, dst);
    }
}

fn emit_error<T: AsRef<[u8]> + AsMut<[u8]>>(
    packet: &mut Packet<T>,
    param: u32,
    header: &ipv6::Repr,
    data: &[u8],
) {
    packet.set_param(param);
    let (head, rest) = packet.data_mut().split_at_mut(IPV6_HEADER_LEN);
    header.emit(&mut ipv6::Packet::new_unchecked(head));
    rest.copy_from_slice(data);
}

#[cfg(test)]
pub(crate) mod tests;
