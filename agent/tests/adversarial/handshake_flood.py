#!/usr/bin/env python3
"""Issue 14's handshake-flood target, measured: one real agent on loopback, a QUIC handshake flood
at it (flood.py, aioquic) for DURATION seconds, and a legitimate `shoal get` every 100 ms during
the flood. Target: ">= 99 % of legitimate `shoal get` calls answered within 1 s during the flood;
the agent's RSS grows by <= 20 MB" at 120 KB/s of half-open handshakes.

    python3 -m pip install aioquic
    cargo build --release
    agent/tests/adversarial/handshake_flood.py --shoal target/release/shoal
    agent/tests/adversarial/handshake_flood.py --shoal target/release/shoal --before
    agent/tests/adversarial/handshake_flood.py --shoal target/release/shoal \\
        --mode answer-retry --sources 127.0.0.2-127.0.0.33
    agent/tests/adversarial/handshake_flood.py --shoal target/release/shoal --endpoint gossip --join

--before runs the agent with the admission limits set back to what the endpoints did before
issue 14 (no Retry, handshakes bounded only by the connection cap and the idle timeout, no
per-address or per-certificate cap, no request budget). The QUIC windows and quinn's accept
queue bounds are not settings: they stay as built.

--endpoint gossip floods the gossip port instead; with --join a second agent joins through the
flooded one halfway through the flood, and the time until each sees the other is reported.

Prints one JSON line: calls, answered within 1 s (count and %), failed, p50/p99/max latency of
the calls (ms, a whole `shoal get` process), the agent's VmRSS before, at its peak during the
flood, and after (MB), the flood's own report, and the agent's admission counters from /metrics.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# The limits as they were before issue 14, per endpoint: (connection cap, QUIC idle timeout).
# Handshakes took a connection slot, so they were capped by the connection cap and lasted until
# the idle timeout; nothing was capped per address or per certificate.
BEFORE = {"api": (256, "30s"), "gossip": (4096, "60s")}
UNCAPPED = 1_000_000


def before_flags():
    flags = []
    for endpoint, (cap, idle) in BEFORE.items():
        for key, value in [
            ("address_validation", "off"),
            ("handshake_timeout", idle),
            ("handshakes_max", cap),
            ("handshake_make_room", "off"),
            ("handshakes_per_ip_max", UNCAPPED),
            ("connections_per_ip_max", UNCAPPED),
            ("connections_per_peer_max", UNCAPPED),
            ("request_bytes_per_peer_max", "none"),
        ]:
            flags += ["--admission", f"{endpoint}.{key}={value}"]
    return flags


def free_port():
    """A loopback port free for UDP and TCP now (the agent binds it a moment later)."""
    while True:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return None


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


class Agents:
    def __init__(self, shoal, workdir, extra):
        self.shoal, self.dir, self.extra = shoal, workdir, extra
        self.procs = []
        self.pki = os.path.join(workdir, "pki")
        run([shoal, "pki", "init", "--dir", self.pki])
        agent_help = run([shoal, "agent", "--help"]).stdout
        self.self_issue = ["--self-issue"] if "--self-issue" in agent_help else []
        # The caller's own client certificate (builds with certificate roles need one).
        self.client = []
        if "--role" in run([shoal, "pki", "issue", "--help"]).stdout:
            run([shoal, "pki", "issue", "--dir", self.pki, "--name", "flood-cli", "--role", "client"])
            self.client = ["--client-name", "flood-cli"]

    def start(self, name, seed=None, metrics=False):
        gossip, api = free_port(), free_port()
        metrics_port = free_port() if metrics else None
        data = os.path.join(self.dir, name)
        os.makedirs(data, exist_ok=True)
        cmd = [self.shoal, "agent", "--name", name, "--gossip", f"127.0.0.1:{gossip}",
               "--api", f"127.0.0.1:{api}", "--data-dir", data, "--pki", self.pki,
               "--cpu", "2", "--memory", "2Gi"] + self.self_issue + self.extra
        if seed:
            cmd += ["--seed", seed]
        if metrics_port:
            cmd += ["--metrics", f"127.0.0.1:{metrics_port}"]
        log = open(os.path.join(self.dir, f"{name}.log"), "w")
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
        self.procs.append(proc)
        return {"proc": proc, "gossip": f"127.0.0.1:{gossip}", "api": f"127.0.0.1:{api}",
                "metrics": metrics_port}

    def cli(self, agent, *args, timeout_s=5):
        cmd = [self.shoal, *args, "--agent", agent["api"], "--pki", self.pki, "--timeout", f"{timeout_s}s",
               *self.client]
        start = time.monotonic()
        try:
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 timeout=timeout_s + 5)
            ok = out.returncode == 0
        except subprocess.TimeoutExpired:
            out, ok = None, False
        return ok, time.monotonic() - start, out

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        # Each agent started a guard (`shoal guard --data-dir ...`) that outlives it by design.
        for pid in pids_mentioning(self.dir):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def pids_mentioning(text):
    """Processes whose command line contains `text` (this run's work dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            pass
    return found


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True)


