//! The receive path's memory of the frame before: when a poll's burst brings a connection's
//! segments back to back, each after the first is taken without parsing its headers or looking
//! up its connection.
//!
//! A frame whose segment the connection took on the header-prediction path
//! ([`Config::header_prediction`](crate::tcp::Config::header_prediction)), with at least
//! [`MIN_REMEMBERED`] bytes of payload, leaves its headers behind ([`Memory`]). The next frame of the same burst is compared with them as words, the
//! fields that differ from one segment of a flow to the next (IP length and identification, the
//! sequence number, the checksums) masked out; when nothing else differs, it is the same flow's
//! next segment and would parse to the same segment but for its sequence number and payload,
//! and would find the same connection. It goes to that connection through the same entry as any
//! segment (which checks the prediction again), with its checksums verified as the general path
//! verifies them. Anything else (another flow, other flags or options, a segment the connection
//! did not predict) takes the general path, and the memory is gone.
//!
//! This is the one-entry cache of the last connection that Jacobson's header prediction kept
//! (Jacobson, "4BSD Header Prediction", ACM CCR 20(2), 1990), which McKenney and Dove measured
//! against other demultiplexing schemes ("Efficient Demultiplexing of Incoming TCP Packets",
//! SIGCOMM 1992): a bulk transfer's segments arrive in trains, so the last connection is the
//! next segment's. Here it also skips the parsing, since a train's headers repeat byte for byte.
//!
//! The memory is used inside one [`Stack::poll`](super::Stack::poll)'s receive loop only, which
//! clears it first: nothing but the frames of that loop runs between two of its
//! frames (the in-place `deliver` cannot reach the stack), so the connection it names is still in
//! its slot, in the same state. Remembering costs a copy of the headers and the parsed segment
//! per predicted segment; a frame that finds nothing remembered pays one test.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Deliver, ETH_LEN, IP_LEN, IP6_LEN, MAX_HEADERS, Stack};
use crate::wire::{Ipv4Packet, SeqNumber, TcpPacket, TcpRepr};

/// The shortest payload whose segment is remembered: a bulk train's segments are full-sized, and
/// remembering costs a copy of the headers and the segment (~80 instructions) that a request or a
/// response of a few hundred bytes, followed by another flow's frame, never repays.
pub(super) const MIN_REMEMBERED: usize = 512;

/// [`MAX_HEADERS`] in 8-byte words.
const WORDS: usize = MAX_HEADERS.div_ceil(8);

/// Which bits of a frame's first [`WORDS`] words (little-endian) the next frame of the flow must
/// repeat, for IPv4 (`[0]`) and IPv6 (`[1]`): all but the fields that change from one segment
/// to the next, the IP length and identification, the sequence number and the checksums.
static MASKS: [[u64; WORDS]; 2] = [
    // IPv4: total length and identification, header checksum; TCP at 34.
    mask(&[(16, 20), (24, 26), (38, 42), (50, 52)]),
    // IPv6: payload length; TCP at 54.
    mask(&[(18, 20), (58, 62), (70, 72)]),
];

/// All bits set but those of the byte ranges `varying`.
const fn mask(varying: &[(usize, usize)]) -> [u64; WORDS] {
    let mut bytes = [0xff_u8; WORDS * 8];
    let mut r = 0;
    while r < varying.len() {
        let mut at = varying[r].0;
        while at < varying[r].1 {
            bytes[at] = 0;
            at += 1;
        }
        r += 1;
    }
    let mut words = [0; WORDS];
    let mut i = 0;
    while i < WORDS {
        let mut b = 0;
        while b < 8 {
            words[i] |= (bytes[i * 8 + b] as u64) << (8 * b);
            b += 1;
        }
        i += 1;
    }
    words
}

/// [`WORDS`] header words (the held headers, or their mask), 16-byte aligned: the comparison's
/// vector operations then take them straight from memory (an unaligned operand needs a load of
/// its own: 12 instructions a segment more, measured).
#[derive(Clone, Copy, Debug)]
#[repr(align(16))]
struct Words([u64; WORDS]);

