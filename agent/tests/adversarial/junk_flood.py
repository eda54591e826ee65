#!/usr/bin/env python3
"""A junk UDP flood at one agent's API port while a legit client calls it (issue 29 item 5).

    agent/tests/adversarial/junk_flood.py --shoal target/debug/shoal [--agents 3] [--senders 300]
        [--procs 2] [--calls 40] [--rate 0]

Starts AGENTS agents on 127.0.0.1 (fresh PKI, self-issued certificates, a temp dir), waits
until `shoal nodes` on agent 0 lists them all, then starts PROCS flood processes with
SENDERS/PROCS UDP sockets each (one source port per sender, no spoofing) sending to agent 0's
API port, in turn: 1,200 random bytes, and a QUIC v1 Initial-looking long header (random
connection ids, random payload padded to 1,200 bytes, so quinn must try to decrypt it).
RATE is datagrams/s per process (0: as fast as they can). Meanwhile it runs `shoal nodes` on
agent 0 CALLS times, one after another, and times each. Then it stops everything.

The last stdout line is JSON: calls, answered within 1 s, failed, worst and p50 seconds, the
datagrams sent, and the receive-buffer drops the kernel counted (/proc/net/snmp
UDP RcvbufErrors, whole machine) during the run.
"""

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rcvbuf_errors():
    with open("/proc/net/snmp") as f:
        lines = [l.split() for l in f if l.startswith("Udp:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("RcvbufErrors")])


def quic_initial_like():
    dcid, scid = os.urandom(8), os.urandom(8)
    head = bytes([0xC3]) + (1).to_bytes(4, "big") + bytes([8]) + dcid + bytes([8]) + scid
    head += bytes([0])  # token length
    body_len = 1200 - len(head) - 2
    head += (0x4000 | body_len).to_bytes(2, "big")
    return head + os.urandom(body_len)


def flood(target, senders, rate, stop_at):
    socks = []
    for _ in range(senders):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    payloads = [os.urandom(1200) for _ in range(16)] + [quic_initial_like() for _ in range(16)]
    sent, i = 0, 0
    began = time.monotonic()
    while time.monotonic() < stop_at:
        for s in socks:
            try:
                s.sendto(payloads[i % len(payloads)], target)
                sent += 1
            except (BlockingIOError, OSError):
                pass
            i += 1
        if rate:
            ahead = sent / rate - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shoal", default="target/debug/shoal")
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--senders", type=int, default=300)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--rate", type=int, default=0)
    p.add_argument("--no-flood", action="store_true")
    args = p.parse_args()
    shoal = os.path.abspath(args.shoal)
    tmp = tempfile.mkdtemp(prefix="api-flood-")
    pki = os.path.join(tmp, "pki")
    env = dict(os.environ, SHOAL_SELF_ISSUE="true", RUST_LOG="warn,shoal=info")
    subprocess.run([shoal, "pki", "init", "--dir", pki], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    agents, apis = [], []
    seed = None
    for i in range(args.agents):
        gossip, api = free_port(), free_port()
        apis.append(("127.0.0.1", api))
        cmd = [shoal, "agent", "--name", f"n{i}", "--gossip", f"127.0.0.1:{gossip}",
               "--api", f"127.0.0.1:{api}", "--data-dir", os.path.join(tmp, f"d{i}"),
               "--pki", pki, "--cpu", "4", "--memory", "8Gi"]
        if seed:
            cmd += ["--seed", seed]
        seed = seed or f"127.0.0.1:{gossip}"
        log = open(os.path.join(tmp, f"n{i}.log"), "w")
        agents.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log,
                                       start_new_session=True))
    cli_env = dict(env, SHOAL_AGENT=f"127.0.0.1:{apis[0][1]}", SHOAL_PKI=pki)

    def nodes():
        began = time.monotonic()
        out = subprocess.run([shoal, "nodes", "--timeout", "5s"], env=cli_env,
                             capture_output=True, text=True)
        return time.monotonic() - began, out

    try:
        deadline = time.monotonic() + 60
        while True:
            _, out = nodes()
            if out.returncode == 0 and out.stdout.count("\n") > args.agents:
                break
            if time.monotonic() > deadline:
                sys.exit(f"the mesh did not form: {out.stdout} {out.stderr}")
            time.sleep(0.5)
        procs = []
        errors_before = rcvbuf_errors()
        if not args.no_flood:
            stop_at = time.monotonic() + 3600
            for _ in range(args.procs):
                pr = multiprocessing.Process(
                    target=flood,
                    args=(apis[0], args.senders // args.procs, args.rate, stop_at))
                pr.start()
                procs.append(pr)
            time.sleep(1.0)  # the flood at full strength before the first call
        times, failed = [], 0
        began = time.monotonic()
        for _ in range(args.calls):
            took, out = nodes()
            if out.returncode != 0:
                failed += 1
                print(f"failed after {took:.2f}s: {out.stderr.strip()}", file=sys.stderr)
            times.append(took if out.returncode == 0 else float("inf"))
        flood_secs = time.monotonic() - began + 1.0
        for pr in procs:
            os.kill(pr.pid, signal.SIGTERM)
        for pr in procs:
            pr.join()
        errors = rcvbuf_errors() - errors_before
        ok = sorted(t for t in times if t != float("inf"))
        print(json.dumps({
            "agents": args.agents,
            "senders": 0 if args.no_flood else args.senders,
            "calls": len(times),
            "within_1s": sum(1 for t in times if t <= 1.0),
            "failed": failed,
            "worst_s": round(max(times), 3) if times else None,
            "p50_s": round(ok[len(ok) // 2], 3) if ok else None,
            "flood_secs": round(flood_secs, 1),
            "rcvbuf_errors": errors,
        }))
    finally:
        for a in agents:
            try:
                os.killpg(a.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
