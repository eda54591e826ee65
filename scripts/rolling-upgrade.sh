#!/usr/bin/env bash
# A real rolling upgrade: builds OLD_COMMIT (in a worktree with its own target dir) and this tree,
# starts 5 agents of the old build with a stateless HTTP service, an exclusive replica with a data
# volume and a container workload, then replaces each agent's binary one at a time (SIGTERM, new
# binary, same data dir), rolls one host back before the mesh version moves, lets it move, and
# applies a spec with a field only the new build knows. Prints one JSON object (stdout); the steps
# go to stderr. Not part of CI: it builds a second tree. See docs/operations.md "Upgrade".
#
#   scripts/rolling-upgrade.sh 71428bd            # about 4 min of builds cold, then ~2 min
#   SHOAL_KEEP=1 scripts/rolling-upgrade.sh 71428bd   # keep the work dir and its logs
#
# Environment: SHOAL_OLD_TREE (worktree, default /tmp/shoal-old-COMMIT), SHOAL_OLD_TARGET (its
# target dir, default SHOAL_OLD_TREE/target), SHOAL_WORK (the agents' dirs, default a temp dir).
# Needs docker (a local busybox image is imported from Debian's busybox-static), python3, root
# (the guard of exclusive replicas), and ports 7100-7199 on 127.0.0.1.
set -euo pipefail
OLD=${1:?usage: scripts/rolling-upgrade.sh OLD_COMMIT}
cd "$(dirname "$0")/.."
ROOT=$PWD
OLD_FULL=$(git rev-parse --verify "$OLD^{commit}")
OLD_TREE=${SHOAL_OLD_TREE:-/tmp/shoal-old-${OLD_FULL:0:7}}
OLD_TARGET=${SHOAL_OLD_TARGET:-$OLD_TREE/target}

log() { echo "== $*" >&2; }

if [ ! -e "$OLD_TREE/Cargo.toml" ]; then
  log "worktree of $OLD at $OLD_TREE"
  git worktree add --detach "$OLD_TREE" "$OLD_FULL" >&2
fi
log "building the old build ($OLD) in $OLD_TARGET"
(cd "$OLD_TREE" && CARGO_TARGET_DIR=$OLD_TARGET cargo build -q -p shoal --bin shoal >&2)
log "building this tree"
cargo build -q -p shoal --bin shoal >&2

if ! command -v busybox >/dev/null; then
  log "installing busybox-static (the container workload's image)"
  apt-get install -y -qq busybox-static >&2 || { apt-get update -qq && apt-get install -y -qq busybox-static >&2; }
fi

exec python3 "$ROOT/scripts/rolling_upgrade.py" \
  --old "$OLD_TARGET/debug/shoal" --new "$ROOT/target/debug/shoal" --old-commit "${OLD_FULL:0:7}"
