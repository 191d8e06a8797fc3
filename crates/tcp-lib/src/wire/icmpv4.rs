//! ICMP for IPv4 (RFC 792): echo request and reply, destination unreachable (with the next-hop MTU
//! of "fragmentation needed and DF set" for path MTU discovery, RFC 1191 §4) and time exceeded.
//!
//! Layout: type (1), code (1), checksum (2, over the whole message, RFC 792), four bytes whose
//! meaning depends on the type (echo: identifier and sequence number; destination unreachable:
//! unused (2) and next-hop MTU (2); time exceeded: unused), then the data. Error messages quote the
//! original datagram's IP header and at least its first 8 payload bytes (RFC 792; RFC 1812 §4.3.2.3
//! allows more), which [`Repr`] parses as an [`ipv4::Repr`] plus the quoted
//! bytes, so the stack can find the TCP connection (ports and sequence number) it concerns.

use super::ipv4::{self, HEADER_LEN as IPV4_HEADER_LEN};
use super::{ChecksumPolicy, Error, Result, be16, checksum, put16};

mod field {
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: usize = 2;
    pub(super) const ECHO_IDENT: usize = 4;
    pub(super) const ECHO_SEQNO: usize = 6;
    pub(super) const UNUSED: usize = 4;
    pub(super) const MTU: usize = 6;
}

/// The length of the ICMP header (type, code, checksum and the four type-specific bytes).
pub const HEADER_LEN: usize = 8;

/// An ICMP message type (the ones this stack knows are named).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Message {
    /// Echo reply, 0.
    EchoReply,
    /// Destination unreachable, 3.
    DstUnreachable,
    /// Redirect, 5.
    Redirect,
    /// Echo request, 8.
    EchoRequest,
    /// Time exceeded, 11.
    TimeExceeded,
    /// Parameter problem, 12.
    ParamProblem,
    /// Any other type (never one of the named ones).
    Unknown(u8),
}

impl From<u8> for Message {
    fn from(v: u8) -> Self {
        match v {
            0 => Self::EchoReply,
            3 => Self::DstUnreachable,
            5 => Self::Redirect,
            8 => Self::EchoRequest,
            11 => Self::TimeExceeded,
            12 => Self::ParamProblem,
            other => Self::Unknown(other),
        }
    }
}

impl From<Message> for u8 {
    fn from(m: Message) -> Self {
        match m {
            Message::EchoReply => 0,
            Message::DstUnreachable => 3,
            Message::Redirect => 5,
            Message::EchoRequest => 8,
            Message::TimeExceeded => 11,
            Message::ParamProblem => 12,
            Message::Unknown(v) => v,
        }
    }
}

/// The codes of destination unreachable (RFC 792, RFC 1122 §3.2.2.1, RFC 1812 §5.2.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DstUnreachable {
    /// 0: net unreachable.
    NetUnreachable,
    /// 1: host unreachable.
    HostUnreachable,
    /// 2: protocol unreachable.
    ProtoUnreachable,
    /// 3: port unreachable.
    PortUnreachable,
    /// 4: fragmentation needed and DF set (carries the next-hop MTU, RFC 1191).
    FragRequired,
    /// 5: source route failed.
    SrcRouteFailed,
    /// 6: destination network unknown.
    DstNetUnknown,
    /// 7: destination host unknown.
    DstHostUnknown,
    /// 8: source host isolated.
    SrcHostIsolated,
    /// 9: network administratively prohibited.
    NetProhibited,
    /// 10: host administratively prohibited.
    HostProhibited,
    /// 11: network unreachable for type of service.
    NetUnreachToS,
    /// 12: host unreachable for type of service.
    HostUnreachToS,
    /// 13: communication administratively prohibited.
    CommProhibited,
    /// 14: host precedence violation.
    HostPrecedViol,
    /// 15: precedence cutoff in effect.
    PrecedCutoff,
}

impl DstUnreachable {
    const ALL: [Self; 16] = [
        Self::NetUnreachable,
        Self::HostUnreachable,
        Self::ProtoUnreachable,
        Self::PortUnreachable,
        Self::FragRequired,
        Self::SrcRouteFailed,
        Self::DstNetUnknown,
        Self::DstHostUnknown,
        Self::SrcHostIsolated,
        Self::NetProhibited,
        Self::HostProhibited,
        Self::NetUnreachToS,
        Self::HostUnreachToS,
        Self::CommProhibited,
        Self::HostPrecedViol,
        Self::PrecedCutoff,
    ];