/// What the memory holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Held {
    /// Nothing.
    #[default]
    Nothing,
    /// The segment of the frame being received, which its connection predicted
    /// ([`Memory::keep_segment`]); its headers are not copied yet.
    Segment,
    /// The segment and its frame's headers ([`Memory::keep_headers`]): the next frame is
    /// compared with them.
    Headers,
}

/// The headers of the frame just received, and the segment they parsed to (a field of the stack,
/// used only inside [`Stack::poll`](super::Stack::poll)'s receive loop).
#[derive(Clone, Debug)]
pub(super) struct Memory {
    held: Held,
    /// The headers' length: where the payload starts.
    payload_at: usize,
    /// The frame's headers as little-endian words (0 past them), to compare the next frame's
    /// first [`compared`](Self::compared) words with.
    words: Words,
    /// The bits of [`words`](Self::words) the next frame must repeat: the family's mask
    /// ([`MASKS`]) less the payload bytes of the last word compared, and 0 after it.
    mask: Words,
    /// How many words are compared: the headers' length in words, rounded up.
    compared: usize,
    /// IPv6 (else IPv4).
    v6: bool,
    /// The slot of the connection that predicted the segment.
    index: u32,
    /// The segment, without its payload. (Its IP header did not say Congestion Experienced: a
    /// connection predicts no segment that did. Nor does the next frame's, which repeats the
    /// ECN bits.)
    segment: TcpRepr<'static>,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            held: Held::Nothing,
            payload_at: 0,
            words: Words([0; WORDS]),
            mask: Words([0; WORDS]),
            compared: 0,
            v6: false,
            index: 0,
            segment: TcpRepr::default(),
        }
    }
}

impl Memory {
    /// Forgets what it holds.
    #[inline]
    pub(super) fn forget(&mut self) {
        self.held = Held::Nothing;
    }

    /// Whether a frame's headers are held, for the next frame to be compared with.
    #[inline]
    pub(super) fn holds_headers(&self) -> bool {
        self.held == Held::Headers
    }

    /// Keeps `seg` (without its payload), which the connection in slot `index` has just
    /// predicted, for [`keep_headers`](Self::keep_headers).
    pub(super) fn keep_segment(&mut self, index: u32, seg: &TcpRepr<'_>) {
        self.held = Held::Segment;
        self.index = index;
        let s = &mut self.segment;
        s.src_port = seg.src_port;
        s.dst_port = seg.dst_port;
        s.control = seg.control;
        s.push = seg.push;
        s.seq_number = seg.seq_number;
        s.ack_number = seg.ack_number;
        s.window_len = seg.window_len;
        s.ece = seg.ece;
        s.cwr = seg.cwr;
        s.urgent_pointer = seg.urgent_pointer;
        s.max_seg_size = seg.max_seg_size;
        s.window_scale = seg.window_scale;
        s.sack_permitted = seg.sack_permitted;
        s.sack_blocks = seg.sack_blocks;
        s.timestamp = seg.timestamp;
    }

    /// After `frame` went through the general path: keeps its headers when its segment was kept
    /// and they have the layout the comparison knows (untagged Ethernet, then IPv4 without
    /// options and not a fragment, or IPv6 without extension headers, then TCP); otherwise holds
    /// nothing.
    pub(super) fn keep_headers(&mut self, frame: &[u8]) {
        if self.held != Held::Segment {
            return;
        }
        self.held = Held::Nothing;
        let Some(ip) = frame.get(ETH_LEN..ETH_LEN + IP_LEN) else { return };
        let v6 = match frame[12..14] {
            // Version 4 with a 20-byte header, not a fragment (neither MF nor an offset), TCP.
            [0x08, 0x00] if ip[0] == 0x45 && ip[6] & 0xbf == 0 && ip[7] == 0 && ip[9] == 6 => false,
            // Version 6, TCP as the next header.
            [0x86, 0xdd] if ip[0] >> 4 == 6 && ip[6] == 6 => true,
            _ => return,
        };
        let tcp_at = ETH_LEN + if v6 { IP6_LEN } else { IP_LEN };
        let Some(&offset) = frame.get(tcp_at + 12) else { return };
        let tcp_len = usize::from(offset >> 4) * 4;
        let payload_at = tcp_at + tcp_len;
        if tcp_len < 20 || payload_at > MAX_HEADERS || payload_at >= frame.len() {
            return;
        }
        self.payload_at = payload_at;
        self.v6 = v6;
        // The comparison's words, once per general-path frame rather than once per frame
        // compared.
        let mut headers = [0u8; WORDS * 8];
        headers[..payload_at].copy_from_slice(&frame[..payload_at]);
        let family = &MASKS[usize::from(v6)];
        for (i, ((word, mask), bytes)) in
            self.words.0.iter_mut().zip(&mut self.mask.0).zip(headers.chunks_exact(8)).enumerate()
        {
            *word = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
            let headers_in_word = payload_at.saturating_sub(i * 8).min(8);
            let headers_only = if headers_in_word == 8 { u64::MAX } else { (1 << (8 * headers_in_word)) - 1 };
            *mask = family[i] & headers_only;
        }
        self.compared = payload_at.div_ceil(8);
        self.held = Held::Headers;
    }

