# Sourced by scripts that measure N real agents on loopback in one cell, no workloads
# (gossip-split.sh, mesh-climb.sh): `start_agents SHOAL_BIN N` makes a PKI in a fresh temporary
# directory $T and starts agents g1..gN (gossip 46000+i, API 45000+i, metrics 44000+i), 50 ms
# apart, their pids in PIDS; they are killed and $T removed on exit. `start_agents SHOAL_BIN N
# GOSSIP API METRICS` puts them on other port bases (two builds side by side).
# Env: SEEDS=K: agent i > K joins through agent (i-1)%K+1 (default 1: every agent through agent
# 1; at 200 agents on 2 cores one seed cannot finish the handshakes of all, and the last ones
# never join).
T=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
export SHOAL_SELF_ISSUE=true

start_agents() {
  local shoal=$1 n=$2 k=${SEEDS:-1} i seed
  local gossip=${3:-46000} api=${4:-45000} metrics=${5:-44000}
  "$shoal" pki init --dir "$T/pki" >/dev/null 2>&1 || { echo "pki init failed" >&2; exit 1; }
  for i in $(seq 1 "$n"); do
    seed=()
    if [ "$i" -gt "$k" ]; then seed=(--seed "127.0.0.1:$((gossip + (i - 1) % k + 1))")
    elif [ "$i" != 1 ]; then seed=(--seed "127.0.0.1:$((gossip + 1))"); fi
    mkdir -p "$T/d$i"
    "$shoal" agent --name "g$i" --gossip "127.0.0.1:$((gossip+i))" --api "127.0.0.1:$((api+i))" \
      --metrics "127.0.0.1:$((metrics+i))" --data-dir "$T/d$i" --pki "$T/pki" --cpu 4 --memory 8Gi \
      "${seed[@]}" >"$T/a$i.log" 2>&1 &
    PIDS+=($!)
    sleep 0.05
  done
}
