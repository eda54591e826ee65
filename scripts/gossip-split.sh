#!/usr/bin/env bash
# How an agent's gossip bytes split (issue 28): N real agents on loopback in one cell, no
# workloads, like ../shared/anchors/shoal-gossip-scale.sh; prints one JSON line with the bytes
# sent per agent per second in all and by part (`shoal_gossip_sent_bytes_by_part`: chitchat
# digests, deltas, member probes; the rest is framing), over WINDOW_S after SETTLE_S.
# Usage: scripts/gossip-split.sh SHOAL_BIN N [SETTLE_S] [WINDOW_S]
# Env: SEEDS=K, as scripts/loopback-agents.sh says. WIRE=1 (root) runs the agents in a fresh
# network namespace whose only UDP traffic is theirs, counted by an iptables rule, and adds what
# went on the wire: UDP bytes per agent in+out (QUIC's headers, acknowledgements, keep-alives
# and handshakes included, plus 28 bytes of IP and UDP header a datagram) in all and apart for
# the gossip endpoints (sent from ports 46001-46999) and the rest (the API endpoints: RPC between
# agents, store sync, cell exchange, exclusive checks), datagrams per agent in+out, and CPU per
# agent.
set -u
SHOAL=$1; N=$2; SETTLE=${3:-15}; WINDOW=${4:-20}
if [ "${WIRE:-0}" = 1 ] && [ -z "${WIRE_NS:-}" ]; then
  ns="shoal-wire-$$"
  ip netns add "$ns" || exit 1
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" iptables -A OUTPUT -o lo -p udp
  ip netns exec "$ns" iptables -A OUTPUT -o lo -p udp --sport 46001:46999
  WIRE_NS=$ns ip netns exec "$ns" "$0" "$@"; rc=$?
  ip netns del "$ns"
  exit $rc
fi
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
# UDP datagrams and bytes sent over loopback (each is received once too), and the agents' CPU ticks.
wire() {
  local rules="0 0 0 0" cpu=0 p
  [ -n "${WIRE_NS:-}" ] && rules=$(iptables -L OUTPUT -v -x -n | awk 'NR > 2 {printf "%s %s ", $1, $2}')
  for p in "${PIDS[@]}"; do cpu=$((cpu + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0))); done
  echo "$cpu $rules"
}
w0=$(wire); read o0 i0 d0 k0 p0 <<<"$(sample)"; t0=$(date +%s.%N)
sleep "$WINDOW"
w1=$(wire); t1=$(date +%s.%N); read o1 i1 d1 k1 p1 <<<"$(sample)"
python3 - "$N" "$t0" "$t1" "$o0" "$o1" "$i0" "$i1" "$d0" "$d1" "$k0" "$k1" "$p0" "$p1" \
  "${WIRE_NS:-}" "$w0" "$w1" <<'PY'
import json, os, sys
n = int(sys.argv[1]); dt = float(sys.argv[3]) - float(sys.argv[2])
v = [int(x) for x in sys.argv[4:14]]
rate = lambda a, b: round((b - a) / dt / n)
out, inn, dig, dl, pr = (rate(v[i], v[i + 1]) for i in range(0, 10, 2))
r = {"n": n, "in_plus_out_per_agent": out + inn, "sent_per_agent": out, "sent_digest": dig,
     "sent_delta": dl, "sent_probe": pr, "sent_framing": out - dig - dl - pr}
w0 = [int(x) for x in sys.argv[15].split()]
w1 = [int(x) for x in sys.argv[16].split()]
r["cpu_pct_per_agent"] = round((w1[0] - w0[0]) / os.sysconf("SC_CLK_TCK") / dt / n * 100, 2)
if sys.argv[14]:
    # Rules: all UDP, then what the gossip endpoints sent (from 46xxx).
    # Every datagram on loopback is sent by one agent and received by another: in+out is twice.
    d = [2 * rate(a, b) for a, b in zip(w0[1:], w1[1:])]
    r["wire_udp_bytes_in_plus_out_per_agent"] = d[1]
    r["wire_datagrams_in_plus_out_per_agent"] = d[0]
    r["wire_gossip_bytes"], r["wire_gossip_datagrams"] = d[3], d[2]
    # The rest is the API endpoints' (RPC between agents; the curl scrapes are TCP).
    r["wire_api_bytes"], r["wire_api_datagrams"] = d[1] - d[3], d[0] - d[2]
print(json.dumps(r))
PY
