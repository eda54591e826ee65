#!/usr/bin/env bash
# How long a fresh mesh takes to reach the newest mesh version: N real agents on loopback in one
# cell, started as scripts/gossip-split.sh starts them (agent 1 first, the rest through it, 50 ms
# apart); every second, each agent's `shoal_mesh_version` is read (32 at a time, 3 s timeout)
# and one line printed: seconds since the first start, how many run WANT, how many did not answer.
# Stops once all run it, or after LIMIT_S.
# Usage: scripts/mesh-climb.sh SHOAL_BIN N [LIMIT_S] [WANT]
set -u
SHOAL=$1; N=$2; LIMIT=${3:-120}; WANT=${4:-15}
T=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
export SHOAL_SELF_ISSUE=true
"$SHOAL" pki init --dir "$T/pki" >/dev/null 2>&1 || { echo "pki init failed" >&2; exit 1; }
t0=$(date +%s.%N)
for i in $(seq 1 "$N"); do
  seed=(); [ "$i" != 1 ] && seed=(--seed 127.0.0.1:46001)
  mkdir -p "$T/d$i"
  "$SHOAL" agent --name "g$i" --gossip "127.0.0.1:$((46000+i))" --api "127.0.0.1:$((45000+i))" \
    --metrics "127.0.0.1:$((44000+i))" --data-dir "$T/d$i" --pki "$T/pki" --cpu 4 --memory 8Gi \
    "${seed[@]}" >"$T/a$i.log" 2>&1 &
  PIDS+=($!)
  sleep 0.05
done
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
