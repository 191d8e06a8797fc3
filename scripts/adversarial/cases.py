#!/usr/bin/python3
"""Crafted TCP/IP edge cases against a TCP echo server on a TAP, from the kernel's side of it.

Run by tests/adversarial (the `crafted_cases` test) inside the test's network namespace, with
/usr/bin/python3 (Debian's python3-scapy):

    cases.py --iface IF --server 10.210.0.2 [--us 10.210.0.3] [--port 7] [--only NAME[,NAME...]]

(the server's subnet is taken to be a /24; --us is an address in it that nothing else has)

It speaks as a host that is not the kernel (an address and a MAC of its own, taught to the server
with an ARP request) so that the kernel never answers the server's segments with resets of its own.
Each case sends its crafted frames on the interface and records what the server sent back, then
prints one line:

    CASE <name> replies=<r1>,<r2>,...|- echo=<bytes>|- key=value...

A reply is `FLAGS/SEQ/ACK/LEN`, and `/sack=L-R;...` when it carries SACK blocks: FLAGS as scapy
writes them (S, A, R, F, P...), SEQ relative to the server's initial sequence number (its SYN is
0), ACK relative to ours (our SYN is 0), LEN the payload's length. Replies are TCP segments from
the server's address to ours; the handshake's own SYN-ACK is not among them unless the case is
about it. `echo` is the data the server sent in the case, in sequence order from the first byte it
had not sent before (printable ASCII; `-` when none). The test (tests/adversarial) asserts each
case's expected answer; this script only reports. It exits 1 when it cannot run at all (no ARP
answer from the server).
"""

import argparse
import select
import socket
import struct
import sys
import time

from scapy.all import ARP, IP, TCP, Ether, IPOption_NOP, Raw, conf

US_MAC = "02:00:00:0a:d0:03"
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"
MULTICAST_MAC = "01:00:5e:00:00:01"
# How long a case waits for an answer that should not come.
QUIET = 0.4
# How long a case waits at most for an answer that should come.
PATIENCE = 3.0


class Wire:
    """The interface: sends frames, reads the server's, answers its ARP requests for our address."""

    def __init__(self, iface, us_ip, server_ip):
        self.sock = conf.L2socket(iface=iface)
        self.us_ip = us_ip
        self.server_ip = server_ip
        self.server_mac = None
        self.arp_asked = []  # the addresses the server asked for

    def send(self, frame):
        self.sock.send(frame)

    def announce(self):
        """An ARP request from us for the server: it learns our MAC (RFC 826) and tells us its."""
        req = Ether(src=US_MAC, dst=BROADCAST_MAC) / ARP(
            op=1, hwsrc=US_MAC, psrc=self.us_ip, pdst=self.server_ip)
        for _ in range(5):
            self.send(req)
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                p = self.read(end - time.monotonic())
                if p is not None and ARP in p and p[ARP].op == 2 and p[ARP].psrc == self.server_ip:
                    self.server_mac = p[ARP].hwsrc
                    return True
        return False

    def read(self, wait):
        """One frame, or None after `wait` seconds."""
        if wait <= 0:
            return None
        ready, _, _ = select.select([self.sock], [], [], wait)
        if not ready:
            return None
        return self.sock.recv()

    def collect(self, wait, until=None, to=None):
        """The server's TCP segments to us for up to `wait` seconds; stops early once until(segments)."""
        out = []
        end = time.monotonic() + wait
        while True:
            left = end - time.monotonic()
            if left <= 0 or (until is not None and until(out)):
                return out
            p = self.read(left)
            if p is None:
                continue
            if ARP in p and p[ARP].op == 1 and p[ARP].psrc == self.server_ip:
                self.arp_asked.append(p[ARP].pdst)
                if p[ARP].pdst != self.us_ip:
                    continue
                self.send(Ether(src=US_MAC, dst=p[ARP].hwsrc) / ARP(
                    op=2, hwsrc=US_MAC, psrc=self.us_ip, hwdst=p[ARP].hwsrc, pdst=self.server_ip))
                continue
            if IP in p and TCP in p and p[IP].src == self.server_ip and p[IP].dst == (to or self.us_ip):
                out.append(p)

    def quiet(self):
        """Waits until the server has been silent for a moment (what it still sends is dropped)."""
        self.collect(0.15)


