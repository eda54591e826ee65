#!/usr/bin/env bash
# What N agents at rest cost (issue 28): N real agents on loopback in one cell, no workloads, all
# joined through agent 1, on ports BASE+i (gossip), BASE+1000+i (API), BASE+2000+i (metrics), so
# that two builds run side by side on different BASEs (the only fair comparison on a machine
# whose speed drifts from hour to hour). After SETTLE_S, over WINDOW_S, prints one line: CPU per
# agent (% of a core), voluntary context switches per agent per second (every thread), and
# gossip messages and bytes (in+out, `shoal_gossip_*_total`) per agent per second.
# Usage: scripts/rest-cost.sh SHOAL_BIN N BASE SETTLE_S WINDOW_S
#   scripts/rest-cost.sh OLD 30 50000 60 60 & scripts/rest-cost.sh NEW 30 53000 60 60; wait
set -u
BIN=$1; N=$2; BASE=$3; SETTLE=$4; WINDOW=$5
. "$(dirname "$0")/loopback-agents.sh"
start_agents "$BIN" "$N" "$BASE" "$((BASE + 1000))" "$((BASE + 2000))"
sleep "$SETTLE"
snap() {
  local c=0 s=0 b=0 m=0 p v t u st
  for p in "${PIDS[@]}"; do
    read -r u st < <(awk '{print $14, $15}' "/proc/$p/stat"); c=$((c + u + st))
    for t in /proc/"$p"/task/*/status; do
      v=$(awk '/^voluntary_ctxt_switches/{print $2}' "$t" 2>/dev/null); s=$((s + ${v:-0}))
    done
  done
  for i in $(seq 1 "$N"); do
    v=$(curl -s "http://127.0.0.1:$((BASE+2000+i))/metrics" | awk '/^shoal_gossip_bytes_total/{b+=$2} /^shoal_gossip_messages_total/{m+=$2} END{printf "%d %d", b, m}')
    b=$((b + ${v% *})); m=$((m + ${v#* }))
  done
  echo "$c $s $b $m"
}
read -r c0 s0 b0 m0 < <(snap)
sleep "$WINDOW"
read -r c1 s1 b1 m1 < <(snap)
alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
python3 -c "
import json, os
n, w, hz = $N, $WINDOW, os.sysconf('SC_CLK_TCK')
print(json.dumps({'bin': '$BIN', 'n': n, 'running': $alive,
  'cpu_pct_per_agent': round(($c1 - $c0) / hz / w / n * 100, 3),
  'voluntary_switches_per_agent_per_s': round(($s1 - $s0) / w / n, 1),
  'gossip_msgs_per_agent_per_s': round(($m1 - $m0) / w / n, 1),
  'gossip_bytes_per_agent_per_s': round(($b1 - $b0) / w / n)}))"
