#!/usr/bin/env bash
# How long a fresh mesh takes to reach the newest mesh version: N real agents on loopback in one
# cell (scripts/loopback-agents.sh); every second, each agent's `shoal_mesh_version` is read (32
# at a time, 3 s timeout) and one line printed: seconds since the first start, how many run WANT,
# how many did not answer.
# Stops once all run it, or after LIMIT_S.
# Usage: scripts/mesh-climb.sh SHOAL_BIN N [LIMIT_S] [WANT]
# Env: SEEDS=K, as scripts/loopback-agents.sh says.
set -u
SHOAL=$1; N=$2; LIMIT=${3:-120}; WANT=${4:-15}
t0=$(date +%s.%N)
. "$(dirname "$0")/loopback-agents.sh"
start_agents "$SHOAL" "$N"
python3 - "$N" "$LIMIT" "$t0" "$WANT" <<'PY'
import sys, time, urllib.request, concurrent.futures as cf
n, limit, t0, want = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def version(i):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{44000 + i}/metrics", timeout=3).read()
        for line in body.decode().splitlines():
            if line.startswith("shoal_mesh_version "):
                return int(float(line.split()[1]))
    except Exception:
        return None
with cf.ThreadPoolExecutor(32) as pool:
    while time.time() - t0 < limit:
        v = list(pool.map(version, range(1, n + 1)))
        at = sum(1 for x in v if x == want)
        print(f"t={time.time() - t0:.1f}s at{want}={at}/{n} unanswered={v.count(None)}", flush=True)
        if at == n:
            break
        time.sleep(1)
PY