    /// Where the TCP header starts.
    const fn tcp_at(&self) -> usize {
        ETH_LEN + if self.v6 { IP6_LEN } else { IP_LEN }
    }

    /// The sequence number and payload of `frame` when it repeats the held headers but for the
    /// fields that vary, with a payload of at least one byte that the IP length puts inside the
    /// frame. The checksums are not looked at. Inlined into its one caller: out of line, its
    /// result went through memory (25 instructions a segment more, measured).
    #[inline(always)]
    fn continued<'f>(&self, frame: &'f [u8]) -> Option<(SeqNumber, &'f [u8])> {
        let n = self.payload_at;
        // A frame of at least `WORDS` words is compared over all of them, a loop of known length
        // that the compiler turns into vector operations (the mask is 0 past `compared`); a
        // shorter frame over the `compared` words (measured: 14.5 instructions a segment fewer).
        let differ = match frame.first_chunk::<{ WORDS * 8 }>() {
            Some(head) => self.differ(head),
            None => self.differ(frame.get(..self.compared * 8)?),
        };
        if differ != 0 {
            return None;
        }
        let field = |at: usize| usize::from(u16::from_be_bytes([frame[at], frame[at + 1]]));
        let end = if self.v6 { ETH_LEN + IP6_LEN + field(ETH_LEN + 4) } else { ETH_LEN + field(ETH_LEN + 2) };
        let payload = frame.get(n..end).filter(|p| !p.is_empty())?;
        let at = self.tcp_at() + 4;
        let seq = u32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?);
        Some((SeqNumber::new(seq), payload))
    }

    /// The bits of `head`'s words (as many as it has, at most [`WORDS`]) that differ from the
    /// held headers where the next frame must repeat them: 0 when it does.
    #[inline(always)]
    fn differ(&self, head: &[u8]) -> u64 {
        let mut differ = 0;
        for ((bytes, word), mask) in head.chunks_exact(8).zip(&self.words.0).zip(&self.mask.0) {
            differ |= (u64::from_le_bytes(bytes.try_into().unwrap_or_default()) ^ word) & mask;
        }
        differ
    }

    /// Whether the IPv4 header checksum of `frame` (one [`continued`](Self::continued) took,
    /// its IP packet ending at `end`) verifies; true for IPv6, which has none.
    fn ip_checksum_verifies(&self, frame: &[u8], end: usize) -> bool {
        self.v6 || Ipv4Packet::new_unchecked(&frame[ETH_LEN..end]).verify_checksum()
    }

    /// Whether the TCP checksum of `frame` (as above) verifies, over the pseudo-header of its
    /// addresses (the held ones: the comparison covers them).
    fn tcp_checksum_verifies(&self, frame: &[u8], end: usize) -> bool {
        let segment = TcpPacket::new_unchecked(&frame[self.tcp_at()..end]);
        if self.v6 {
            let addr = |at: usize| Ipv6Addr::from(octets::<16>(frame, at));
            segment.verify_checksum_v6(addr(22), addr(38))
        } else {
            let addr = |at: usize| Ipv4Addr::from(octets::<4>(frame, at));
            segment.verify_checksum(addr(26), addr(30))
        }
    }
}

/// The `N` bytes of `frame` at `at` (zeros where it is shorter: never, for the headers the
/// comparison covered).
fn octets<const N: usize>(frame: &[u8], at: usize) -> [u8; N] {
    frame.get(at..at + N).and_then(|b| b.try_into().ok()).unwrap_or([0; N])
}