def admission_counters(metrics_port):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    except OSError as e:
        return {"error": str(e)}
    wanted = ("shoal_quic_retries_total", "shoal_connections_refused_total", "shoal_handshakes_refused_total")
    out = {}
    for line in body.splitlines():
        if line.startswith(wanted):
            key, value = line.rsplit(" ", 1)
            if float(value) > 0:
                out[key] = int(float(value))
    return out


def sees_alive(agents, agent, name):
    ok, _, out = agents.cli(agent, "nodes", "-o", "json")
    return ok and any(n.get("name") == name and n.get("alive") for n in json.loads(out.stdout))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shoal", default="target/release/shoal", help="the shoal binary")
    p.add_argument("--duration", type=float, default=20, help="flood seconds (default 20)")
    p.add_argument("--rate", type=float, default=120_000, help="flood bytes per second (default 120000)")
    p.add_argument("--mode", choices=["half-open", "answer-retry"], default="half-open")
    p.add_argument("--sources", default="127.0.0.1", help="flood source IPs (flood.py --sources)")
    p.add_argument("--ports", type=int, default=64, help="flood source ports per source IP")
    p.add_argument("--endpoint", choices=["api", "gossip"], default="api", help="which port to flood")
    p.add_argument("--join", action="store_true", help="a second agent joins halfway through the flood")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between `shoal get` calls")
    p.add_argument("--before", action="store_true", help="admission limits as before issue 14")
    p.add_argument("--agent-arg", action="append", default=[], help="an extra agent argument (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = p.parse_args()

    shoal = os.path.abspath(args.shoal)
    extra = (before_flags() if args.before else []) + args.agent_arg
    workdir = tempfile.mkdtemp(prefix="shoal-flood-")
    agents = Agents(shoal, workdir, extra)
    try:
        result = measure(args, agents)
    finally:
        agents.stop()
        if args.keep:
            print(f"work dir kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)


def measure(args, agents):
    a = agents.start("n1", metrics=True)
    pid = a["proc"].pid
    deadline = time.monotonic() + 30
    while not agents.cli(a, "get")[0]:
        if time.monotonic() > deadline or a["proc"].poll() is not None:
            sys.exit(f"the agent did not answer within 30 s (log in {agents.dir}/n1.log)")
        time.sleep(0.2)
    time.sleep(3)  # settle
    rss_before = rss_mb(pid)

    target = a["api"] if args.endpoint == "api" else a["gossip"]
    alpn = "shoal-api/1" if args.endpoint == "api" else "shoal-gossip/1"
    flood = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "flood.py"), "--target", target, "--rate", str(args.rate),
         "--duration", str(args.duration), "--mode", args.mode, "--sources", args.sources,
         "--ports", str(args.ports), "--alpn", alpn],
        stdout=subprocess.PIPE, text=True)

    peak = [rss_before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            r = rss_mb(pid)
            if r:
                peak[0] = max(peak[0], r)
            stop.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    joined = None
    join_state = {}
    if args.join:
        def join():
            time.sleep(args.duration / 2)
            b = agents.start("n2", seed=a["gossip"])
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.duration:
                if sees_alive(agents, a, "n2") and sees_alive(agents, b, "n1"):
                    join_state["joined_s"] = round(time.monotonic() - t0, 2)
                    return
                time.sleep(0.2)
        joined = threading.Thread(target=join, daemon=True)
        joined.start()

    latencies, answered, failed = [], 0, 0
    start = time.monotonic()
    next_call = start
    while time.monotonic() - start < args.duration:
        ok, took, _ = agents.cli(a, "get")
        latencies.append(took)
        if ok and took <= 1.0:
            answered += 1
        if not ok:
            failed += 1
        next_call += args.interval
        time.sleep(max(0.0, next_call - time.monotonic()))
    flood_out, _ = flood.communicate()
    if joined:
        joined.join()
    stop.set()
    sampler.join()
    rss_after = rss_mb(pid)
    calls = len(latencies)
    ms = lambda s: None if s is None else round(s * 1000, 1)
    return {
        "limits": "before" if args.before else "after",
        "endpoint": args.endpoint,
        "mode": args.mode,
        "calls": calls,
        "answered_within_1s": answered,
        "answered_pct": round(100 * answered / calls, 1) if calls else None,
        "failed": failed,
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies) if latencies else None),
        "rss_before_mb": round(rss_before, 1),
        "rss_peak_mb": round(peak[0], 1),
        "rss_after_mb": round(rss_after, 1) if rss_after else None,
        "rss_growth_mb": round(peak[0] - rss_before, 1),
        **({"join_s": join_state.get("joined_s")} if args.join else {}),
        "flood": json.loads(flood_out.strip().splitlines()[-1]) if flood_out.strip() else None,
        "counters": admission_counters(a["metrics"]),
    }


if __name__ == "__main__":
    main()