    /// The reason with code `code`, if it is one of the 16 defined.
    #[must_use]
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// The code.
    #[must_use]
    pub fn code(self) -> u8 {
        // ALL is in code order and has 16 entries.
        Self::ALL.iter().zip(0u8..).find(|&(&r, _)| r == self).map_or(0, |(_, c)| c)
    }
}

/// The codes of time exceeded (RFC 792).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeExceeded {
    /// 0: TTL exceeded in transit.
    TtlExpired,
    /// 1: fragment reassembly time exceeded.
    FragExpired,
}

impl TimeExceeded {
    /// The reason with code `code`, if it is defined.
    #[must_use]
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::TtlExpired),
            1 => Some(Self::FragExpired),
            _ => None,
        }
    }

    /// The code.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Self::TtlExpired => 0,
            Self::FragExpired => 1,
        }
    }
}

/// A zero-copy view of an ICMPv4 message (the whole IPv4 payload).
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
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
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

    /// The next-hop MTU of "fragmentation needed" (RFC 1191; zero from routers that predate it).
    pub fn next_hop_mtu(&self) -> u16 {
        be16(self.buffer.as_ref(), field::MTU)
    }

    /// The data after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum over the whole message verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, m: Message) {
        self.buffer.as_mut()[field::TYPE] = m.into();
    }

    /// Sets the code.
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
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

    /// Sets the next-hop MTU (and zeroes the unused bytes before it).
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::UNUSED, 0);
        put16(self.buffer.as_mut(), field::MTU, v);
    }

    /// The data after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and writes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::finish(checksum::data(self.buffer.as_ref()));
        self.set_checksum(sum);
    }
}

/// The meaning of the ICMP messages this stack handles.
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
        /// The next-hop MTU for [`DstUnreachable::FragRequired`] (zero from pre-RFC 1191 routers:
        /// the stack then guesses a plateau); must be zero for other reasons, for which it is
        /// neither emitted nor parsed.
        next_hop_mtu: u16,
        /// The quoted header of the datagram that could not be delivered.
        header: ipv4::Repr,
        /// The quoted bytes after that header (its first 8 payload bytes or more).
        data: &'a [u8],
    },
    /// Time exceeded.
    TimeExceeded {
        /// The code.
        reason: TimeExceeded,
        /// The quoted header of the datagram that was dropped.
        header: ipv4::Repr,
        /// The quoted bytes after that header.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Parses a message.
    ///
    /// # Errors
    /// [`Error::Truncated`] for a buffer shorter than the header or a quoted header;
    /// [`Error::Checksum`] if the policy verifies and the checksum is wrong;
    /// [`Error::Unrecognized`] for other types or undefined codes (and for a quoted header that is
    /// not IPv4); [`Error::Malformed`] for a quoted header with impossible lengths.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>, policy: ChecksumPolicy) -> Result<Self> {
        packet.check_len()?;
        if policy.verify() && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let data: &'a [u8] = &packet.buffer.as_ref()[HEADER_LEN..];
        let code = packet.msg_code();
        match (packet.msg_type(), code) {
            (Message::EchoRequest, 0) => {
                Ok(Self::EchoRequest { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data })
            }
            (Message::EchoReply, 0) => {
                Ok(Self::EchoReply { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data })
            }
            (Message::DstUnreachable, code) => {
                let reason = DstUnreachable::from_code(code).ok_or(Error::Unrecognized)?;
                let next_hop_mtu =
                    if reason == DstUnreachable::FragRequired { packet.next_hop_mtu() } else { 0 };
                let (header, data) = ipv4::Repr::parse_quoted(data)?;
                Ok(Self::DstUnreachable { reason, next_hop_mtu, header, data })
            }
            (Message::TimeExceeded, code) => {
                let reason = TimeExceeded::from_code(code).ok_or(Error::Unrecognized)?;
                let (header, data) = ipv4::Repr::parse_quoted(data)?;
                Ok(Self::TimeExceeded { reason, header, data })
            }
            _ => Err(Error::Unrecognized),
        }
    }

    /// The message length.
    #[must_use]
    pub const fn buffer_len(&self) -> usize {
        match self {
            Self::EchoRequest { data, .. } | Self::EchoReply { data, .. } => HEADER_LEN + data.len(),
            Self::DstUnreachable { data, .. } | Self::TimeExceeded { data, .. } => {
                HEADER_LEN + IPV4_HEADER_LEN + data.len()
            }
        }
    }

    /// Writes the message and fills the checksum.
    ///
    /// # Panics
    /// If the buffer is not exactly [`buffer_len`](Self::buffer_len) bytes long, or a quoted
    /// header's `payload_len` exceeds 65515 (caller bugs, not input).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        assert_eq!(packet.buffer.as_ref().len(), self.buffer_len(), "ICMP buffer length");
        let (message, code) = match *self {
            Self::EchoRequest { ident, seq_no, data } | Self::EchoReply { ident, seq_no, data } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                packet.data_mut().copy_from_slice(data);
                let m = if matches!(self, Self::EchoRequest { .. }) {
                    Message::EchoRequest
                } else {
                    Message::EchoReply
                };
                (m, 0)
            }
            Self::DstUnreachable { reason, next_hop_mtu, header, data } => {
                let mtu = if reason == DstUnreachable::FragRequired { next_hop_mtu } else { 0 };
                packet.set_next_hop_mtu(mtu);
                emit_quoted(packet.data_mut(), &header, data);
                (Message::DstUnreachable, reason.code())
            }
            Self::TimeExceeded { reason, header, data } => {
                packet.set_next_hop_mtu(0);
                emit_quoted(packet.data_mut(), &header, data);
                (Message::TimeExceeded, reason.code())
            }
        };
        packet.set_msg_type(message);
        packet.set_msg_code(code);
        packet.fill_checksum();
    }
}

