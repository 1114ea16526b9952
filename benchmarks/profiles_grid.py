"""Benchmark: privacy-profile kernels vs dp_accounting's scalar equivalents.

1. δ(ε) of ONE Poisson-sampled Gaussian step (max over add/remove) over an
   N×N (ε, σ) grid: jaxdp.profiles.sampled_gaussian (one jitted call) vs
   dp_accounting.pld.privacy_loss_mechanism.GaussianPrivacyLoss(σ,
   sampling_prob=q, adjacency_type=REMOVE/ADD).get_delta_for_epsilon(ε),
   timed per call on a random sample of grid points and extrapolated.
2. Analytic-Gaussian calibration for M (ε, δ) targets:
   jaxdp.profiles.analytic_gaussian_sigma vs
   dp_accounting.gaussian_mechanism.get_sigma_gaussian (per call, sampled).

Usage: python benchmarks/profiles_grid.py [--quick]
Writes benchmarks/results/profiles_grid.json.
"""

import argparse
import platform
import time

import jax
import numpy as np

from jaxdp import profiles
from _common import median_time, write_result  # noqa: E402  (benchmarks/ is on sys.path)


def _time_jitted(fn, x, y, reps):
  """(fn(x, y) as NumPy, first call incl. compile s, median warm s), float64."""
  with jax.enable_x64(True):
    fn = jax.jit(fn)
    x, y = jax.device_put(x), jax.device_put(y)
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(x, y))
    compile_s = time.perf_counter() - t0
    run_s = median_time(lambda: fn(x, y), reps)
  return np.asarray(out), compile_s, run_s


def _row(task, points, compile_s, run_s, per_call, samples, rel, rel_points):
  """One result row: jaxdp's whole-grid time against dp_accounting's per-call time."""
  return {
      "task": task, "points": int(points), "jaxdp_compile_s": compile_s, "jaxdp_run_s": run_s,
      "dp_accounting_per_call_s": per_call, "dp_accounting_sampled_calls": samples,
      "dp_accounting_extrapolated_s": per_call * points,
      "speedup": per_call * points / run_s, "max_rel_diff": rel, "rel_diff_points": rel_points,
  }


def bench_sampled_gaussian(n, samples, q, reps, rng):
  from dp_accounting.pld import privacy_loss_mechanism as plm
  eps = np.logspace(-2, 1, n)
  sig = np.linspace(0.5, 20.0, n)
  ee, ss = np.meshgrid(eps, sig, indexing="ij")
  out, compile_s, run_s = _time_jitted(lambda e, s: profiles.sampled_gaussian(e, q, s), ee, ss,
                                       reps)
  idx = rng.choice(ee.size, size=samples, replace=False)
  t0 = time.perf_counter()
  ref = []
  for i in idx:
    e, s = ee.flat[i], ss.flat[i]
    rm = plm.GaussianPrivacyLoss(s, sampling_prob=q, adjacency_type=plm.AdjacencyType.REMOVE)
    ad = plm.GaussianPrivacyLoss(s, sampling_prob=q, adjacency_type=plm.AdjacencyType.ADD)
    ref.append(max(rm.get_delta_for_epsilon(e), ad.get_delta_for_epsilon(e)))
  per_call = (time.perf_counter() - t0) / samples
  ref = np.array(ref)
  ours = out.flat[idx]
  mask = ref > 1e-10  # dp_accounting works in linear space: ~1e-16 absolute
  rel = float(np.max(np.abs(ours[mask] / ref[mask] - 1))) if mask.any() else float("nan")
  return _row(f"sampled_gaussian delta, {n}x{n} (eps, sigma) grid, q={q}", ee.size, compile_s,
              run_s, per_call, samples, rel, int(mask.sum()))


def bench_analytic_gaussian(m, samples, reps, rng):
  from dp_accounting import gaussian_mechanism as gm
  side = int(round(np.sqrt(m)))
  eps = np.logspace(-2, 1, side)
  dels = np.logspace(-10, -3, side)
  ee, dd = np.meshgrid(eps, dels, indexing="ij")
  out, compile_s, run_s = _time_jitted(profiles.analytic_gaussian_sigma, ee, dd, reps)
  idx = rng.choice(ee.size, size=samples, replace=False)
  t0 = time.perf_counter()
  ref = np.array([gm.get_sigma_gaussian(ee.flat[i], dd.flat[i]) for i in idx])
  per_call = (time.perf_counter() - t0) / samples
  rel = float(np.max(np.abs(out.flat[idx] / ref - 1)))
  return _row(f"analytic Gaussian sigma, {ee.size} (eps, delta) targets", ee.size, compile_s,
              run_s, per_call, samples, rel, samples)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  if args.quick:
    rows = [bench_sampled_gaussian(200, 20, 0.01, 3, rng), bench_analytic_gaussian(2500, 20, 3, rng)]
  else:
    rows = [bench_sampled_gaussian(1000, 200, 0.01, 5, rng), bench_analytic_gaussian(10_000, 200, 5, rng)]
  print(f"{'task':58s} {'jaxdp run':>10s} {'compile':>8s} {'dp_acc/call':>12s} "
        f"{'dp_acc extrap':>13s} {'speedup':>9s} {'max rel diff':>12s}")
  for r in rows:
    print(f"{r['task']:58s} {r['jaxdp_run_s']:10.4f} {r['jaxdp_compile_s']:8.2f} "
          f"{r['dp_accounting_per_call_s']:12.2e} {r['dp_accounting_extrapolated_s']:13.1f} "
          f"{r['speedup']:9.0f}x {r['max_rel_diff']:12.2e}")
  result = {
      "benchmark": "profiles_grid", "quick": args.quick, "machine": platform.platform(),
      "processor": platform.processor(), "jax_version": jax.__version__,
      "device": str(jax.devices()[0]), "rows": rows,
  }
  write_result("profiles_grid", result)


if __name__ == "__main__":
  main()
