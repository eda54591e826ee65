#!/usr/bin/env bash
# Mesh cost per agent: N real `shoal agent` processes on loopback, no workloads. The shared anchor
# (../shared/anchors/shoal-gossip-scale.sh) with one addition: it also sums the API's frame bytes
# (shoal_api_bytes_total: the cell exchange, replication and anti-entropy travel there, not in
# gossip), so a mesh of cells is measured with what crosses cells.
# Usage: scripts/mesh-cost.sh SHOAL_BIN N [SETTLE_S] [WINDOW_S]
# Env: CELLS=K puts agent i in cell c((i-1)%K+1) with --cell (every agent joins through agent 1);
#      EXTRA="..." adds agent flags. "formed" = the last agent sees every member of its own view alive.
# Prints one JSON line: {n, formed_s, bytes_per_agent_per_s, api_bytes_per_agent_per_s,
#   msgs_per_agent_per_s, cpu_pct_per_agent, rss_mb_median}
set -u
SHOAL=$1; N=$2; SETTLE=${3:-20}; WINDOW=${4:-20}
T=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
"$SHOAL" pki init --dir "$T/pki" >/dev/null 2>&1 || { echo "pki init failed"; exit 1; }
CELLS=${CELLS:-0}
for i in $(seq 1 "$N"); do
  seed=(); [ "$i" != 1 ] && seed=(--seed 127.0.0.1:47001)
  cell=(); [ "$CELLS" -gt 0 ] && cell=(--cell "c$(( (i - 1) % CELLS + 1 ))")
  mkdir -p "$T/d$i"
  "$SHOAL" agent --name "g$i" --gossip "127.0.0.1:$((47000+i))" --api "127.0.0.1:$((48000+i))" \
    --metrics "127.0.0.1:$((49000+i))" --data-dir "$T/d$i" --pki "$T/pki" --cpu 4 --memory 8Gi \
    "${seed[@]}" "${cell[@]}" ${EXTRA:-} >"$T/a$i.log" 2>&1 &
  PIDS+=($!)
  sleep 0.05
done
start=$(date +%s)
# formed: the last agent sees N members alive
for _ in $(seq 1 600); do
  c=$(SHOAL_PKI=$T/pki "$SHOAL" nodes --agent "127.0.0.1:$((48000+N))" -o json 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) if n["alive"]))' 2>/dev/null)
  want=$N; [ "$CELLS" -gt 0 ] && want=$(( N / CELLS ))
  [ "${c:-0}" -ge "$want" ] && break
  sleep 0.5
done
formed=$(( $(date +%s) - start ))
sleep "$SETTLE"
sample() { # sum of gossip bytes/messages counters over all agents, and total cpu ticks
  local b=0 m=0 a=0 i v
  for i in $(seq 1 "$N"); do
    v=$(curl -s "http://127.0.0.1:$((49000+i))/metrics" | awk '/^shoal_gossip_bytes_total/{b+=$2} /^shoal_gossip_messages_total/{m+=$2} /^shoal_api_bytes_total/{a+=$2} END{printf "%d %d %d", b, m, a}')
    read vb vm va <<<"$v"
    b=$((b + vb)); m=$((m + vm)); a=$((a + va))
  done
  local cpu=0 p
  for p in "${PIDS[@]}"; do cpu=$((cpu + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0))); done
  echo "$b $m $cpu $a"
}
read b0 m0 c0 a0 <<<"$(sample)"; t0=$(date +%s.%N)
sleep "$WINDOW"
read b1 m1 c1 a1 <<<"$(sample)"; t1=$(date +%s.%N)
rss=$(for p in "${PIDS[@]}"; do awk '/VmRSS/{print $2}' /proc/$p/status; done | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]/1024}')
python3 - "$N" "$formed" "$b0" "$b1" "$m0" "$m1" "$c0" "$c1" "$t0" "$t1" "$rss" "$a0" "$a1" <<'PY'
import json, sys, os
n, formed, b0, b1, m0, m1, c0, c1, t0, t1, rss, a0, a1 = sys.argv[1:]
n = int(n); dt = float(t1) - float(t0); hz = os.sysconf("SC_CLK_TCK")
print(json.dumps({"n": n, "formed_s": int(formed),
  "bytes_per_agent_per_s": round((int(b1) - int(b0)) / dt / n),
  "api_bytes_per_agent_per_s": round((int(a1) - int(a0)) / dt / n),
  "msgs_per_agent_per_s": round((int(m1) - int(m0)) / dt / n, 1),
  "cpu_pct_per_agent": round((int(c1) - int(c0)) / hz / dt / n * 100, 2),
  "rss_mb_median": float(rss)}))
PY
