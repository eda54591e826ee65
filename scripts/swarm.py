#!/usr/bin/env python3
"""Swarm testing: runs `shoal-sim swarm --seed N --json` for many seeds in parallel processes
and summarizes pass/fail by failure kind, with the replay command of every failing seed.

    scripts/swarm.py --seeds 1..1001 -j 2
    scripts/swarm.py --seeds 1..201 -j 2 --out /tmp/swarm

Each seed runs in its own process (one simulation per process keeps it replayable). A seed's
class is the sorted list of its report's `failure_kinds`; every kind is a failure (an exclusive
duplicate always is, whatever fault was in force when it began: the report names it as
context). Exit status: 0 when every seed passed, 1 otherwise.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import time


def parse_range(text):
    a, _, b = text.partition("..")
    a, b = int(a), int(b)
    if a >= b:
        sys.exit(f"--seeds {text}: the range is empty (A..B, B excluded)")
    return range(a, b)


def run_seed(binary, seed, timeout_s):
    cmd = [binary, "swarm", "--seed", str(seed), "--json"]
    start = time.monotonic()
    try:
        out = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return {"seed": seed, "kinds": ["timeout"], "wall_s": timeout_s}
    wall = time.monotonic() - start
    lines = out.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = out.stderr.strip().splitlines()[-3:]
        return {
            "seed": seed,
            "kinds": [f"no-report (exit {out.returncode})"],
            "detail": " | ".join(tail),
            "wall_s": wall,
        }
    kinds = report.get("failure_kinds", [])
    if not report.get("passed") and not kinds:
        kinds = ["failed (no kind)"]
    detail = []
    for v in report.get("violations", []):
        detail.append(f"{v['kind']}: {v['detail']}" + (f" (began during the {v['during']})" if v.get("during") else ""))
    for e in report.get("event_failures", []):
        detail.append(f"event {e['event']}: {e['why']}")
    live = report.get("liveness") or {}
    if live and not live.get("passed"):
        detail.append("liveness: " + "; ".join(live.get("gaps", [])))
    detail.extend(report.get("assertion_failures", []))
    return {
        "seed": seed,
        "kinds": kinds,
        "detail": " | ".join(detail),
        "wall_s": wall,
        "trace_hash": report.get("trace_hash"),
        "liveness_after_ms": live.get("converged_after_ms"),
        "false_member_deaths": report.get("false_member_deaths", 0),
        "false_cell_downs": report.get("false_cell_downs", 0),
        "slow_faults": report.get("starve_cycles", 0) > 0
        or any(" slow-link " in line for line in report.get("schedule", [])),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1..101", help="A..B, B excluded (default 1..101)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="parallel processes")
    ap.add_argument("--bin", default="target/release/shoal-sim", help="the shoal-sim binary")
    ap.add_argument("--timeout", type=float, default=300.0, help="wall seconds per seed")
    ap.add_argument("--out", help="directory for results.jsonl (one line per seed)")
    args = ap.parse_args()
    seeds = parse_range(args.seeds)
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin}: not an executable (cargo build --release -p shoal-sim)")
    results = []
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_seed, args.bin, s, args.timeout) for s in seeds]
        for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
            r = f.result()
            results.append(r)
            status = "ok" if not r["kinds"] else "FAILED " + ",".join(r["kinds"])
            print(f"[{done}/{len(seeds)}] seed {r['seed']}: {status} ({r['wall_s']:.1f} s)", file=sys.stderr)
    results.sort(key=lambda r: r["seed"])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.jsonl"), "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    summarize(results, args, time.monotonic() - started)
    return 1 if any(r["kinds"] for r in results) else 0


def summarize(results, args, wall):
    passed = [r for r in results if not r["kinds"]]
    by_class = collections.defaultdict(list)
    by_kind = collections.Counter()
    for r in results:
        if r["kinds"]:
            by_class["+".join(r["kinds"])].append(r)
            by_kind.update(r["kinds"])
    walls = sorted(r["wall_s"] for r in results)
    print(f"\nswarm: {len(results)} seeds ({args.seeds}, -j {args.jobs}) in {wall:.0f} s wall; "
          f"per seed p50 {walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s")
    print(f"  passed: {len(passed)}")
    print(f"  failed: {len(results) - len(passed)}")
    # Counted, not failed on (docs/sim.md, "False verdicts"): the detector of today makes some.
    fm = sum(r.get("false_member_deaths", 0) for r in results)
    fc = sum(r.get("false_cell_downs", 0) for r in results)
    with_fv = [r for r in results if r.get("false_member_deaths", 0) + r.get("false_cell_downs", 0)]
    slow = [r for r in results if r.get("slow_faults")]
    slow_fv = sum(r.get("false_member_deaths", 0) + r.get("false_cell_downs", 0) for r in slow)
    print(f"  false verdicts (counted, not failed on): {fm} member deaths, {fc} cell downs, "
          f"in {len(with_fv)} seeds; {len(slow)} seeds with a starve or slow-link made {slow_fv}")
    print("  seeds per failure kind (a seed may have several):")
    for kind, n in by_kind.most_common():
        print(f"    {kind}: {n}")
    for cls, rs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
        print(f"\n  {cls}: {len(rs)} seeds: {' '.join(str(r['seed']) for r in rs)}")
        for r in rs[:5]:
            print(f"    shoal-sim swarm --seed {r['seed']}")
            if r.get("detail"):
                print(f"      {r['detail'][:300]}")


if __name__ == "__main__":
    sys.exit(main())
