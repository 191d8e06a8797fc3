//! Software segmentation of the stack's own super-segments (generic segmentation offload,
//! [`Config::gso_max_size`](super::Config::gso_max_size)): a connection decides once for up to
//! 64 KiB of data, and [`cut`] hands out the wire segments, as Linux's `tcp_gso_segment` cuts a
//! GSO packet before a device without TSO: each segment a copy of the header with its own
//! sequence number and `mss` payload bytes (the last what is left), PSH and FIN only on the last,
//! CWR only on the first. The IP identification and the checksums are the emitter's, per frame;
//! [`Piece::repeats`] tells it which frames have the headers of the frame before but for the
//! sequence number and identification, so that it can copy them and write those two (and the
//! checksums) instead of emitting every field again, as `skb_segment` copies the GSO packet's
//! headers.

use crate::wire::{SeqNumber, TcpControl, TcpRepr};

/// What [`cut`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cut {
    /// Frames emitted.
    pub(super) sent: usize,
    /// Segments not emitted (the emitter had no buffer for them).
    pub(super) dropped: usize,
}

/// One segment of a super-segment, as [`cut`] hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece<'a> {
    /// Its sequence number.
    pub(super) seq_number: SeqNumber,
    /// Its payload.
    pub(super) payload: &'a [u8],
    /// Its IP identification.
    pub(super) ident: u16,
    /// Whether it is the first.
    pub(super) first: bool,
    /// Whether it is the last.
    last: bool,
    /// Whether its headers are those of the segment before it (handed out just before) but for
    /// the sequence number and the IP identification: the same payload length and flags (neither
    /// the first segment, which alone may carry CWR, nor the last, which alone carries PSH and
    /// FIN and may be shorter; nor the second when the first carried CWR). Its
    /// [`segment`](Self::segment) need not be built then.
    pub(super) repeats: bool,
}

