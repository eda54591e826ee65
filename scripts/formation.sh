#!/usr/bin/env bash
# How long a mesh takes to form (issue 28): N real agents on loopback, all joined through agent 1
# (ports as scripts/rest-cost.sh, from BASE), then `shoal nodes` asked of the last one every half
# second until it holds N members alive. Prints the seconds and each answer as time:alive/listed
# (under load an answer can take 20 s, which bounds the resolution). KEEP=1 leaves the agents
# running (prints their directory) for a look.
# Usage: scripts/formation.sh SHOAL_BIN N BASE
set -u
BIN=$1; N=$2; BASE=$3
. "$(dirname "$0")/loopback-agents.sh"
start_agents "$BIN" "$N" "$BASE" "$((BASE + 1000))" "$((BASE + 2000))"
start=$(date +%s.%N); trace=""; t=0
for _ in $(seq 1 400); do
  c=$(SHOAL_PKI=$T/pki "$BIN" nodes --agent "127.0.0.1:$((BASE+1000+N))" -o json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for n in d if n["alive"]), len(d))' 2>/dev/null)
  t=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
  trace="$trace $t:${c// /\/}"
  [ "${c%% *}" -ge "$N" ] 2>/dev/null && break
  sleep 0.5
done
echo "$BIN: $N agents formed after $t s; alive/listed at the last agent:$trace"
if [ "${KEEP:-0}" = 1 ]; then echo "agents left running in $T"; sleep infinity; fi