fn emit_quoted(out: &mut [u8], header: &ipv4::Repr, data: &[u8]) {
    let (head, rest) = out.split_at_mut(IPV4_HEADER_LEN);
    let mut quoted = ipv4::Packet::new_unchecked(head);
    header.emit(&mut quoted);
    rest.copy_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::{Address, Protocol};
    use proptest::prelude::*;

    // An echo request in the shape of `ping -p 5a` (ICMP part): id 0x1234, seq 1, 8 bytes of 0x5a
    // (Linux sends 56), assembled by hand; the checksum 0x7c61 was computed independently (Python)
    // over exactly these bytes.
    const ECHO: [u8; 16] =
        [0x08, 0x00, 0x7c, 0x61, 0x12, 0x34, 0x00, 0x01, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a];

    fn quoted_header() -> ipv4::Repr {
        ipv4::Repr {
            src_addr: Address::new(10, 0, 0, 1),
            dst_addr: Address::new(192, 0, 2, 7),
            protocol: Protocol::Tcp,
            payload_len: 1460,
            ttl: 63,
            dscp: 0,
            ecn: 0,
            ident: 0x1c46,
            dont_frag: true,
        }
    }

    #[test]
    fn parse_echo() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Message::EchoRequest);
        assert!(p.verify_checksum());
        let repr = Repr::parse(&p, ChecksumPolicy::Verify).unwrap();
        assert_eq!(repr, Repr::EchoRequest { ident: 0x1234, seq_no: 1, data: &[0x5a; 8] });
        let mut out = [0u8; 16];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, ECHO);
    }

    #[test]
    fn frag_needed() {
        // A router's "fragmentation needed, next-hop MTU 1400" quoting a 1480-byte TCP segment:
        // type 3 code 4, unused 0, MTU 0x0578, the quoted header and 8 bytes of TCP (ports 443 ->
        // 40000, sequence number 0x01020304).
        let mut bytes = vec![3u8, 4, 0, 0, 0, 0, 0x05, 0x78];
        bytes.extend_from_slice(&[
            0x45, 0x00, 0x05, 0xc8, 0x1c, 0x46, 0x40, 0x00, 0x3f, 0x06, 0x00, 0x00, 10, 0, 0, 1, 192, 0, 2, 7,
        ]);
        bytes.extend_from_slice(&[0x01, 0xbb, 0x9c, 0x40, 0x01, 0x02, 0x03, 0x04]);
        Packet::new_unchecked(&mut bytes[..]).fill_checksum();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.next_hop_mtu(), 1400);
        let repr = Repr::parse(&p, ChecksumPolicy::Verify).unwrap();
        let Repr::DstUnreachable { reason, next_hop_mtu, header, data } = repr else { panic!("{repr:?}") };
        assert_eq!(reason, DstUnreachable::FragRequired);
        assert_eq!(next_hop_mtu, 1400);
        assert_eq!(header, quoted_header());
        assert_eq!(data, &[0x01, 0xbb, 0x9c, 0x40, 0x01, 0x02, 0x03, 0x04]);
        // Emitting writes a valid quoted checksum where the router left zero; otherwise the same.
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert!(ipv4::Packet::new_unchecked(&out[8..28]).verify_checksum());
        assert_eq!(Repr::parse(&Packet::new_checked(&out[..]).unwrap(), ChecksumPolicy::Verify), Ok(repr));
    }

    #[test]
    fn field_errors() {
        fn parse(b: &[u8]) -> Result<Repr<'_>> {
            Repr::parse(&Packet::new_unchecked(b), ChecksumPolicy::Verify)
        }
        for len in 0..8 {
            assert_eq!(parse(&ECHO[..len]), Err(Error::Truncated));
        }
        let mut bad = ECHO;
        bad[9] ^= 1;
        assert_eq!(parse(&bad), Err(Error::Checksum));
        assert!(Repr::parse(&Packet::new_unchecked(&bad[..]), ChecksumPolicy::Trust).is_ok());
        let refill = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = ECHO.to_vec();
            f(&mut b);
            Packet::new_unchecked(&mut b[..]).fill_checksum();
            parse(Vec::leak(b))
        };
        assert_eq!(refill(&|b| b[1] = 1), Err(Error::Unrecognized), "echo code 1");
        assert_eq!(refill(&|b| b[0] = 13), Err(Error::Unrecognized), "timestamp");
        assert_eq!(refill(&|b| b[0] = 5), Err(Error::Unrecognized), "redirect");
        // Destination unreachable with too little quoted, a bad code, a non-IPv4 quote, IHL 4.
        let unreach = |code: u8, quote: &[u8]| {
            let mut b = vec![3, code, 0, 0, 0, 0, 0, 0];
            b.extend_from_slice(quote);
            Packet::new_unchecked(&mut b[..]).fill_checksum();
            parse(Vec::leak(b))
        };
        let mut quote = [0u8; 28];
        quote[0] = 0x45;
        quote[3] = 28;
        assert!(unreach(3, &quote).is_ok());
        assert_eq!(unreach(3, &quote[..19]), Err(Error::Truncated));
        assert_eq!(unreach(16, &quote), Err(Error::Unrecognized));
        quote[0] = 0x65;
        assert_eq!(unreach(3, &quote), Err(Error::Unrecognized));
        quote[0] = 0x44;
        assert_eq!(unreach(3, &quote), Err(Error::Malformed));
        quote[0] = 0x46;
        quote[3] = 20;
        assert_eq!(unreach(3, &quote), Err(Error::Malformed), "total length below IHL");
        quote[3] = 28;
        assert!(matches!(unreach(3, &quote), Ok(Repr::DstUnreachable { data, .. }) if data.len() == 4));
        quote[0] = 0x4f;
        quote[3] = 60;
        assert_eq!(unreach(3, &quote), Err(Error::Truncated), "options past the quote");
    }

    #[test]
    fn codes() {
        for code in 0..=255u8 {
            match DstUnreachable::from_code(code) {
                Some(r) => assert_eq!(r.code(), code),
                None => assert!(code >= 16),
            }
            if let Some(r) = TimeExceeded::from_code(code) {
                assert_eq!(r.code(), code);
            }
            assert_eq!(u8::from(Message::from(code)), code);
        }
    }

    /// The owned parts of a representation; [`build`] borrows the data.
    fn arb_parts() -> impl Strategy<Value = (u8, u16, u16, u8, ipv4::Repr, Vec<u8>)> {
        (
            0u8..4,
            any::<u16>(),
            any::<u16>(),
            0u8..16,
            crate::wire::ipv4::tests::arb_repr(),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
    }

    fn build(parts: &(u8, u16, u16, u8, ipv4::Repr, Vec<u8>)) -> Repr<'_> {
        let (kind, a, b, code, header, data) = parts;
        let (a, b, header, data) = (*a, *b, *header, &data[..]);
        match kind {
            0 => Repr::EchoRequest { ident: a, seq_no: b, data },
            1 => Repr::EchoReply { ident: a, seq_no: b, data },
            2 => {
                let reason = DstUnreachable::from_code(*code).unwrap();
                let next_hop_mtu = if reason == DstUnreachable::FragRequired { a } else { 0 };
                Repr::DstUnreachable { reason, next_hop_mtu, header, data }
            }
            _ => {
                let reason = if code & 1 == 1 { TimeExceeded::FragExpired } else { TimeExceeded::TtlExpired };
                Repr::TimeExceeded { reason, header, data }
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(parts in arb_parts()) {
            let repr = build(&parts);
            let mut bytes = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            let p = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, ChecksumPolicy::Verify).unwrap(), repr);
        }

        #[test]
        fn no_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let p = Packet::new_unchecked(&bytes[..]);
            if p.check_len().is_ok() {
                let _ = (p.msg_type(), p.msg_code(), p.echo_ident(), p.echo_seq_no(), p.next_hop_mtu(), p.data());
            }
            let _ = Repr::parse(&p, ChecksumPolicy::Trust);
        }
    }
}
