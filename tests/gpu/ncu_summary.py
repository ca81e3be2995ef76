#!/usr/bin/env python3
"""ncu_summary.py: sums Nsight Compute's gpu__time_duration per kernel name.

    ncu --csv --metrics gpu__time_duration.sum ... > ncu.csv
    tests/gpu/ncu_summary.py ncu.csv [STEPS]

Prints, per kernel (template arguments folded), the launches, total and
mean microseconds, and the share of all kernel time; with STEPS, the kernel
time per step too (to set against a step's wall time from cuda_bench).
"""
import csv
import re
import sys
from collections import defaultdict

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "s": 1e6, "second": 1e6}


def main():
    rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if r]
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    k, unit, val = cols.index("Kernel Name"), cols.index("Metric Unit"), cols.index("Metric Value")
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in rows[head + 1:]:
        if len(r) <= val:
            continue
        name = re.sub(r"<.*", "", r[k]).split("(")[0]
        name += "<" + r[k].split("<", 1)[1].split(">")[0] + ">" if "k_gemv<" in r[k] else ""
        v = float(r[val].replace(",", "")) * SCALE.get(r[unit], 1.0)
        tot[name] += v
        cnt[name] += 1
    allt = sum(tot.values())
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    print("%-40s %8s %12s %10s %6s" % ("kernel", "launches", "total us", "mean us", "share"))
    for n in sorted(tot, key=lambda x: -tot[x]):
        print("%-40s %8d %12.1f %10.2f %5.1f%%" % (n, cnt[n], tot[n], tot[n] / cnt[n], 100 * tot[n] / allt))
    print("all kernels: %.1f us%s" % (allt, " = %.1f us per step" % (allt / steps) if steps else ""))


main()