class Conn:
    """One TCP connection from us to the server, driven segment by segment."""

    def __init__(self, wire, sport, dport, isn=1000):
        self.w = wire
        self.sport = sport
        self.dport = dport
        self.isn = isn
        self.irs = 0
        self.snd_nxt = isn
        self.rcv_nxt = 0
        self.data = {}  # server byte offset (1 = its first data byte) -> byte
        self.conflict = False
        self.ts = None

    def frame(self, flags="A", seq=None, ack=None, data=b"", options=None, dst_mac=None, urgptr=0, **ip):
        seq = self.snd_nxt if seq is None else seq
        ack = self.rcv_nxt if ack is None else ack
        t = TCP(sport=self.sport, dport=self.dport, flags=flags, seq=seq % 2**32,
                ack=ack % 2**32 if "A" in flags else 0, window=65535, options=options or [], urgptr=urgptr)
        p = Ether(src=US_MAC, dst=dst_mac or self.w.server_mac) / IP(
            src=self.w.us_ip, dst=self.w.server_ip, **ip) / t
        return p / Raw(data) if data else p

    def opts(self, tsval=None):
        if self.ts is None:
            return []
        return [("Timestamp", (tsval if tsval is not None else self.ts, 0))]

    def open(self, options=(("MSS", 1460),), payload=b""):
        """The handshake; returns the SYN-ACK (None when none came)."""
        options = list(options)
        for kind, value in options:
            if kind == "Timestamp":
                self.ts = value[0]
        self.w.send(self.frame("S", seq=self.isn, options=options, data=payload))
        got = self.w.collect(PATIENCE, until=lambda s: any(p[TCP].flags == "SA" for p in s))
        synack = next((p for p in got if p[TCP].flags == "SA"), None)
        if synack is None:
            return None
        self.irs = synack[TCP].seq
        self.rcv_nxt = self.irs + 1
        self.snd_nxt = self.isn + 1
        if self.ts is not None:
            self.ts += 1
        self.w.send(self.frame("A", options=self.opts()))
        return synack

    def send(self, data, offset=0, flags="PA", **kw):
        """Data at `offset` bytes past SND.NXT (SND.NXT advances only for offset 0)."""
        kw.setdefault("options", self.opts())
        self.w.send(self.frame(flags, seq=self.snd_nxt + offset, data=data, **kw))
        if offset == 0:
            self.snd_nxt += len(data)

    def take(self, segs):
        """Records the server's data; returns the replies as strings."""
        out = []
        for p in segs:
            t = p[TCP]
            if t.dport != self.sport or t.sport != self.dport:
                continue  # another case's connection (a late retransmission)
            payload = payload_of(p)
            rel_seq = (t.seq - self.irs) % 2**32
            for i, b in enumerate(payload):
                at = rel_seq + i
                if at in self.data and self.data[at] != b:
                    self.conflict = True
                self.data.setdefault(at, b)
            while ((self.rcv_nxt - self.irs) % 2**32) in self.data:
                self.rcv_nxt += 1
            if "F" in t.flags and (self.rcv_nxt - self.irs) % 2**32 == rel_seq + len(payload):
                self.rcv_nxt += 1
            rel_ack = (t.ack - self.isn) % 2**32 if "A" in t.flags else 0
            text = f"{t.flags}/{rel_seq}/{rel_ack}/{len(payload)}"
            sack = [o for o in t.options if o[0] == "SAck"]
            if sack:
                blocks = sack[0][1]
                pairs = [(blocks[i] - self.isn) % 2**32 for i in range(len(blocks))]
                text += "/sack=" + ";".join(f"{pairs[i]}-{pairs[i + 1]}" for i in range(0, len(pairs) - 1, 2))
            out.append(text)
        return out

    def echo(self, since=1):
        """The server's bytes from offset `since` on, as long as they are contiguous."""
        out = bytearray()
        while since in self.data:
            out.append(self.data[since])
            since += 1
        return bytes(out)

    def ack(self):
        self.w.send(self.frame("A", options=self.opts()))

    def exchange(self, frames, wait=QUIET, want=None):
        """Sends frames, collects for `wait` s (or until `want` echoed bytes are in); replies."""
        for f in frames:
            self.w.send(f)
        start = len(self.echo())
        until = None
        if want is not None:
            wait = PATIENCE

            def until(segs):
                return self._peek(segs, start + want)
        return self.take(self.w.collect(wait, until=until))

    def _peek(self, segs, need):
        """Whether `segs` bring the server's data up to `need` bytes."""
        top = len(self.echo())
        for p in segs:
            t = p[TCP]
            if t.dport == self.sport:
                top = max(top, (t.seq - self.irs) % 2**32 + len(payload_of(p)) - 1)
        return top >= need

    def reset(self):
        self.w.send(self.frame("R", seq=self.snd_nxt, ack=0))
        self.w.quiet()

    def close(self):
        """Our FIN and the server's (the echo server closes after the peer's end of stream)."""
        self.w.send(self.frame("FA", options=self.opts()))
        self.snd_nxt += 1
        got = self.w.collect(PATIENCE, until=lambda s: any("F" in p[TCP].flags for p in s))
        replies = self.take(got)
        self.ack()
        return any(r.split("/")[0].count("F") for r in replies)


