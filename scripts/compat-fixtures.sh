#!/usr/bin/env bash
# Records the compatibility fixtures agent/tests/compat.rs reads, produced by the build that
# writes them:
#
#   scripts/compat-fixtures.sh 71428bd 7     # an older build: wire-7/, placement-6.json, layout-7/
#   scripts/compat-fixtures.sh HEAD 8        # this tree (working copy): wire-8/ only
#
# The second argument is the wire version the build speaks (its newest); the data dir is named
# after it too, which matches the store layout for 71428bd (layout 7); check the commit's
# store_db/codec.rs SCHEMA when recording another.
#
# For a commit other than HEAD it builds that commit in a worktree with its own target dir
# (SHOAL_OLD_TREE, SHOAL_OLD_TARGET as scripts/rolling-upgrade.sh), with the commit's own
# agent/examples/compat_record.rs or, for a build without one, the copy frozen for such builds
# (agent/tests/compat/recorder/compat_record.rs). It records frames and spec payloads, the
# build's placement of a seeded input (placement-A.json, A its placement algorithm), then makes
# a data dir: 3 agents on 127.0.0.1 (ports from COMPAT_PORT_BASE, default 7200, to +21), specs
# applied and running, one changed twice (2 history entries), one deleted (a tombstone), an
# exclusive replica with a data volume (a data record); the agents stopped with SIGTERM, n1's
# desired-state store is copied to layout-VERSION/ with expect.json (what the test checks) and
# the final spec source of every live workload (NAME.toml). Needs root (the guard).
set -euo pipefail
COMMIT=${1:?usage: scripts/compat-fixtures.sh COMMIT WIRE_VERSION}
VERSION=${2:?usage: scripts/compat-fixtures.sh COMMIT WIRE_VERSION}
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/agent/tests/compat
RECORDER=agent/examples/compat_record.rs
log() { echo "== $*" >&2; }

if [ "$COMMIT" = HEAD ]; then
  nice -n 10 cargo run -q -p shoal --example compat_record -- "$OUT/wire-$VERSION"
  exit 0
fi
FULL=$(git rev-parse --verify "$COMMIT^{commit}")
TREE=${SHOAL_OLD_TREE:-/tmp/shoal-old-${FULL:0:7}}
TARGET=${SHOAL_OLD_TARGET:-$TREE/target}
[ -e "$TREE/Cargo.toml" ] || git worktree add --detach "$TREE" "$FULL" >&2
if ! git cat-file -e "$FULL:$RECORDER" 2>/dev/null; then
  cp "$OUT/recorder/compat_record.rs" "$TREE/$RECORDER"
fi
log "recording frames and placement with $COMMIT"
(cd "$TREE" && CARGO_TARGET_DIR=$TARGET nice -n 10 cargo run -q -p shoal --example compat_record \
  -- "$OUT/wire-$VERSION" "$OUT")
(cd "$TREE" && CARGO_TARGET_DIR=$TARGET nice -n 10 cargo build -q -p shoal --bins)
OLD=$TARGET/debug/shoal

log "a data dir of $COMMIT"
WORK=$(mktemp -d)
AGENTS=()
# What this script started, by pid: the agents, then anything left running in the work dir
# (instances run in their replica's directory, log relays name it).
cleanup() {
  for pid in "${AGENTS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for proc in /proc/[0-9]*; do
    if [[ "$(readlink "$proc/cwd" 2>/dev/null)" == "$WORK"* ]] ||
      { tr '\0' ' ' <"$proc/cmdline"; } 2>/dev/null | grep -qF "$WORK"; then
      kill "${proc#/proc/}" 2>/dev/null || true
    fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
BASE=${COMPAT_PORT_BASE:-7200}
$OLD pki init --dir "$WORK/pki" >/dev/null
export SHOAL_AGENT=127.0.0.1:$((BASE + 1)) SHOAL_PKI=$WORK/pki SHOAL_SELF_ISSUE=true
for i in 0 1 2; do
  seed=()
  [ $i -gt 0 ] && seed=(--seed "127.0.0.1:$BASE")
  $OLD agent --name n$((i + 1)) --gossip 127.0.0.1:$((BASE + i * 10)) \
    --api 127.0.0.1:$((BASE + 1 + i * 10)) --data-dir "$WORK/d$((i + 1))" --pki "$WORK/pki" \
    --self-issue "${seed[@]}" >"$WORK/n$((i + 1)).log" 2>&1 &
  AGENTS+=($!)
done
sleep 4

spec() { # NAME REPLICAS SECONDS [EXTRA]
  printf 'name = "%s"\nreplicas = %s\n[process]\ncommand = ["sleep", "%s"]\n%b[resources]\ncpu = "100m"\nmemory = "16Mi"\n' \
    "$1" "$2" "$3" "${4:-}"
}
spec keep 2 86411 >"$WORK/keep.toml"
spec keep 2 86411 'env = { MODE = "b" }\n' >"$WORK/keep-b.toml"
spec keep 3 86411 'env = { MODE = "b" }\n' >"$WORK/keep-final.toml"
spec gone 1 86413 >"$WORK/gone.toml"
{
  spec db 1 86412
  printf '[placement]\nexclusive = true\n[[volumes]]\nname = "data"\n'
} >"$WORK/db.toml"

running() { # NAME COUNT: COUNT replicas of NAME running
  local n
  n=$($OLD status "$1" -o json 2>/dev/null | grep -c '"phase": "running"' || true)
  [ "$n" -ge "$2" ]
}
wait_running() {
  for _ in $(seq 90); do
    running "$1" "$2" && return 0
    sleep 1
  done
  echo "$1: not $2 running after 90 s" >&2
  $OLD status "$1" >&2 || true
  exit 1
}
for f in keep db gone; do $OLD apply -f "$WORK/$f.toml" >&2; done
wait_running keep 2
wait_running db 1
$OLD apply -f "$WORK/keep-b.toml" >&2
$OLD scale keep 3 >&2
$OLD delete gone >&2
wait_running keep 3
sleep 3
for pid in "${AGENTS[@]}"; do kill -TERM "$pid"; done
for pid in "${AGENTS[@]}"; do wait "$pid" || true; done

DIR=$OUT/layout-$VERSION
mkdir -p "$DIR"
cp "$WORK/d1/desired.redb" "$DIR/desired.redb"
cp "$WORK/keep-final.toml" "$DIR/keep.toml"
cp "$WORK/db.toml" "$DIR/db.toml"
cat >"$DIR/expect.json" <<JSON
{ "commit": "${FULL:0:7}", "live": ["db", "keep"], "tombstoned": ["gone"],
  "history": { "shoal:history:keep": 2 }, "data_records": ["shoal:data:db/0"] }
JSON
ls -la "$DIR" "$OUT/wire-$VERSION" "$OUT"/placement-*.json >&2
