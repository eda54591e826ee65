#!/usr/bin/env python3
"""An independent QUIC client (aioquic) presenting a given certificate to a Shoal endpoint: does
the handshake complete, and does the agent then close the connection, with which code and reason?

    roles.py --addr 127.0.0.1:7000 --alpn shoal-gossip/1 --server-name n1 \\
        --ca pki/ca.crt --cert pki/alice.crt --key pki/alice.key [--wait 3]

Prints one JSON line: {"handshake": bool, "closed": bool, "error_code": int|null,
"reason": str, "error": str|null}. agent/tests/adversarial_roles.rs runs it against real agents.
"""

import argparse
import asyncio
import json
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ConnectionTerminated
except ImportError:  # pragma: no cover
    print("aioquic is missing: python3 -m pip install aioquic", file=sys.stderr)
    sys.exit(3)


class Watch(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.terminated = asyncio.get_event_loop().create_future()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated) and not self.terminated.done():
            self.terminated.set_result(event)


async def probe(args):
    host, port = args.addr.rsplit(":", 1)
    config = QuicConfiguration(is_client=True, alpn_protocols=[args.alpn])
    config.load_verify_locations(args.ca)
    config.load_cert_chain(args.cert, args.key)
    config.verify_mode = ssl.CERT_REQUIRED
    config.server_name = args.server_name
    out = {"handshake": False, "closed": False, "error_code": None, "reason": "", "error": None}
    try:
        async with connect(
            host,
            int(port),
            configuration=config,
            create_protocol=Watch,
            wait_connected=True,
        ) as client:
            out["handshake"] = True
            try:
                event = await asyncio.wait_for(client.terminated, args.wait)
                out["closed"] = True
                out["error_code"] = event.error_code
                out["reason"] = event.reason_phrase
            except asyncio.TimeoutError:
                pass
    except Exception as e:  # a refused handshake surfaces as an exception from connect()
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--alpn", required=True)
    p.add_argument("--server-name", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--wait", type=float, default=3.0)
    args = p.parse_args()
    out = asyncio.run(asyncio.wait_for(probe(args), args.wait + 10))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