def payload_of(p):
    """A segment's payload by the IP length (Ethernet pads short frames)."""
    return bytes(p[TCP].payload)[:max(0, p[IP].len - p[IP].ihl * 4 - p[TCP].dataofs * 4)]


def line(name, replies, echo=b"", **extra):
    text = echo.decode("ascii", "replace") if echo else "-"
    parts = [f"CASE {name}", "replies=" + (",".join(replies) if replies else "-"), f"echo={text}"]
    parts += [f"{k}={v}" for k, v in extra.items()]
    print(" ".join(parts), flush=True)


class Cases:
    def __init__(self, wire, port):
        self.w = wire
        self.port = port
        self.next_port = 40000

    def conn(self, dport=None, isn=1000):
        self.next_port += 1
        return Conn(self.w, self.next_port, dport or self.port, isn=isn)

    def established(self, options=(("MSS", 1460),)):
        c = self.conn()
        if c.open(options) is None:
            raise RuntimeError("no SYN-ACK")
        return c

    def echo_after(self, c, name, replies, **extra):
        """Closes with a probe: 'ok' must come back right after what the case expected."""
        before = c.echo()
        probe = c.exchange([c.frame("PA", data=b"ok", options=c.opts())], want=2)
        c.snd_nxt += 2
        c.ack()
        closed = c.close()
        line(name, replies, before, after=c.echo()[len(before):].decode("ascii", "replace") or "-",
             conflict=int(c.conflict), closed=int(closed), probe=",".join(probe) or "-", **extra)

    # --- listener ----------------------------------------------------------------------------

    def handshake(self):
        c = self.conn()
        synack = c.open([("MSS", 1460), ("SAckOK", b""), ("Timestamp", (100, 0)), ("WScale", 7)])
        replies = c.take([synack]) if synack else []
        opts = [o[0] for o in synack[TCP].options] if synack else []
        self.echo_after(c, "handshake", replies, synack_opts=";".join(opts) or "-")

    def bare(self, name, flags, dport=None, data=b"", options=None, **ip):
        c = self.conn(dport=dport)
        c.rcv_nxt = 12345 if "A" in flags else 0
        c.irs = 0
        got = c.exchange([c.frame(flags, seq=c.isn, data=data, options=options, **ip)])
        line(name, got)
        if any("S" in r.split("/")[0] for r in got):
            c.snd_nxt = c.isn + 1
            c.reset()

    def syn_data(self):
        c = self.conn()
        synack = c.open(payload=b"early")
        replies = c.take([synack]) if synack else []
        self.echo_after(c, "syn_data", replies)

    def mss(self, name, value, size=300):
        c = self.conn()
        synack = c.open([] if value is None else [("MSS", value)])
        replies = c.take([synack]) if synack else []
        data = bytes((ord("a") + i % 26) for i in range(size))
        got = c.exchange([c.frame("PA", data=data)], want=size)
        c.snd_nxt += size
        for _ in range(size // 32):
            if len(c.echo()) >= size:
                break
            c.ack()  # the server's window of a few tiny segments moves on with our ACKs
            got += c.exchange([], want=size - len(c.echo()))
        lens = [int(r.split("/")[3]) for r in got]
        echoed = c.echo()
        c.ack()
        line(name, replies, b"-" if echoed == data else echoed, intact=int(echoed == data),
             max_seg=max(lens or [0]), min_seg=min([n for n in lens if n] or [0]), closed=int(c.close()))

    # --- established -------------------------------------------------------------------------

    def urg(self):
        c = self.established()
        got = c.exchange([c.frame("PAU", data=b"urgent", urgptr=3)], want=6)
        c.snd_nxt += 6
        self.echo_after(c, "urg", got)

    def overlap_inorder(self):
        c = self.established()
        got = c.exchange([c.frame("PA", data=b"hello"),
                          c.frame("PA", seq=c.snd_nxt + 3, data=b"XXXXXX")], want=9)
        c.snd_nxt += 9
        self.echo_after(c, "overlap_inorder", got)

    def overlap_ooo(self):
        c = self.established()
        first = c.exchange([c.frame("PA", seq=c.snd_nxt + 3, data=b"AAAA")])
        second = c.exchange([c.frame("PA", seq=c.snd_nxt + 3, data=b"BBBB"),
                             c.frame("PA", seq=c.snd_nxt + 5, data=b"CCCC")])
        got = c.exchange([c.frame("PA", data=b"xyz")], want=9)
        c.snd_nxt += 9
        self.echo_after(c, "overlap_ooo", first + second + got, first=",".join(first) or "-")

    def bogus_sack(self):
        c = self.established([("MSS", 1460), ("SAckOK", b"")])
        got = c.exchange([c.frame("PA", data=b"abcdefgh")], want=8)
        c.snd_nxt += 8
        una = c.irs + 1  # nothing of the echo acknowledged
        blocks = [
            (c.irs + 100_000, c.irs + 100_010),  # beyond anything sent
            (c.irs + 6, c.irs + 3),  # right edge before the left
            (c.irs - 5000, c.irs - 4000),  # below SND.UNA
        ]
        frames = []
        for left, right in blocks:
            frames += [c.frame("A", ack=una, options=[("NOP", None), ("NOP", None), ("SAck", (left % 2**32, right % 2**32))])] * 3
        more = c.exchange(frames, wait=1.5)
        self.echo_after(c, "bogus_sack", got + more)

    def paws(self):
        c = self.established([("MSS", 1460), ("Timestamp", (10_000, 0))])
        got = c.exchange([c.frame("PA", data=b"old", options=c.opts(tsval=5_000))])
        self.echo_after(c, "paws", got)

    def rst_in_window(self):
        c = self.established()
        got = c.exchange([c.frame("R", seq=c.snd_nxt + 10, ack=0)])
        self.echo_after(c, "rst_in_window", got)

    def rst_exact(self):
        c = self.established()
        c.exchange([c.frame("R", seq=c.snd_nxt, ack=0)])
        got = c.exchange([c.frame("PA", data=b"late")], wait=QUIET)
        line("rst_exact", got)

    def syn_established(self):
        c = self.established()
        got = c.exchange([c.frame("S", seq=c.snd_nxt + 100)])
        self.echo_after(c, "syn_established", got)

    def ack_unsent(self):
        c = self.established()
        got = c.exchange([c.frame("PA", ack=c.rcv_nxt + 100_000, data=b"zz")])
        self.echo_after(c, "ack_unsent", got)

    def beyond_window(self):
        c = self.established()
        got = c.exchange([c.frame("PA", seq=c.snd_nxt + 1_000_000, data=b"far")])
        self.echo_after(c, "beyond_window", got)

    def broken(self, name, build):
        """A frame on an established connection that must be dropped before TCP sees it."""
        c = self.established()
        got = c.exchange([build(c)])
        self.echo_after(c, name, got)

    def ip_len_short(self):
        c = self.established()
        f = c.frame("PA", data=b"abc")
        f = Ether(bytes(f))  # checksums computed over "abc"
        raw = bytes(f) + b"XYZ"
        got = c.exchange([Ether(raw)], want=3)
        c.snd_nxt += 3
        self.echo_after(c, "ip_len_short", got)

    def fragments(self, name, pieces, arrives):
        """TCP data "fragmented-data!" (16 bytes + the 20-byte header) in the IP fragments that
        pieces(segment, other) lists as (offset, bytes, more fragments); `other` is the segment
        with "fragedntme-data!" instead, two 16-bit words of the data swapped, so that its checksum
        is the same and any mix of the two checks. `arrives`: whether the datagram should be
        reassembled (then the case waits for its echo)."""
        c = self.established()
        data = b"fragmented-data!"
        tcp_bytes = bytes(IP(bytes(c.frame("PA", data=data)[IP]))[TCP])
        other = bytes(IP(bytes(c.frame("PA", data=b"fragedntme-data!")[IP]))[TCP])
        ident = 0x4242 + self.next_port
        frames = []
        for offset, chunk, more in pieces(tcp_bytes, other):
            frames.append(Ether(src=US_MAC, dst=c.w.server_mac) / IP(
                src=c.w.us_ip, dst=c.w.server_ip, proto=6, id=ident, flags="MF" if more else 0,
                frag=offset // 8) / Raw(chunk))
        got = c.exchange(frames, want=len(data) if arrives else None)
        echoed = len(c.echo())
        if echoed:
            c.snd_nxt += len(data)
        self.echo_after(c, name, got)

    def raw_syn(self, name, options):
        """A SYN whose option bytes are given as they are (scapy would fix their lengths)."""
        c = self.conn()
        header = struct.pack("!HHIIBBHHH", c.sport, self.port, c.isn, 0, (5 + len(options) // 4) << 4, 0x02,
                             65535, 0, 0) + options
        pseudo = struct.pack("!4s4sBBH", socket.inet_aton(self.w.us_ip), socket.inet_aton(self.w.server_ip), 0, 6,
                             len(header))
        header = header[:16] + struct.pack("!H", checksum(pseudo + header)) + header[18:]
        f = Ether(src=US_MAC, dst=self.w.server_mac) / IP(src=self.w.us_ip, dst=self.w.server_ip, proto=6) / Raw(header)
        self.w.send(f)
        line(name, c.take(self.w.collect(QUIET)))

    def ip_options(self):
        """Four NOP options in the IP header (IHL 6): RFC 1122 §3.2.1.8, options are processed or ignored."""
        c = self.established()
        f = Ether(src=US_MAC, dst=c.w.server_mac) / IP(
            src=c.w.us_ip, dst=c.w.server_ip, options=[IPOption_NOP()] * 4) / TCP(
            sport=c.sport, dport=c.dport, flags="PA", seq=c.snd_nxt, ack=c.rcv_nxt, window=65535) / Raw(b"op")
        got = c.exchange([f], want=2)
        if c.echo():
            c.snd_nxt += 2
        self.echo_after(c, "ip_options", got)

    def land(self):
        c = self.conn()
        f = Ether(src=US_MAC, dst=self.w.server_mac) / IP(src=self.w.server_ip, dst=self.w.server_ip) / TCP(
            sport=self.port, dport=self.port, flags="S", seq=777)
        arp_before = len(self.w.arp_asked)
        self.w.send(f)
        got = self.w.collect(QUIET * 2, to=self.w.server_ip)
        line("land", [f"{p[TCP].flags}/{p[TCP].seq}/{p[TCP].ack}/{len(payload_of(p))}" for p in got],
             arp=";".join(self.w.arp_asked[arp_before:]) or "-")

    def src_martian(self, name, src):
        c = self.conn()
        arp_before = len(self.w.arp_asked)
        f = Ether(src=US_MAC, dst=self.w.server_mac) / IP(src=src, dst=self.w.server_ip) / TCP(
            sport=c.sport, dport=self.port, flags="S", seq=777)
        self.w.send(f)
        got = self.w.collect(QUIET, to=src)
        line(name, c.take(got), arp=";".join(self.w.arp_asked[arp_before:]) or "-")


def run(cases, only):
    w = cases.w
    # The server's subnet is a /24 (as the test gives it).
    subnet_broadcast = w.server_ip.rsplit(".", 1)[0] + ".255"
    table = [
        ("handshake", cases.handshake),
        ("syn_fin", lambda: cases.bare("syn_fin", "SF")),
        ("syn_rst", lambda: cases.bare("syn_rst", "SR")),
        ("fin_listener", lambda: cases.bare("fin_listener", "F")),
        ("null_listener", lambda: cases.bare("null_listener", "")),
        ("xmas_listener", lambda: cases.bare("xmas_listener", "FPU")),
        ("ack_listener", lambda: cases.bare("ack_listener", "A")),
        ("syn_closed_port", lambda: cases.bare("syn_closed_port", "S", dport=9)),
        ("rst_closed_port", lambda: cases.bare("rst_closed_port", "R", dport=9)),
        ("opt_len0", lambda: cases.raw_syn("opt_len0", bytes([1, 1, 99, 0]))),
        ("opt_truncated", lambda: cases.raw_syn("opt_truncated", bytes([1, 1, 2, 4]))),
        ("syn_data", cases.syn_data),
        ("mss_0", lambda: cases.mss("mss_0", 0)),
        ("mss_1", lambda: cases.mss("mss_1", 1)),
        ("mss_none", lambda: cases.mss("mss_none", None, size=1200)),
        ("wscale_15", lambda: cases.mss("wscale_15", 1460)),
        ("urg", cases.urg),
        ("overlap_inorder", cases.overlap_inorder),
        ("overlap_ooo", cases.overlap_ooo),
        ("bogus_sack", cases.bogus_sack),
        ("paws", cases.paws),
        ("rst_in_window", cases.rst_in_window),
        ("rst_exact", cases.rst_exact),
        ("syn_established", cases.syn_established),
        ("ack_unsent", cases.ack_unsent),
        ("beyond_window", cases.beyond_window),
        ("bad_checksum", lambda: cases.broken("bad_checksum", bad_tcp_checksum)),
        ("dataofs_small", lambda: cases.broken("dataofs_small", lambda c: with_tcp_field(c, dataofs=4))),
        ("dataofs_large", lambda: cases.broken("dataofs_large", lambda c: with_tcp_field(c, dataofs=15))),
        ("ip_len_long", lambda: cases.broken("ip_len_long", lambda c: with_ip_len(c, +20))),
        ("ip_ihl_small", lambda: cases.broken("ip_ihl_small", lambda c: with_ihl(c, 4))),
        ("ip_len_short", cases.ip_len_short),
        ("ip_options", cases.ip_options),
        ("ip_dst_broadcast", lambda: cases.broken("ip_dst_broadcast", lambda c: to_ip(c, subnet_broadcast))),
        ("mac_broadcast_syn", lambda: cases.bare("mac_broadcast_syn", "S", dst_mac=BROADCAST_MAC)),
        ("mac_multicast_syn", lambda: cases.bare("mac_multicast_syn", "S", dst_mac=MULTICAST_MAC)),
        ("mac_broadcast_data", lambda: cases.broken(
            "mac_broadcast_data", lambda c: c.frame("PA", data=b"bb", dst_mac=BROADCAST_MAC))),
        ("mac_multicast_data", lambda: cases.broken(
            "mac_multicast_data", lambda c: c.frame("PA", data=b"mm", dst_mac=MULTICAST_MAC))),
        ("frag_ok", lambda: cases.fragments("frag_ok", lambda b, _: [(0, b[:16], True), (16, b[16:32], True),
                                                                   (32, b[32:], False)], True)),
        ("frag_dup", lambda: cases.fragments("frag_dup", lambda b, _: [(0, b[:16], True), (0, b[:16], True),
                                                                     (16, b[16:], False)], True)),
        # The second fragment overlaps the first's last 8 bytes (the TCP checksum and "frag")
        # and brings the other segment's bytes: whichever copy won, the datagram would check.
        ("frag_overlap", lambda: cases.fragments("frag_overlap", lambda b, o: [
            (0, b[:24], True), (16, o[16:32], True), (32, b[32:], False)], False)),
        ("frag_too_long", lambda: cases.fragments("frag_too_long", lambda b, _: [
            (0, b[:16], True), (65528, b[16:32], False)], False)),
        ("land", cases.land),
        ("src_broadcast", lambda: cases.src_martian("src_broadcast", subnet_broadcast)),
        ("src_multicast", lambda: cases.src_martian("src_multicast", "224.0.0.1")),
    ]
    names = [n for n, _ in table]
    for name in only or []:
        if name not in names:
            sys.exit(f"no case {name!r}; cases: {', '.join(names)}")
    for name, case in table:
        if only and name not in only:
            continue
        w.quiet()
        try:
            case()
        except Exception as e:  # a case that could not run is reported, and fails the test
            print(f"CASE {name} error={type(e).__name__}:{str(e).replace(' ', '_')}", flush=True)


def bad_tcp_checksum(c):
    f = Ether(bytes(c.frame("PA", data=b"cs")))
    f[TCP].chksum ^= 0x5555
    return f


def with_tcp_field(c, **fields):
    f = c.frame("PA", data=b"offs")
    for k, v in fields.items():
        setattr(f[TCP], k, v)
    return f


def with_ip_len(c, delta):
    f = Ether(bytes(c.frame("PA", data=b"ln")))
    f[IP].len += delta
    del f[IP].chksum
    return f


def with_ihl(c, ihl):
    f = Ether(bytes(c.frame("PA", data=b"ih")))
    f[IP].ihl = ihl
    del f[IP].chksum
    return f


def to_ip(c, dst):
    f = c.frame("PA", data=b"bc")
    f[IP].dst = dst
    return f


def checksum(data):
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iface", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--us", default="10.210.0.3", help="our address: one in the server's /24 nothing else has")
    ap.add_argument("--port", type=int, default=7)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    conf.verb = 0
    wire = Wire(args.iface, args.us, args.server)
    if not wire.announce():
        sys.exit(f"no ARP answer from {args.server} on {args.iface}")
    print(f"SERVER {wire.server_mac}", flush=True)
    started = time.monotonic()
    run(Cases(wire, args.port), [n for n in args.only.split(",") if n])
    print(f"DONE {time.monotonic() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()
