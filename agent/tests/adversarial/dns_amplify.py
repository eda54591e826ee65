#!/usr/bin/env python3
"""DNS amplification of one agent (issue 29 item 5): bytes out per byte in over UDP.

    agent/tests/adversarial/dns_amplify.py --shoal target/debug/shoal [--queries 5000]

Starts one agent (fresh PKI, a temp dir) with `--dns` on loopback and a 16-replica process
workload `amp` declaring a named port `http`, waits until `_http._tcp.amp.shoal.` answers 16 SRV
records over TCP, then sends QUERIES UDP queries for it (EDNS, 1,232 bytes offered: the largest
answer the agent would give) from one socket, 64 in flight, and counts bytes sent and received,
answers truncated (TC) and the largest answer/query ratio. Then `nope.shoal.` and `amp.shoal.`
A the same way. The last stdout line is JSON.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def free_port(kind=socket.SOCK_DGRAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(qid, name, qtype, edns=1232):
    header = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
    q = header + qname + struct.pack(">HH", qtype, 1)
    if edns:
        q += b"\0" + struct.pack(">HHIH", 41, edns, 0, 0)
    return q


def tcp_answer_count(port, q):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
    return struct.unpack(">H", body[6:8])[0]


def blast(port, name, qtype, count, inflight=64):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    sent_bytes = recv_bytes = answered = truncated = 0
    worst = 0.0
    began = time.monotonic()
    qid = 0
    outstanding = 0
    while answered + outstanding < count or outstanding:
        while outstanding < inflight and answered + outstanding < count:
            q = query(qid & 0xFFFF, name, qtype)
            qid += 1
            s.sendto(q, ("127.0.0.1", port))
            sent_bytes += len(q)
            outstanding += 1
            qlen = len(q)
        try:
            data, _ = s.recvfrom(4096)
        except socket.timeout:
            break
        outstanding -= 1
        answered += 1
        recv_bytes += len(data)
        worst = max(worst, len(data) / qlen)
        if data[2] & 0x02:
            truncated += 1
    secs = time.monotonic() - began
    return {
        "name": name, "queries": qid, "answered": answered, "truncated": truncated,
        "query_bytes": qlen, "bytes_in": sent_bytes, "bytes_out": recv_bytes,
        "ratio_total": round(recv_bytes / max(sent_bytes, 1), 2), "ratio_worst": round(worst, 2),
        "secs": round(secs, 2), "qps": round(answered / secs),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shoal", default="target/debug/shoal")
    p.add_argument("--queries", type=int, default=5000)
    args = p.parse_args()
    shoal = os.path.abspath(args.shoal)
    tmp = tempfile.mkdtemp(prefix="dns-amp-")
    pki = os.path.join(tmp, "pki")
    env = dict(os.environ, SHOAL_SELF_ISSUE="true", RUST_LOG="warn,shoal=info")
    subprocess.run([shoal, "pki", "init", "--dir", pki], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    gossip, api, dns = free_port(), free_port(), free_port()
    log = open(os.path.join(tmp, "agent.log"), "w")
    agent = subprocess.Popen(
        [shoal, "agent", "--name", "n1", "--gossip", f"127.0.0.1:{gossip}",
         "--api", f"127.0.0.1:{api}", "--data-dir", os.path.join(tmp, "data"), "--pki", pki,
         "--cpu", "8", "--memory", "8Gi", "--dns", f"127.0.0.1:{dns}",
         "--port-range", "21000-21099"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        spec = os.path.join(tmp, "amp.toml")
        with open(spec, "w") as f:
            f.write('name = "amp"\nreplicas = 16\n[process]\ncommand = ["sleep", "86423"]\n'
                    'ports = [{ name = "http" }]\n[resources]\ncpu = "100m"\nmemory = "16Mi"\n')
        cli_env = dict(env, SHOAL_AGENT=f"127.0.0.1:{api}", SHOAL_PKI=pki)
        srv = query(1, "_http._tcp.amp.shoal.", 33)
        deadline = time.monotonic() + 90
        applied = False
        while True:
            if not applied:
                applied = subprocess.run([shoal, "apply", "-f", spec], env=cli_env,
                                         capture_output=True).returncode == 0
            try:
                if applied and tcp_answer_count(dns, srv) == 16:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                sys.exit("16 SRV records never answered")
            time.sleep(0.5)
        runs = [
            blast(dns, "_http._tcp.amp.shoal.", 33, args.queries),
            blast(dns, "amp.shoal.", 1, args.queries),
            blast(dns, "nope.shoal.", 1, args.queries),
        ]
        for r in runs:
            print(json.dumps(r))
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        # The instances this run started (their command carries its own marker), by pid.
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() == b"sleep\x0086423\x00":
                        os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
