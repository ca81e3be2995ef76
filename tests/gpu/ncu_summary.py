#!/usr/bin/env python3
"""ncu_summary.py: sums Nsight Compute's gpu__time_duration per kernel name.

    ncu --csv --metrics gpu__time_duration.sum ... > ncu.csv
    tests/gpu/ncu_summary.py ncu.csv [STEPS [--from-marker KERNEL]]

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
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    body = [r for r in rows[head + 1:] if len(r) > val]
    if len(sys.argv) > 4 and sys.argv[3] == "--from-marker":
        marks = [i for i, r in enumerate(body) if re.sub(r"<.*", "", r[k]).split("(")[0].split(" ")[-1] == sys.argv[4]]
        body = body[marks[-steps]:] if len(marks) >= steps else body
    for r in body:
        name = re.sub(r"<.*", "", r[k]).split("(")[0]
        name += "<" + r[k].split("<", 1)[1].split(">")[0] + ">" if "k_gemv<" in r[k] else ""
        v = float(r[val].replace(",", "")) * SCALE.get(r[unit], 1.0)
        tot[name] += v
        cnt[name] += 1
    allt = sum(tot.values())
    print("%-40s %8s %12s %10s %6s" % ("kernel", "launches", "total us", "mean us", "share"))
    for n in sorted(tot, key=lambda x: -tot[x]):
        print("%-40s %8d %12.1f %10.2f %5.1f%%" % (n, cnt[n], tot[n], tot[n] / cnt[n], 100 * tot[n] / allt))
    print("all kernels: %.1f us%s" % (allt, " = %.1f us per step" % (allt / steps) if steps else ""))


main()