impl<'a> Piece<'a> {
    /// The whole segment of this piece of `whole`.
    pub(super) fn segment(&self, whole: &TcpRepr<'a>) -> TcpRepr<'a> {
        TcpRepr {
            seq_number: self.seq_number,
            payload: self.payload,
            push: whole.push && self.last,
            control: if self.last { whole.control } else { TcpControl::None },
            cwr: whole.cwr && self.first,
            ..*whole
        }
    }
}

/// Cuts `whole` (a data segment of more than `mss` payload bytes) into segments of `mss` bytes
/// and hands each to `emit` with its [`Piece`] (the IP identification `first_ident`, then one
/// more per frame emitted). `emit` returns `None` when it could not send one; the rest are then
/// not offered and count as dropped.
pub(super) fn cut<'a>(
    whole: &TcpRepr<'a>,
    mss: usize,
    first_ident: u16,
    mut emit: impl FnMut(Piece<'a>) -> Option<()>,
) -> Cut {
    debug_assert!(mss > 0, "a super-segment's segment size is not 0");
    let count = whole.payload.len().div_ceil(mss.max(1));
    let chunks = whole.payload.chunks(mss.max(1)).map(|chunk| (chunk, ()));
    cut_items(whole, chunks, count, first_ident, |piece, ()| emit(piece))
}

/// [`cut`] for a super-segment whose payload lies in `count` separate items (whole pool buffers
/// sent by reference, one segment each): each item's payload is a segment's, handed to `emit`
/// with the item. Every payload but the last must be of the same length (the segment size),
/// as [`cut`]'s are: [`Piece::repeats`] relies on it.
pub(super) fn cut_items<'a, T>(
    whole: &TcpRepr<'a>,
    items: impl Iterator<Item = (&'a [u8], T)>,
    count: usize,
    first_ident: u16,
    mut emit: impl FnMut(Piece<'a>, T) -> Option<()>,
) -> Cut {
    let mut ident = first_ident;
    let mut seq_number = whole.seq_number;
    for (i, (payload, item)) in items.enumerate() {
        let (first, last) = (i == 0, i + 1 == count);
        let repeats = !first && !last && (i > 1 || !whole.cwr);
        if emit(Piece { seq_number, payload, ident, first, last, repeats }, item).is_none() {
            return Cut { sent: i, dropped: count - i };
        }
        seq_number += payload.len();
        ident = ident.wrapping_add(1);
    }
    Cut { sent: count, dropped: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::SeqNumber;
    use crate::wire::tcp::Timestamp;

    fn whole(payload: &[u8]) -> TcpRepr<'_> {
        TcpRepr {
            src_port: 80,
            dst_port: 4000,
            seq_number: SeqNumber::new(u32::MAX - 1000),
            ack_number: Some(SeqNumber::new(77)),
            window_len: 512,
            control: TcpControl::Fin,
            push: true,
            cwr: true,
            timestamp: Some(Timestamp { tsval: 5, tsecr: 6 }),
            payload,
            ..TcpRepr::default()
        }
    }

    #[test]
    fn segments_carry_their_bytes_and_the_flags_go_first_or_last() {
        let data: Vec<u8> = (0..3500u32).map(|i| i.to_le_bytes()[0]).collect();
        let w = whole(&data);
        let mut seen = Vec::new();
        let c = cut(&w, 1448, 65535, |p| {
            let s = p.segment(&w);
            seen.push((s.seq_number, s.payload.to_vec(), s.push, s.control, s.cwr, p.ident, p.first));
            assert_eq!((s.ack_number, s.window_len, s.timestamp), (w.ack_number, w.window_len, w.timestamp));
            Some(())
        });
        assert_eq!(c, Cut { sent: 3, dropped: 0 });
        let lens: Vec<usize> = seen.iter().map(|s| s.1.len()).collect();
        assert_eq!(lens, [1448, 1448, 604]);
        let joined: Vec<u8> = seen.iter().flat_map(|s| s.1.clone()).collect();
        assert_eq!(joined, data, "the bytes in order, none lost or doubled");
        assert_eq!(seen[1].0, w.seq_number + 1448, "sequence numbers wrap with the space");
        assert_eq!(seen[2].0, w.seq_number + 2896);
        let flags: Vec<_> = seen.iter().map(|s| (s.2, s.3, s.4)).collect();
        assert_eq!(
            flags,
            [
                (false, TcpControl::None, true),
                (false, TcpControl::None, false),
                (true, TcpControl::Fin, false)
            ]
        );
        let idents: Vec<_> = seen.iter().map(|s| (s.5, s.6)).collect();
        assert_eq!(idents, [(65535, true), (0, false), (1, false)], "identifications wrap");
    }

    #[test]
    fn a_refused_segment_drops_the_rest() {
        let data = [7u8; 5000];
        let mut n = 0;
        let c = cut(&whole(&data), 1000, 1, |_| {
            n += 1;
            (n < 3).then_some(())
        });
        assert_eq!(c, Cut { sent: 2, dropped: 3 });
        assert_eq!(n, 3, "nothing is offered after the refusal");
    }

    #[test]
    fn an_exact_multiple_ends_on_a_full_segment() {
        let data = [1u8; 2896];
        let mut lens = Vec::new();
        let c = cut(&whole(&data), 1448, 0, |p| {
            lens.push(p.payload.len());
            Some(())
        });
        assert_eq!((c.sent, lens), (2, vec![1448, 1448]));
    }

    /// A segment said to repeat the one before must differ from it only in the sequence number
    /// (the emitter copies everything else), and every one but the last that could is said to.
    #[test]
    fn repeating_segments_differ_from_the_one_before_only_in_sequence_number() {
        for (len, cwr, control, push) in [
            (10_000, true, TcpControl::Fin, true),
            (10_000, false, TcpControl::None, false),
            (2896, false, TcpControl::None, true),
            (4300, true, TcpControl::None, false),
            (1449, false, TcpControl::Fin, false),
        ] {
            let data = vec![3u8; len];
            let w = TcpRepr { cwr, control, push, ..whole(&data) };
            // The segment before, its payload's length apart from the rest.
            let mut before: Option<(TcpRepr<'static>, usize)> = None;
            let mut repeated = 0;
            cut(&w, 1448, 0, |p| {
                let s = p.segment(&w);
                let this = TcpRepr { payload: &[], ..s };
                let same = before.is_some_and(|(b, len)| {
                    len == s.payload.len() && TcpRepr { seq_number: s.seq_number, ..b } == this
                });
                assert_eq!(
                    p.repeats, same,
                    "segment at {}: said to repeat {}, does {same}",
                    s.seq_number, p.repeats
                );
                repeated += usize::from(p.repeats);
                before = Some((this, s.payload.len()));
                Some(())
            });
            let count = len.div_ceil(1448);
            let expected = count.saturating_sub(2 + usize::from(cwr && count > 2));
            assert_eq!(repeated, expected, "{len} bytes, cwr {cwr}");
        }
    }
}
