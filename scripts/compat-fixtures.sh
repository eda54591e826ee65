#!/usr/bin/env bash
# Records the compatibility fixtures agent/tests/compat.rs reads, produced by the build that
# writes them:
#
#   scripts/compat-fixtures.sh 71428bd 7     # an older build: agent/tests/compat/wire-7/ and layout-7/
#   scripts/compat-fixtures.sh HEAD 8        # this tree: agent/tests/compat/wire-8/
#
# For a commit other than HEAD it builds that commit in a worktree with its own target dir
# (SHOAL_OLD_TREE, SHOAL_OLD_TARGET as scripts/rolling-upgrade.sh) after copying
# agent/examples/compat_record.rs into it. With the old build it also makes a data dir: 3 agents
# on 127.0.0.1:7200-7231, specs applied, one scaled (a history entry), one deleted (a tombstone),
# an exclusive replica with a data volume (a data record), then n1's desired-state store copied
# to layout-VERSION/ with expect.json, what the test checks in it. Needs root (the guard).
set -euo pipefail
COMMIT=${1:?usage: scripts/compat-fixtures.sh COMMIT WIRE_VERSION}
VERSION=${2:?usage: scripts/compat-fixtures.sh COMMIT WIRE_VERSION}
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/agent/tests/compat
log() { echo "== $*" >&2; }

if [ "$COMMIT" = HEAD ]; then
  cargo run -q -p shoal --example compat_record -- "$OUT/wire-$VERSION"
  exit 0
fi
FULL=$(git rev-parse --verify "$COMMIT^{commit}")
TREE=${SHOAL_OLD_TREE:-/tmp/shoal-old-${FULL:0:7}}
TARGET=${SHOAL_OLD_TARGET:-$TREE/target}
[ -e "$TREE/Cargo.toml" ] || git worktree add --detach "$TREE" "$FULL" >&2
cp "$ROOT/agent/examples/compat_record.rs" "$TREE/agent/examples/compat_record.rs"
log "recording frames with $COMMIT"
(cd "$TREE" && CARGO_TARGET_DIR=$TARGET cargo run -q -p shoal --example compat_record -- "$OUT/wire-$VERSION")
(cd "$TREE" && CARGO_TARGET_DIR=$TARGET cargo build -q -p shoal --bin shoal)
OLD=$TARGET/debug/shoal

log "a data dir of $COMMIT"
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; pkill -f "$WORK" 2>/dev/null; pkill -f "sleep 8641" 2>/dev/null; rm -rf "$WORK"' EXIT
$OLD pki init --dir "$WORK/pki" >/dev/null
export SHOAL_AGENT=127.0.0.1:7201 SHOAL_PKI=$WORK/pki SHOAL_SELF_ISSUE=true
for i in 0 1 2; do
  seed=""; [ $i -gt 0 ] && seed="--seed 127.0.0.1:7200"
  $OLD agent --name n$((i+1)) --gossip 127.0.0.1:$((7200+i*10)) --api 127.0.0.1:$((7201+i*10)) \
    --data-dir "$WORK/d$((i+1))" --pki "$WORK/pki" --self-issue $seed >"$WORK/n$((i+1)).log" 2>&1 &
done
sleep 4
cat >"$WORK/keep.toml" <<'TOML'
name = "keep"
replicas = 2
[process]
command = ["sleep", "86411"]
[resources]
cpu = "100m"
memory = "16Mi"
TOML
cat >"$WORK/db.toml" <<'TOML'
name = "db"
replicas = 1
[process]
command = ["sleep", "86412"]
[resources]
cpu = "100m"
memory = "16Mi"
[placement]
exclusive = true
[[volumes]]
name = "data"
TOML
sed 's/^name = "keep"/name = "gone"/; s/86411/86413/' "$WORK/keep.toml" >"$WORK/gone.toml"
for f in keep db gone; do $OLD apply -f "$WORK/$f.toml" >&2; done
$OLD scale keep 3 >&2
for _ in $(seq 60); do
  $OLD status db -o json 2>/dev/null | grep -q '"phase": "running"' && break
  sleep 1
done
$OLD delete gone >&2
sleep 3
for i in 1 2 3; do kill -TERM %$i; done
wait
mkdir -p "$OUT/layout-$VERSION"
cp "$WORK/d1/desired.redb" "$OUT/layout-$VERSION/desired.redb"
cat >"$OUT/layout-$VERSION/expect.json" <<JSON
{ "commit": "${FULL:0:7}", "live": ["db", "keep"], "tombstoned": ["gone"],
  "history": ["shoal:history:keep"], "data_records": ["shoal:data:db/0"],
  "replicas": { "db": 1, "keep": 3 } }
JSON
ls -la "$OUT/layout-$VERSION" "$OUT/wire-$VERSION" >&2
