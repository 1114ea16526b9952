"""Benchmark: heterogeneous PLD composition, jaxdp vs dp_accounting, same run.

Workload (issue 14): 32 configurations, each the add/remove composition of

    Poisson-sampled Gaussian (q_i, σ_i) × T_i,  Laplace(b=20) × 10,  discrete Gaussian(σ=30) × 5

(q 1e-3..0.05, σ 0.8..2, T 100..5000, δ = 1e-5; fixed seed).  jaxdp answers the
whole batch in one call, :func:`jaxdp.pld_accountant.epsilon_batch` (the
batched FFT kernel, with the Laplace and discrete Gaussian phases discretised on
each configuration's grid), with its certified interval, at the default
rtol = 1e-3 and at rtol = 3e-3.  dp_accounting composes its PLD objects per
configuration (``from_gaussian_mechanism`` with ``sampling_prob``,
``from_laplace_mechanism``, ``from_discrete_gaussian_mechanism``) at
value_discretization_interval 1e-4, its default; that run is timed.  Its
accuracy at that interval is the gap between its pessimistic ε and its
optimistic estimate (``pessimistic_estimate=False``, computed untimed, full
run only), to compare with jaxdp's certified width.

  python benchmarks/pld_heterogeneous.py [--quick]

Writes benchmarks/results/pld_heterogeneous.json.
"""

import argparse
import math
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


def dp_accounting_eps(q, s, t, h=1e-4, pessimistic=True):
  import logging
  from dp_accounting.pld import privacy_loss_distribution as dp_pld
  logging.getLogger().setLevel(logging.ERROR)   # its optimistic side warns about connect-the-dots
  kw = dict(value_discretization_interval=h, pessimistic_estimate=pessimistic)
  g = dp_pld.from_gaussian_mechanism(s, sampling_prob=q, **kw)
  lap = dp_pld.from_laplace_mechanism(LAPLACE_B, **kw)
  dg = dp_pld.from_discrete_gaussian_mechanism(DGAUSS_SIGMA, **kw)
  composed = g.self_compose(t).compose(lap.self_compose(LAPLACE_COUNT)).compose(
      dg.self_compose(DGAUSS_COUNT))
  return composed.get_epsilon_for_delta(DELTA)


def time_jaxdp(batch, rtol, reps):
  t0 = time.perf_counter()
  pld_accountant.epsilon_batch(batch, DELTA, rtol=rtol)
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    lo, up = pld_accountant.epsilon_batch(batch, DELTA, rtol=rtol, return_bounds=True)
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times), lo, up


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true", help="8 configurations, 1 repetition")
  args = parser.parse_args()
  cfg = configs(8 if args.quick else 32)
  batch = [phases(*c) for c in cfg]
  reps = 1 if args.quick else 5

  runs = {rtol: time_jaxdp(batch, rtol, reps) for rtol in (1e-3, 3e-3)}
  t0 = time.perf_counter()
  dpa = [dp_accounting_eps(*c) for c in cfg]
  t_dpa = time.perf_counter() - t0
  dpa_opt = [math.nan] * len(cfg) if args.quick else [dp_accounting_eps(*c, pessimistic=False)
                                                     for c in cfg]
  dpa_gap = [(p - o) / p for p, o in zip(dpa, dpa_opt)]

  lo, up = runs[1e-3][2:]
  print(f"{'q':>8} {'sigma':>5} {'T':>5} {'jaxdp lower':>11} {'jaxdp upper':>11} "
        f"{'rel width':>9} {'dp_acc':>9} {'upper/dpa-1':>11} {'dpa gap':>8}")
  rows = []
  for (q, s, t), l, u, d, o in zip(cfg, lo, up, dpa, dpa_opt):
    rows.append(dict(q=q, sigma=s, steps=t, jaxdp_lower=float(l), jaxdp_upper=float(u),
                     dp_accounting=float(d), dp_accounting_optimistic=float(o)))
    print(f"{q:8.5f} {s:5.2f} {t:5d} {l:11.5f} {u:11.5f} {(u - l) / u:9.2e} {d:9.5f} "
          f"{u / d - 1:+11.2e} {(d - o) / d:8.2e}")
  out = dict(benchmark="pld_heterogeneous", quick=args.quick, **_common.environment(),
             n_configs=len(cfg), dp_accounting_s=t_dpa,
             dp_accounting_ms_per_config=t_dpa / len(cfg) * 1e3,
             dp_accounting_gap_median=statistics.median(dpa_gap),
             dp_accounting_gap_min=min(dpa_gap))
  print(f"\n{len(cfg)} configurations; dp_accounting {t_dpa:.2f} s "
        f"({t_dpa / len(cfg) * 1e3:.0f} ms/config); its pessimistic - optimistic gap at h = 1e-4: "
        f"median {statistics.median(dpa_gap):.2e}, min {min(dpa_gap):.2e}")
  for rtol, (first, t_jax, lo, up) in runs.items():
    rel = [abs(u / d - 1) for u, d in zip(up, dpa)]
    width = [(u - l) / u for l, u in zip(lo, up)]
    key = f"rtol_{rtol:g}"
    out.update({f"{key}.jaxdp_first_s": first, f"{key}.jaxdp_warm_s": t_jax,
                f"{key}.jaxdp_ms_per_config": t_jax / len(cfg) * 1e3,
                f"{key}.speed_ratio_vs_dp_accounting": t_dpa / t_jax,
                f"{key}.max_rel_diff_dp_accounting": max(rel),
                f"{key}.median_rel_width": statistics.median(width),
                f"{key}.max_rel_width": max(width)})
    print(f"jaxdp rtol={rtol:g}: first call {first:.2f} s, warm {t_jax:.3f} s "
          f"({t_jax / len(cfg) * 1e3:.1f} ms/config) -> {t_dpa / t_jax:.1f}x dp_accounting; "
          f"max |upper/dp_accounting - 1| {max(rel):.2e}; certified width median "
          f"{statistics.median(width):.2e}, max {max(width):.2e}")
  out["rows"] = rows
  _common.write_result("pld_heterogeneous", out)


if __name__ == "__main__":
  main()
