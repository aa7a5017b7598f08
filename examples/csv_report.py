#!/usr/bin/env python3
"""Example: let a sandbox crunch a CSV file.

1. Generates a CSV of sales on this machine (``--rows`` rows, reproducible with ``--seed``).
2. Creates a sandbox, uploads the CSV (streamed from the file object) and a Python script.
3. Runs the script in the sandbox: it summarizes the CSV per region and writes
   ``out/report.json``; its progress is printed as it runs.
4. Downloads the report and prints it.

Needs a running ``brig serve``:

    export BRIG_URL=http://127.0.0.1:7878
    export BRIG_API_KEY=$(sudo cat /var/lib/brig/api-key)   # wherever your state dir is
    python3 examples/csv_report.py --rows 5000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import tempfile
from typing import Dict, Iterator, List, Tuple

try:
    from brig import CommandExitError, Sandbox
except ImportError:  # run from a checkout without installing: use ../sdk/python/brig
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk",
                                    "python"))
    from brig import CommandExitError, Sandbox

REGIONS = ["north", "south", "east", "west"]
PRODUCTS = ["anvil", "bolt", "cog", "dynamo"]
FIELDS = ["date", "region", "product", "units", "unit_price"]

# The script that runs inside the sandbox (standard library only).
SUMMARIZE = r'''
import csv, json, os, sys

source, target = sys.argv[1], sys.argv[2]
regions = {}
rows = 0
with open(source, newline="") as f:
    for row in csv.DictReader(f):
        rows += 1
        units = int(row["units"])
        cents = units * round(float(row["unit_price"]) * 100)
        r = regions.setdefault(row["region"], {"rows": 0, "units": 0, "revenue_cents": 0,
                                               "products": {}})
        r["rows"] += 1
        r["units"] += units
        r["revenue_cents"] += cents
        r["products"][row["product"]] = r["products"].get(row["product"], 0) + units
        if rows % 1000 == 0:
            print(f"read {rows} rows", flush=True)
report = {
    "rows": rows,
    "total_units": sum(r["units"] for r in regions.values()),
    "total_revenue": round(sum(r["revenue_cents"] for r in regions.values()) / 100, 2),
    "regions": {
        name: {"rows": r["rows"], "units": r["units"],
               "revenue": round(r["revenue_cents"] / 100, 2),
               "top_product": max(sorted(r["products"]), key=r["products"].get)}
        for name, r in sorted(regions.items())
    },
}
os.makedirs(os.path.dirname(target), exist_ok=True)
with open(target, "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
print(f"summarized {rows} rows into {target}", flush=True)
'''


def generate_rows(rows: int, seed: int) -> Iterator[Tuple[str, str, str, int, str]]:
    """The CSV's data rows: (date, region, product, units, unit_price), reproducible."""
    rng = random.Random(seed)
    for i in range(rows):
        day = 1 + i % 28
        yield (f"2026-11-{day:02d}", rng.choice(REGIONS), rng.choice(PRODUCTS),
               rng.randint(1, 50), f"{rng.uniform(0.5, 99.5):.2f}")


def write_csv(path: str, rows: int, seed: int) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        writer.writerows(generate_rows(rows, seed))


def expected_report(rows: int, seed: int) -> Dict[str, object]:
    """What the sandbox should compute, computed here (for the tests)."""
    regions: Dict[str, Dict[str, int]] = {}
    totals: Dict[str, Dict[str, int]] = {}
    for _, region, product, units, price in generate_rows(rows, seed):
        r = totals.setdefault(region, {"rows": 0, "units": 0, "cents": 0})
        r["rows"] += 1
        r["units"] += units
        r["cents"] += units * round(float(price) * 100)
        products = regions.setdefault(region, {})
        products[product] = products.get(product, 0) + units
    report_regions: Dict[str, Dict[str, object]] = {}
    for name in sorted(totals):
        products = regions[name]
        report_regions[name] = {
            "rows": totals[name]["rows"], "units": totals[name]["units"],
            "revenue": round(totals[name]["cents"] / 100, 2),
            "top_product": max(sorted(products), key=lambda p: products[p])}
    return {"rows": rows,
            "total_units": sum(t["units"] for t in totals.values()),
            "total_revenue": round(sum(t["cents"] for t in totals.values()) / 100, 2),
            "regions": report_regions}


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000, help="rows of CSV to generate")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the data")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        local_csv = os.path.join(tmp, "sales.csv")
        write_csv(local_csv, args.rows, args.seed)
        print(f"generated {local_csv} ({os.path.getsize(local_csv)} bytes, {args.rows} rows)")

        # BRIG_URL and BRIG_API_KEY come from the environment. The sandbox is killed when the
        # block ends, even on an error.
        with Sandbox.create(timeout=600, metadata={"example": "csv_report"}) as sb:
            print(f"sandbox {sb.sandbox_id} is running")
            with open(local_csv, "rb") as f:
                entry = sb.files.write("data/sales.csv", f)  # streamed, in chunks
            print(f"uploaded {entry.path} ({entry.size} bytes)")
            sb.files.write("summarize.py", SUMMARIZE)

            try:
                sb.commands.run(["python3", "summarize.py", "data/sales.csv",
                                 "out/report.json"],
                                timeout=120,
                                on_stdout=lambda text: print("  [sandbox]", text, end=""),
                                on_stderr=lambda text: print("  [sandbox:err]", text, end="",
                                                             file=sys.stderr))
            except CommandExitError as e:
                print(f"the summary failed ({e.exit_code}):\n{e.stderr}", file=sys.stderr)
                return 1

            listing = sb.files.list("out")
            print("sandbox out/:", ", ".join(f"{e.name} ({e.size} B)" for e in listing))
            report = sb.files.read("out/report.json")

    print("== report.json ==")
    print(report)
    summary = json.loads(report)
    print("== by region ==")
    for name, region in summary["regions"].items():
        print(f"{name:>6}: {region['units']:>7} units  {region['revenue']:>12.2f}  "
              f"top: {region['top_product']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
