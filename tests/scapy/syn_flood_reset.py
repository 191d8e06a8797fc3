"""The SYN-flood reset case, packet by packet, against a server on a TAP (tests/syn_flood_tap.rs).

Usage: syn_flood_reset.py IFACE SERVER_IP CLIENT_IP PORT SPORT FLOOD

Floods the server's listener with FLOOD SYNs spoofed from an address nobody answers for (its SYN
queue overflows: cookie mode), then plays a client at CLIENT_IP:SPORT whose handshake ACK and
first data were lost: SYN (cookie SYN-ACK), a SYN spoofed on the client's own four-tuple (another
cookie SYN-ACK), the client's answer to that one (an ACK past its lost data, which fails the
cookie check), then the client's retransmitted data. Prints one JSON object: what came back.
"""

import json
import sys
import time

from scapy.all import IP, TCP, AsyncSniffer, Ether, Raw, conf, get_if_hwaddr, getmacbyip, sendp

conf.verb = 0
iface, server, client, port, sport, flood = sys.argv[1:7]
port, sport, flood = int(port), int(sport), int(flood)
mac = get_if_hwaddr(iface)
server_mac = getmacbyip(server)
if server_mac is None:
    sys.exit(f"no ARP answer from {server}")


def segment(src, sp, flags, seq, ack=0, data=b""):
    p = Ether(src=mac, dst=server_mac) / IP(src=src, dst=server)
    p /= TCP(sport=sp, dport=port, flags=flags, seq=seq, ack=ack, window=64240,
             options=[("MSS", 1460)] if flags == "S" else [])
    return p / Raw(data) if data else p


def ours(p):
    return TCP in p and p[IP].src == server and p[IP].dst == client and p[TCP].dport == sport


seen = []
sniffer = AsyncSniffer(iface=iface, lfilter=ours, prn=seen.append, store=False)
sniffer.start()
time.sleep(0.5)


def wait_for(pred, seconds):
    end = time.time() + seconds
    while time.time() < end:
        for p in list(seen):
            if pred(p):
                return p
        time.sleep(0.02)
    return None


def flags(p):
    return str(p[TCP].flags)


# The flood: half-open connections that never complete (their SYN-ACKs wait for ARP).
sendp([segment("10.204.0.99", 20000 + i, "S", 1000 * i) for i in range(flood)], iface=iface)
result = {}
c = 1_000_000
sendp(segment(client, sport, "S", c), iface=iface)
synack = wait_for(lambda p: flags(p) == "SA" and p[TCP].ack == c + 1, 3)
result["synack"] = synack is not None
if synack is not None:
    iss = synack[TCP].seq
    # Handshake ACK and "hello" lost. A SYN spoofed on the client's four-tuple:
    sendp(segment(client, sport, "S", 7_777_777), iface=iface)
    spoofed = wait_for(lambda p: flags(p) == "SA" and p[TCP].ack == 7_777_778, 3)
    result["spoofed_synack"] = spoofed is not None
    # The client answers the SYN-ACK it did not ask for: an ACK at its SND.NXT, past the data.
    sendp(segment(client, sport, "A", c + 1 + 5, iss + 1), iface=iface)
    rst = wait_for(lambda p: "R" in flags(p), 1)
    result["reset"] = None if rst is None else {"seq": rst[TCP].seq, "rcv_nxt": iss + 1}
    # The client retransmits its data from ISN + 1.
    sendp(segment(client, sport, "PA", c + 1, iss + 1, b"hello"), iface=iface)
    echo = wait_for(lambda p: Raw in p and bytes(p[Raw].load) == b"hello", 3)
    result["echoed"] = echo is not None
sniffer.stop()
print(json.dumps(result))