impl Stack {
    /// Takes `frame` as the next segment of the flow whose headers the memory holds, when it is
    /// one; returns whether it did (if not, nothing was counted or changed). The memory is
    /// forgotten unless the connection predicted this segment too.
    pub(super) fn receive_continued<D: Deliver + ?Sized>(&mut self, frame: &[u8], deliver: &mut D) -> bool {
        let m = &self.rx_memory;
        let Some((seq, payload)) = m.continued(frame) else {
            self.rx_memory.forget();
            return false;
        };
        let end = m.payload_at + payload.len();
        // Verified as the general path verifies them: the IPv4 header's as configured, the
        // segment's unless the device vouched for it (`rx_checksum` counts that, once, as there).
        let ip_ok = !self.config.checksum.verify() || m.ip_checksum_verifies(frame, end);
        if !ip_ok || (self.rx_checksum().verify() && !self.rx_memory.tcp_checksum_verifies(frame, end)) {
            self.rx_memory.forget();
            return false;
        }
        let m = &self.rx_memory;
        // Copied whole and then patched: the struct update syntax copied it field by field (15
        // instructions a segment more in a bulk transfer, measured).
        let (index, mut seg) = (m.index, m.segment);
        (seg.seq_number, seg.payload) = (seq, payload);
        self.stats.rx_continued += 1;
        if self.continue_connection(index, &seg, deliver) {
            return true;
        }
        if !self.segment_for_connection(index, &seg, false, deliver) {
            self.rx_memory.forget();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::Timestamp;
    use crate::wire::{
        EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Repr, Ipv6Packet, Ipv6Repr, Protocol,
    };

    const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
    const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

    fn segment(seq: u32, payload: &[u8]) -> TcpRepr<'_> {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq_number: SeqNumber::new(seq),
            ack_number: Some(SeqNumber::new(7)),
            window_len: 1000,
            timestamp: Some(Timestamp { tsval: 5, tsecr: 6 }),
            payload,
            ..TcpRepr::default()
        }
    }

