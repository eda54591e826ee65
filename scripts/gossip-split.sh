#!/usr/bin/env bash
# How an agent's gossip bytes split (issue 28): N real agents on loopback in one cell, no
# workloads, like ../shared/anchors/shoal-gossip-scale.sh; prints one JSON line with the bytes
# sent per agent per second in all and by part (`shoal_gossip_sent_bytes_by_part`: chitchat
# digests, deltas, member probes; the rest is framing), over WINDOW_S after SETTLE_S.
# Usage: scripts/gossip-split.sh SHOAL_BIN N [SETTLE_S] [WINDOW_S]
# Env: SEEDS=K, as scripts/loopback-agents.sh says.
set -u
SHOAL=$1; N=$2; SETTLE=${3:-15}; WINDOW=${4:-20}
. "$(dirname "$0")/loopback-agents.sh"
start_agents "$SHOAL" "$N"
sleep "$SETTLE"
sample() {
  for i in $(seq 1 "$N"); do curl -s "http://127.0.0.1:$((44000+i))/metrics"; done | awk '
    /^shoal_gossip_bytes_total\{direction="out"\}/ {out += $2}
    /^shoal_gossip_bytes_total\{direction="in"\}/ {in_ += $2}
    /^shoal_gossip_sent_bytes_by_part_total\{part="digest"\}/ {d += $2}
    /^shoal_gossip_sent_bytes_by_part_total\{part="delta"\}/ {k += $2}
    /^shoal_gossip_sent_bytes_by_part_total\{part="probe"\}/ {p += $2}
    END {printf "%d %d %d %d %d", out, in_, d, k, p}'
}
read o0 i0 d0 k0 p0 <<<"$(sample)"; t0=$(date +%s.%N)
sleep "$WINDOW"
read o1 i1 d1 k1 p1 <<<"$(sample)"; t1=$(date +%s.%N)
python3 - "$N" "$t0" "$t1" "$o0" "$o1" "$i0" "$i1" "$d0" "$d1" "$k0" "$k1" "$p0" "$p1" <<'PY'
import json, sys
n = int(sys.argv[1]); dt = float(sys.argv[3]) - float(sys.argv[2])
v = [int(x) for x in sys.argv[4:]]
rate = lambda a, b: round((b - a) / dt / n)
out, inn, dig, dl, pr = (rate(v[i], v[i + 1]) for i in range(0, 10, 2))
print(json.dumps({"n": n, "in_plus_out_per_agent": out + inn, "sent_per_agent": out,
  "sent_digest": dig, "sent_delta": dl, "sent_probe": pr, "sent_framing": out - dig - dl - pr}))
PY
