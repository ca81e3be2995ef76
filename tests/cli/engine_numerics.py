#!/usr/bin/env python3
# engine_numerics.py: compares mfc-eval's logits with llama-logits.mjs's
# log-probabilities (tests/cli/engine-numerics.bats).
#
#   engine_numerics.py MFC.json REF.json TOL [--gen N] [--base MFC0.json REF0.json]
#
# Both sides become log-softmax distributions (mfc's in double), so a
# constant shift of all logits is not a difference. The score is
# max_i |lp_mfc[i] - lp_ref[i]| / std(lp_ref): the worst logit error in
# units of the logits' spread. Fails (exit 1) when it exceeds TOL, when the
# top tokens differ, when the first N greedy tokens differ (--gen), or, with
# --base (the same pair run without an adapter), when the adapter's effect
# is under one std or mfc and llama.cpp disagree on it by more than TOL.
import json
import math
import sys


def logsoftmax(v):
    m = max(v)
    lse = m + math.log(sum(math.exp(x - m) for x in v))
    return [x - lse for x in v]


def load(mfc_path, ref_path):
    a, b = json.load(open(mfc_path)), json.load(open(ref_path))
    lp_a, lp_b = logsoftmax(a["logits"]), b["logprobs"]
    if len(lp_a) != len(lp_b):
        sys.exit(f"vocab sizes differ: {len(lp_a)} vs {len(lp_b)}")
    return a, b, lp_a, lp_b


def std(v):
    mean = sum(v) / len(v)
    return math.sqrt(sum((x - mean) ** 2 for x in v) / len(v))


def main():
    args = sys.argv[1:]
    mfc_path, ref_path, tol = args[0], args[1], float(args[2])
    a, b, lp_a, lp_b = load(mfc_path, ref_path)
    s = std(lp_b)
    err = max(abs(x - y) for x, y in zip(lp_a, lp_b)) / s
    top_a, top_b = lp_a.index(max(lp_a)), lp_b.index(max(lp_b))
    msg = f"max|dlogit|/std = {err:.3g} (tol {tol:g}), top {top_a}/{top_b}"
    ok = err <= tol and top_a == top_b
    if "--gen" in args:
        n = int(args[args.index("--gen") + 1])
        ga, gb = a["generated"][:n], b["generated"][:n]
        same = len(ga) == n and ga == gb
        first = next((i for i in range(min(len(ga), len(gb))) if ga[i] != gb[i]), None)
        msg += f", greedy {n}: " + ("identical" if same else f"differ at {first}")
        ok = ok and same
    if "--base" in args:
        i = args.index("--base")
        _, _, la0, lb0 = load(args[i + 1], args[i + 2])
        da = [x - y for x, y in zip(lp_a, la0)]
        db = [x - y for x, y in zip(lp_b, lb0)]
        effect = max(abs(x) for x in db) / s
        agree = max(abs(x - y) for x, y in zip(da, db)) / s
        msg += f", adapter effect {effect:.3g} std, effects differ by {agree:.3g}"
        ok = ok and effect >= 1.0 and agree <= tol
    print(("ok: " if ok else "FAIL: ") + msg)
    sys.exit(0 if ok else 1)


main()
