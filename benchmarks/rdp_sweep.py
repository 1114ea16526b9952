"""Benchmark: ε over (q, σ) grids — jaxdp vs dp_accounting's RdpAccountant.

Same process, same configurations, same orders (dp_accounting's defaults:
1.1…10.9 in steps of 0.1, 11…63, 128, 256, 512, 1024 — 156 orders, 90 of them
fractional). jaxdp evaluates the whole grid in one host-level call
(`jaxdp.epsilon`); compile time is reported separately and the timed runs are
the median of repetitions. dp_accounting composes and converts one
configuration at a time; on the full 100×100 grid it runs every
configuration, in --quick mode a random sample whose per-configuration time is
extrapolated (stated in the output).

Also reported: cost against grid size (10² … 10⁶ configurations in the full
run) and against the order set (dp_accounting's 156 orders, jaxdp's
DEFAULT_ORDERS, integer orders only), and the accuracy columns: max relative
difference to dp_accounting on integer orders (where both are exact) and on
the full default order set (where dp_accounting truncates its fractional-order
series, see the README).

  python benchmarks/rdp_sweep.py [--quick]

Writes benchmarks/results/rdp_sweep.json.
"""

import argparse
import os
import platform
import statistics
import time
import warnings

import jax
import numpy as np

import jaxdp
from _common import write_result  # noqa: E402  (benchmarks/ is on sys.path)

DELTA = 1e-5
STEPS = 1000


def dp_orders():
  from dp_accounting.rdp import rdp_privacy_accountant as dpr
  return np.array(dpr.DEFAULT_RDP_ORDERS, dtype=np.float64)


def grid(n):
  q = np.geomspace(1e-4, 0.1, n)
  s = np.linspace(0.6, 6.0, n)
  qq, ss = np.meshgrid(q, s, indexing="ij")
  return qq.ravel(), ss.ravel()


def time_jaxdp(q, s, orders, reps):
  t0 = time.perf_counter()
  out = jaxdp.epsilon(q, s, STEPS, DELTA, orders=orders)
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    out = jaxdp.epsilon(q, s, STEPS, DELTA, orders=orders)
    times.append(time.perf_counter() - t0)
  run = statistics.median(times)
  return out, run, max(first - run, 0.0)


def dp_accounting_eps(q, s, orders):
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as dpr
  out = np.empty(len(q))
  t0 = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for i, (qi, si) in enumerate(zip(q, s)):
      acc = dpr.RdpAccountant(orders)
      acc.compose(dp_accounting.PoissonSampledDpEvent(qi, dp_accounting.GaussianDpEvent(si)), STEPS)
      out[i] = acc.get_epsilon(DELTA)
  return out, (time.perf_counter() - t0) / len(q)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="smaller grids, sampled anchor")
  args = ap.parse_args()
  import logging
  logging.getLogger("absl").setLevel(logging.ERROR)

  orders = dp_orders()
  int_orders = orders[orders == np.floor(orders)]
  n = 100
  q, s = grid(n)
  reps = 3

  print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}")
  ours, run, compile_s = time_jaxdp(q, s, orders, reps)
  rng = np.random.default_rng(0)
  sample = rng.choice(q.size, size=200 if args.quick else q.size, replace=False)
  theirs, per_cfg = dp_accounting_eps(q[sample], s[sample], orders)
  ratio = per_cfg * q.size / run
  finite = np.isfinite(theirs) & np.isfinite(ours[sample])
  rel_all = np.abs(ours[sample][finite] / theirs[finite] - 1)
  not_above = bool(np.all(ours[sample][finite] <= theirs[finite] * (1 + 1e-9)))

  # Integer orders: both exact → accuracy column.
  ours_int, run_int, compile_int = time_jaxdp(q, s, int_orders, reps)
  sub = sample[:100]
  theirs_int, per_cfg_int = dp_accounting_eps(q[sub], s[sub], int_orders)
  rel_int = np.abs(ours_int[sub] / theirs_int - 1)

  rows = [
      ("dp_accounting default orders (156)", q.size, run, compile_s, per_cfg, ratio, rel_all.max()),
      ("integer orders only (66)", q.size, run_int, compile_int, per_cfg_int,
       per_cfg_int * q.size / run_int, rel_int.max()),
  ]
  # jaxdp's own default orders (no anchor with these orders: accuracy n/a).
  _, run_def, compile_def = time_jaxdp(q, s, None, reps)
  rows.append((f"jaxdp default ({len(jaxdp.rdp.DEFAULT_ORDERS)} + golden)", q.size, run_def, compile_def, per_cfg,
               per_cfg * q.size / run_def, float("nan")))

  print(f"\nε over a {n}×{n} (q, σ) grid, T={STEPS}, δ={DELTA}; dp_accounting timed on "
        f"{len(sample)} configurations ({per_cfg * 1e3:.1f} ms each)")
  hdr = f"{'orders':38s} {'configs':>8s} {'jaxdp s':>9s} {'compile s':>10s} {'cfg/s':>10s} {'ratio':>8s} {'max rel diff':>13s}"
  print(hdr)
  for name, nc, r, c, pc, rt, rel in rows:
    print(f"{name:38s} {nc:8d} {r:9.3f} {c:10.1f} {nc / r:10.0f} {rt:7.0f}× {rel:13.2e}")
  print(f"jaxdp never above dp_accounting on default orders: {not_above}")

  # Scaling with grid size: integer orders up to 10⁶ configurations (full
  # run), the 156 default orders up to 10⁴ (fractional orders dominate).
  sizes = [10, 32, 100] + ([] if args.quick else [316, 1000])
  scaling = []
  print(f"\n{'configs':>9s} {'int orders s':>13s} {'dp orders s':>12s}")
  for m in sizes:
    qm, sm = grid(m)
    _, r_int, _ = time_jaxdp(qm, sm, int_orders, 1)
    r_full = time_jaxdp(qm, sm, orders, 1)[1] if m <= 100 else float("nan")
    scaling.append({"configs": qm.size, "int_orders_s": r_int, "dp_orders_s": r_full})
    print(f"{qm.size:9d} {r_int:13.3f} {r_full:12.3f}")

  result = {
      "benchmark": "rdp_sweep",
      "quick": args.quick,
      "machine": {"platform": platform.platform(), "processor": platform.processor(),
                  "cpu_count": os.cpu_count()},
      "jax_version": jax.__version__,
      "device": str(jax.devices()[0]),
      "grid": f"{n}x{n}", "steps": STEPS, "delta": DELTA,
      "anchor_sampled_configs": int(len(sample)),
      "rows": [dict(zip(["orders", "configs", "jaxdp_s", "compile_s", "anchor_s_per_cfg",
                         "speed_ratio", "max_rel_diff"], row)) for row in rows],
      "jaxdp_never_above_anchor": not_above,
      "scaling": scaling,
  }
  write_result("rdp_sweep", result)


if __name__ == "__main__":
  main()
