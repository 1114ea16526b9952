"""Benchmark: what the fast PLD kernel's round-off allowance costs in certified width and speed.

Runs ``jaxdp.pld.epsilon(..., return_bounds=True)`` on two batches and writes
each configuration's interval and the batch's warm time:

* ``bench``: the configurations of ``benchmarks/pld.py`` at δ = 1e-5 and 1e-12;
* ``broad``: q 1e-4–0.3, σ 0.5–10, T 10–10⁶ (log-uniform, fixed seed), each at
  δ = 1e-5, 1e-8 and 1e-12.

Run it on two commits (``--out`` to different files) and compare with
``--compare A.json B.json``: the change in relative width
``(up - lo) / up`` per configuration and the ratio of warm times.  The
general-engine fallback of :mod:`jaxdp._src.pld.fallback` is switched off here,
so the figures are the fast kernel's own.

  python benchmarks/pld_roundoff.py --out before.json
  python benchmarks/pld_roundoff.py --compare before.json after.json
"""

import argparse
import itertools
import json
import time

import numpy as np


def batches():
  qs = [256 / 60000, 0.001, 0.01, 0.02]
  bench = [(q, s, t, d) for q, s, t, d in
           itertools.product(qs, [0.8, 1.0, 1.1, 1.5], [1000, 5000], [1e-5, 1e-12])]
  rng = np.random.default_rng(35)
  n = 16
  q = 10 ** rng.uniform(-4, np.log10(0.3), n)
  s = 10 ** rng.uniform(np.log10(0.5), 1, n)
  t = np.round(10 ** rng.uniform(1, 6, n))
  broad = [(qq, ss, tt, d) for qq, ss, tt in zip(q, s, t) for d in (1e-5, 1e-8, 1e-12)]
  return {"bench": bench, "broad": broad}


def run(out):
  from jaxdp import pld
  from jaxdp._src.pld import fallback as _pld_fallback
  _pld_fallback.MAX_CONFIGURATIONS = 0
  res = {}
  for name, cfg in batches().items():
    q, s, t, d = (np.array(a) for a in zip(*cfg))
    pld.epsilon(q, s, t, d, return_bounds=True)   # warm-up (compiles)
    t0 = time.perf_counter()
    lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
    res[name] = {"configs": cfg, "lo": lo.tolist(), "up": up.tolist(),
                 "warm_s": time.perf_counter() - t0}
    print(name, f"warm {res[name]['warm_s']:.2f} s")
  with open(out, "w") as f:
    json.dump(res, f, indent=1)


def compare(a, b):
  ra, rb = (json.load(open(p)) for p in (a, b))
  for name in ra:
    la, ua, lb, ub = (np.array(r[name][k], float) for r in (ra, rb) for k in ("lo", "up"))
    np.seterr(invalid="ignore", divide="ignore")
    wa, wb = (ua - la) / ua, (ub - lb) / ub
    print(f"{name}: warm {ra[name]['warm_s']:.2f} s -> {rb[name]['warm_s']:.2f} s; "
          f"upper moved up in {np.sum(ub > ua)} / {len(ua)}, +inf {np.sum(np.isinf(ua))} -> "
          f"{np.sum(np.isinf(ub))}")
    # Both intervals are certified: they must overlap.
    bad = ~((lb <= ua) & (la <= ub))
    print(f"  intervals overlap in {len(ua) - np.sum(bad)} / {len(ua)}; "
          f"width > 1%: {np.sum(wa > 0.01)} -> {np.sum(wb > 0.01)}; "
          f"largest upper increase {np.nanmax(np.where(ua > 0, ub / ua - 1, np.nan)):.2e}, "
          f"largest decrease {np.nanmax(np.where(ub > 0, 1 - ub / ua, np.nan)):.2e}")
    for c, x, y, u0, u1 in zip(ra[name]["configs"], wa, wb, ua, ub):
      if not np.isclose(u0, u1, rtol=1e-9, atol=0):
        print(f"  q={c[0]:.3g} s={c[1]:.3g} T={c[2]:.0f} d={c[3]:.0e}: width {x:.2e} -> {y:.2e}"
              f"  up {u0:.6g} -> {u1:.6g}")


if __name__ == "__main__":
  p = argparse.ArgumentParser()
  p.add_argument("--out")
  p.add_argument("--compare", nargs=2)
  a = p.parse_args()
  if a.compare:
    compare(*a.compare)
  else:
    run(a.out)
