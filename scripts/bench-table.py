#!/usr/bin/env python3
"""Prints criterion results (target/criterion) as throughput tables.

    python3 scripts/bench-table.py counter_add window_add_at

For each group: one row per implementation, one column per thread count,
in M ops/s of the whole shared instance (criterion's mean), then the ratio
of every row to the first row named with --base (default: the group's
first implementation in alphabetical order).
"""
import json
import os
import sys

root = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
args = sys.argv[1:]
base = None
if "--base" in args:
    i = args.index("--base")
    base = args[i + 1]
    del args[i : i + 2]

for group in args:
    gdir = os.path.join(root, group)
    rows = {}
    for impl in sorted(os.listdir(gdir)):
        idir = os.path.join(gdir, impl)
        if impl == "report" or not os.path.isdir(idir):
            continue
        for param in os.listdir(idir):
            est = os.path.join(idir, param, "new", "estimates.json")
            bench = os.path.join(idir, param, "new", "benchmark.json")
            if not os.path.exists(est):
                continue
            with open(est) as f:
                mean_ns = json.load(f)["mean"]["point_estimate"]
            with open(bench) as f:
                name = json.load(f)["function_id"] or impl
            try:
                key = int(param)
            except ValueError:
                key = param
            rows.setdefault(name, {})[key] = 1e3 / mean_ns  # M ops/s
    cols = sorted({k for r in rows.values() for k in r}, key=str)
    cols = sorted(cols, key=lambda c: (isinstance(c, str), c))
    print(f"\n{group} (M ops/s)")
    print("| implementation | " + " | ".join(str(c) for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r.get(c, float('nan')):.1f}" for c in cols) + " |")
    b = base if base in rows else None
    if b:
        print(f"\nratio to {b}")
        print("| implementation | " + " | ".join(str(c) for c in cols) + " |")
        print("|---|" + "---|" * len(cols))
        for name, r in rows.items():
            print(
                f"| {name} | "
                + " | ".join(
                    f"{r[c] / rows[b][c]:.2f}" if c in r and c in rows[b] else "-" for c in cols
                )
                + " |"
            )