    /// An Ethernet frame of `seg` over IPv4 (identification `ident`) or IPv6.
    fn frame(v6: bool, ident: u16, seg: &TcpRepr<'_>) -> Vec<u8> {
        let ethertype = if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            vlan: None,
            ethertype,
        };
        let ip_len = if v6 { IP6_LEN } else { IP_LEN };
        let mut buf = vec![0; ETH_LEN + ip_len + seg.buffer_len()];
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let tcp = &mut TcpPacket::new_unchecked(&mut buf[ETH_LEN + ip_len..]);
        if v6 {
            seg.emit_v6(tcp, A6, B6);
            let ip = Ipv6Repr {
                src_addr: A6,
                dst_addr: B6,
                next_header: Protocol::Tcp,
                payload_len: seg.buffer_len(),
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            };
            ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[ETH_LEN..]));
        } else {
            seg.emit(tcp, A4, B4);
            let ip = Ipv4Repr {
                src_addr: A4,
                dst_addr: B4,
                protocol: Protocol::Tcp,
                payload_len: seg.buffer_len(),
                ttl: 64,
                dscp: 0,
                ecn: 0,
                ident,
                dont_frag: true,
            };
            ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..]));
        }
        buf
    }

    /// A memory of `frame`, whose segment is `seg`, if its layout is one the comparison knows.
    fn remember(frame: &[u8], seg: &TcpRepr<'_>) -> Option<Memory> {
        let mut m = Memory::default();
        m.keep_segment(3, seg);
        m.keep_headers(frame);
        m.holds_headers().then_some(m)
    }

    /// Both checksums of `f` (of the family `v6` says) made right again.
    fn mend(v6: bool, f: &mut [u8]) {
        let tcp_at = ETH_LEN + if v6 { IP6_LEN } else { IP_LEN };
        let mut tcp = TcpPacket::new_unchecked(&mut f[tcp_at..]);
        if v6 {
            tcp.fill_checksum_v6(A6, B6);
        } else {
            tcp.fill_checksum(A4, B4);
            Ipv4Packet::new_unchecked(&mut f[ETH_LEN..]).fill_checksum();
        }
    }

    #[test]
    fn the_next_segment_of_the_flow_is_taken_and_nothing_else() {
        let payload = [0xab; 100];
        // 60 bytes of payload: a frame longer than the fixed comparison's words (it compares
        // payload bytes too, under a zero mask); 10 bytes: a shorter one (the loop over the
        // headers' words).
        for (v6, len) in [(false, 60), (true, 60), (false, 10), (true, 10)] {
            let first = frame(v6, 1, &segment(1000, &payload));
            let l = remember(&first, &segment(1000, &[])).expect("remembered");
            let next = frame(v6, 2, &segment(1100, &payload[..len]));
            assert_eq!(next.len() >= WORDS * 8, len == 60, "v6 {v6}: the frame takes the path meant");
            assert_eq!(l.continued(&next), Some((SeqNumber::new(1100), &payload[..len])), "v6 {v6}");
            let end = next.len();
            assert!(l.ip_checksum_verifies(&next, end) && l.tcp_checksum_verifies(&next, end));
            // Every header bit but those of the fields that vary, changed with the checksums
            // mended (a frame that parses to another segment, or of another flow): refused.
            let varying: &[std::ops::Range<usize>] =
                if v6 { &[18..20, 58..62, 70..72] } else { &[16..20, 24..26, 38..42, 50..52] };
            for at in 0..l.payload_at {
                for bit in 0..8 {
                    let mut f = next.clone();
                    f[at] ^= 1 << bit;
                    mend(v6, &mut f);
                    let taken = l.continued(&f).is_some();
                    if !varying.iter().any(|r| r.contains(&at)) {
                        assert!(!taken, "v6 {v6}: byte {at} bit {bit} changed, yet the frame was taken");
                    }
                }
            }
            // Any payload byte changed: taken by the comparison.
            for at in l.payload_at..next.len() {
                let mut f = next.clone();
                f[at] ^= 0x81;
                assert!(l.continued(&f).is_some(), "v6 {v6}: payload byte {at} changed, and refused");
            }
            // A bit of a checksum or of the payload changed: taken by the comparison, refused by
            // the checksum that covers it.
            for at in [if v6 { 70 } else { 24 }, next.len() - 1] {
                let mut f = next.clone();
                f[at] ^= 4;
                assert!(l.continued(&f).is_some());
                let ok = l.ip_checksum_verifies(&f, end) && l.tcp_checksum_verifies(&f, end);
                assert!(!ok, "v6 {v6}: byte {at} changed, yet both checksums verify");
            }
            // The IP length, not the frame, ends the payload (Ethernet padding is not payload).
            let mut padded = next.clone();
            padded.extend_from_slice(&[0; 7]);
            assert_eq!(l.continued(&padded).map(|c| c.1.len()), Some(len));
            // No payload, or an IP length past the frame: refused.
            assert_eq!(l.continued(&frame(v6, 2, &segment(1100, &[]))), None);
            assert_eq!(l.continued(&next[..next.len() - 1]), None);
        }
    }

    #[test]
    fn only_frames_of_known_layout_are_remembered() {
        let payload = [1; 10];
        let seg = &segment(0, &[]);
        let good = frame(false, 1, &segment(0, &payload));
        assert!(remember(&good, seg).is_some());
        let with = |at: usize, value: u8| {
            let mut f = good.clone();
            f[at] = value;
            remember(&f, seg).is_some()
        };
        assert!(!with(14, 0x46), "IPv4 options");
        assert!(!with(20, 0x20), "more fragments");
        assert!(!with(21, 0x10), "a fragment offset");
        assert!(!with(23, 17), "UDP");
        assert!(!with(12, 0x81), "a VLAN tag");
        assert!(!with(46, 0x40), "a TCP header shorter than 20 bytes");
        assert!(remember(&good[..66], seg).is_none(), "no payload");
        assert!(remember(&good[..60], seg).is_none(), "the TCP header cut short");
        let mut v6 = frame(true, 0, &segment(0, &payload));
        assert!(remember(&v6, seg).is_some());
        v6[20] = 44;
        assert!(remember(&v6, seg).is_none(), "an IPv6 extension header");
    }
}
