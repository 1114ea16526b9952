"""Benchmark: heterogeneous PLD composition, jaxdp vs dp_accounting, same run.

Workload (issue 14): 32 configurations, each the add/remove composition of

    Poisson-sampled Gaussian (q_i, σ_i) × T_i,  Laplace(b=20) × 10,  discrete Gaussian(σ=30) × 5

(q 1e-3..0.05, σ 0.8..2, T 100..5000, δ = 1e-5; fixed seed).  jaxdp answers the
whole batch in one call, :func:`jaxdp.pld_accountant.epsilon_batch`, with its
certified interval; dp_accounting composes its PLD objects per configuration
(``from_gaussian_mechanism`` with ``sampling_prob``, ``from_laplace_mechanism``,
``from_discrete_gaussian_mechanism``; its PLD accountant has no discrete
Gaussian event) at value_discretization_interval 1e-4, its default.

  python benchmarks/pld_heterogeneous.py [--quick]

Writes benchmarks/results/pld_heterogeneous.json.
"""

import argparse
import statistics
import time

import numpy as np

from jaxdp import events
from jaxdp import pld_accountant

import _common

LAPLACE_B, LAPLACE_COUNT = 20.0, 10
DGAUSS_SIGMA, DGAUSS_COUNT = 30.0, 5
DELTA = 1e-5


def configs(n, seed=14):
  rng = np.random.default_rng(seed)
  q = np.exp(rng.uniform(np.log(1e-3), np.log(0.05), n))
  s = rng.uniform(0.8, 2.0, n)
  t = np.floor(np.exp(rng.uniform(np.log(100), np.log(5000), n))).astype(int)
  return list(zip(q.tolist(), s.tolist(), t.tolist()))


def phases(q, s, t):
  return [(events.SampledGaussian(q, s), t), (events.Laplace(LAPLACE_B), LAPLACE_COUNT),
          (events.DiscreteGaussian(DGAUSS_SIGMA), DGAUSS_COUNT)]


def dp_accounting_eps(q, s, t, h=1e-4):
  from dp_accounting.pld import privacy_loss_distribution as dp_pld
  g = dp_pld.from_gaussian_mechanism(s, sampling_prob=q, value_discretization_interval=h)
  lap = dp_pld.from_laplace_mechanism(LAPLACE_B, value_discretization_interval=h)
  dg = dp_pld.from_discrete_gaussian_mechanism(DGAUSS_SIGMA, value_discretization_interval=h)
  composed = g.self_compose(t).compose(lap.self_compose(LAPLACE_COUNT)).compose(
      dg.self_compose(DGAUSS_COUNT))
  return composed.get_epsilon_for_delta(DELTA)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true", help="8 configurations, 1 repetition")
  args = parser.parse_args()
  cfg = configs(8 if args.quick else 32)
  batch = [phases(*c) for c in cfg]
  reps = 1 if args.quick else 3

  t0 = time.perf_counter()
  lo, up = pld_accountant.epsilon_batch(batch, DELTA, return_bounds=True)
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    lo, up = pld_accountant.epsilon_batch(batch, DELTA, return_bounds=True)
    times.append(time.perf_counter() - t0)
  t_jax = statistics.median(times)

  t0 = time.perf_counter()
  dpa = [dp_accounting_eps(*c) for c in cfg]
  t_dpa = time.perf_counter() - t0

  print(f"{'q':>8} {'sigma':>5} {'T':>5} {'jaxdp lower':>11} {'jaxdp upper':>11} "
        f"{'rel width':>9} {'dp_acc':>9} {'upper/dpa-1':>11}")
  rows = []
  for (q, s, t), l, u, d in zip(cfg, lo, up, dpa):
    rows.append(dict(q=q, sigma=s, steps=t, jaxdp_lower=float(l), jaxdp_upper=float(u),
                     dp_accounting=float(d)))
    print(f"{q:8.5f} {s:5.2f} {t:5d} {l:11.5f} {u:11.5f} {(u - l) / u:9.2e} {d:9.5f} "
          f"{u / d - 1:+11.2e}")
  rel = [abs(r["jaxdp_upper"] / r["dp_accounting"] - 1) for r in rows]
  width = [(r["jaxdp_upper"] - r["jaxdp_lower"]) / r["jaxdp_upper"] for r in rows]
  ratio = t_dpa / t_jax
  print(f"\n{len(cfg)} configurations; jaxdp first call {first:.2f} s, warm {t_jax:.2f} s "
        f"({t_jax / len(cfg) * 1e3:.0f} ms/config); dp_accounting {t_dpa:.2f} s "
        f"({t_dpa / len(cfg) * 1e3:.0f} ms/config) -> speed ratio {ratio:.2f}x")
  print(f"max |upper/dp_accounting - 1| {max(rel):.2e}; median relative certified width "
        f"{statistics.median(width):.2e}, max {max(width):.2e}")
  _common.write_result("pld_heterogeneous", dict(
      benchmark="pld_heterogeneous", quick=args.quick, **_common.environment(),
      n_configs=len(cfg), jaxdp_first_s=first, jaxdp_warm_s=t_jax, dp_accounting_s=t_dpa,
      speed_ratio_vs_dp_accounting=ratio, max_rel_diff_dp_accounting=max(rel),
      median_rel_width=statistics.median(width), rows=rows))


if __name__ == "__main__":
  main()
