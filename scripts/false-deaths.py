#!/usr/bin/env python3
"""Reruns the swarm seeds whose report counted false verdicts and says, for each, how long after
the last fault's end it came: the method behind docs/measurements.md's false-death tables.

    scripts/swarm.py --seeds 1..1001 -j 2 --out /tmp/sw
    scripts/false-deaths.py /tmp/sw/results.jsonl --bin target/release/shoal-sim --out /tmp/fd

Each seed is run again with `--out DIR` (a seed replays exactly); its trace's `FALSE VERDICT`
lines are matched with the last line before each that ended a fault (`end of ...`, `heal`, or
`... resumed`, `resume node=`) and with the faults the seed's header scheduled. Prints one line per false
verdict: seed, time, the verdict, the gap since the last fault ended, and that fault.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess

LINE = re.compile(r"^\s*(\d+\.\d+)s (.*)$")
ENDS = ("end of ", "heal:", " resumed", "resume node=")


def rerun(binary, seed, out):
    subprocess.run(
        [binary, "swarm", "--seed", str(seed), "--out", out],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    path = os.path.join(out, f"swarm-seed{seed}.trace.txt")
    if not os.path.exists(path):
        names = [n for n in os.listdir(out) if n.endswith(f"seed{seed}.trace.txt")]
        if not names:
            return seed, [f"seed {seed}: no trace written"]
        path = os.path.join(out, names[0])
    rows = []
    last_end = None
    with open(path) as f:
        for raw in f:
            m = LINE.match(raw)
            if not m:
                continue
            t, text = float(m.group(1)), m.group(2)
            if any(e in text for e in ENDS):
                last_end = (t, text)
            if text.startswith("FALSE VERDICT"):
                if last_end:
                    gap = f"+{t - last_end[0]:.3f}s after '{last_end[1][:70]}'"
                else:
                    gap = "no fault ended before"
                rows.append(f"seed {seed} {t:.3f}s {text[15:75]} | {gap}")
    return seed, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", help="results.jsonl written by scripts/swarm.py --out")
    ap.add_argument("--bin", default="target/release/shoal-sim")
    ap.add_argument("--out", default="/tmp/false-deaths")
    ap.add_argument("-j", type=int, default=2)
    args = ap.parse_args()
    seeds = []
    with open(args.results) as f:
        for line in f:
            r = json.loads(line)
            if r.get("false_member_deaths", 0) + r.get("false_cell_downs", 0):
                seeds.append(r["seed"])
    os.makedirs(args.out, exist_ok=True)
    with concurrent.futures.ProcessPoolExecutor(args.j) as pool:
        done = [
            pool.submit(rerun, args.bin, s, args.out) for s in seeds
        ]
        results = sorted(f.result() for f in done)
    total = 0
    for _, rows in results:
        for row in rows:
            total += 1
            print(row)
    print(f"{total} false verdicts in {len(seeds)} seeds")


if __name__ == "__main__":
    main()
