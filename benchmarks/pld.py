"""Benchmark: jaxdp.pld (batched FFT PLD) vs dp_accounting's PLD accountant and prv_accountant.

Same process, same DP-SGD configurations (Poisson-sampled Gaussian, T steps,
target δ).  jaxdp runs the whole batch in one call (compile time reported
separately, then the median of repetitions); the anchors run per configuration.

  python benchmarks/pld.py [--quick]

Also: 4 new mixed configurations after one warm-up (issue 15) and the broad
batch of issue 37 (32 configurations, q 1e-4–0.3, σ 0.5–10, T 10–1e5; the
public ``jaxdp.epsilon(accountant="pld")``, alternated with dp_accounting on 8
of them; the median ratio).

Writes benchmarks/results/pld.json.
"""

import argparse
import itertools
import json
import os
import platform
import statistics
import time
import warnings

import jax
import numpy as np

import jaxdp
from jaxdp import pld


def configs(quick):
  qs = [256 / 60000, 0.001, 0.01, 0.02]
  sigmas = [0.8, 1.0, 1.1, 1.5]
  steps = [1000, 5000]
  out = [(q, s, t, 1e-5) for q, s, t in itertools.product(qs, sigmas, steps)]
  return out[::4] if quick else out


def time_jaxdp(cfg, reps):
  q, s, t, d = map(np.array, zip(*cfg))
  t0 = time.perf_counter()
  lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
    times.append(time.perf_counter() - t0)
  return lo, up, first, statistics.median(times)


def dp_accounting_eps(q, s, t, d):
  import dp_accounting
  from dp_accounting.pld import pld_privacy_accountant
  acc = pld_privacy_accountant.PLDAccountant()
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), int(t))
  return acc.get_epsilon(d)


def prv_eps(q, s, t, d):
  from prv_accountant import Accountant
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    acc = Accountant(noise_multiplier=s, sampling_probability=q, delta=d,
                     max_compositions=int(t), eps_error=0.01)
    return acc.compute_epsilon(num_compositions=int(t))


# Issue 15: a person asking about a few new configurations after one warm-up.
WARM_UP = (256 / 60000, 1.1, 2000, 1e-5)
NEW_CONFIGS = [(0.003, 0.9, 3000, 1e-5), (0.02, 1.3, 800, 1e-6), (0.001, 2.0, 10000, 1e-5),
               (0.05, 0.7, 300, 1e-5)]


def new_configs_figures():
  """Time ``pld.epsilon`` on 4 new mixed configurations after a warm-up on one
  other, in this fresh process (compilation of new shapes included), against
  dp_accounting on the same 4."""
  pld.epsilon(*map(np.array, zip(WARM_UP)))
  q, s, t, d = map(np.array, zip(*NEW_CONFIGS))
  t0 = time.perf_counter()
  up = pld.epsilon(q, s, t, d)
  t_jax = time.perf_counter() - t0
  t0 = time.perf_counter()
  ref = [dp_accounting_eps(*c) for c in NEW_CONFIGS]
  t_dpa = time.perf_counter() - t0
  rel = float(np.max(np.abs(np.asarray(up) / np.asarray(ref) - 1)))
  print(f"4 new configurations after one warm-up: jaxdp {t_jax:.3f} s, dp_accounting {t_dpa:.3f} s "
        f"-> {t_dpa / t_jax:.1f}x (max rel diff {rel:.1e})")
  return dict(jaxdp_s=t_jax, dp_accounting_s=t_dpa, speed_ratio=t_dpa / t_jax, max_rel_diff=rel)


# Issue 37: a broader batch than configs() (q 1e-4–0.3 log-uniform, σ 0.5–10,
# T 10–1e5 log-uniform; seed 0, as benchmarks/pld_memory.py draws it).
BROAD_N, BROAD_ANCHOR = 32, 8


def broad_configs(n=BROAD_N, seed=0):
  rng = np.random.default_rng(seed)
  q = 10 ** rng.uniform(-4, np.log10(0.3), n)
  s = rng.uniform(0.5, 10, n)
  t = np.round(10 ** rng.uniform(1, 5, n))
  return q, s, t, np.full(n, 1e-5)


def broad_figures(runs):
  """Tight ε on the broad batch: jaxdp's warm batch of 32 against
  dp_accounting on 8 of the same configurations (every 4th), alternated
  ``runs`` times; the ratio of each run (per configuration) and their median."""
  q, s, t, d = broad_configs()
  jaxdp.epsilon(q, s, t, d, accountant="pld")   # compile / warm-up
  sample = np.arange(0, BROAD_N, BROAD_N // BROAD_ANCHOR)
  ratios, t_jax_runs, t_dpa_runs = [], [], []
  for _ in range(runs):
    t0 = time.perf_counter()
    up = jaxdp.epsilon(q, s, t, d, accountant="pld")
    t_jax = (time.perf_counter() - t0) / BROAD_N
    t0 = time.perf_counter()
    ref = np.array([dp_accounting_eps(q[i], s[i], t[i], d[i]) for i in sample])
    t_dpa = (time.perf_counter() - t0) / sample.size
    ratios.append(t_dpa / t_jax)
    t_jax_runs.append(t_jax)
    t_dpa_runs.append(t_dpa)
  rel = float(np.max(np.abs(np.asarray(up)[sample] / ref - 1)))
  fig = dict(n=BROAD_N, n_anchor=int(sample.size), runs=runs,
             jaxdp_per_config_s=t_jax_runs, dp_accounting_per_config_s=t_dpa_runs,
             speed_ratios=ratios, speed_ratio_median=statistics.median(ratios),
             max_rel_diff_dp_accounting=rel,
             jaxdp_above_dp_accounting=int(np.sum(np.asarray(up)[sample] > ref)))
  print(f"broad batch of {BROAD_N} (q 1e-4-0.3, sigma 0.5-10, T 10-1e5): jaxdp "
        f"{statistics.median(t_jax_runs) * 1e3:.1f} ms/config, dp_accounting "
        f"{statistics.median(t_dpa_runs) * 1e3:.0f} ms/config ({sample.size} of them); ratios "
        + ", ".join(f"{r:.0f}x" for r in ratios) + f" -> median {fig['speed_ratio_median']:.0f}x; "
        f"max rel diff {rel:.1e}")
  return fig


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  cfg = configs(args.quick)
  reps = 3 if args.quick else 5

  new = new_configs_figures()   # first: nothing else compiled yet
  lo, up, first, t_jax = time_jaxdp(cfg, reps)
  broad = broad_figures(3 if args.quick else 5)

  rows = []
  t_dpa = 0.0
  t_prv = 0.0
  prv_every = 2 if args.quick else 4  # prv_accountant is slow: a subset
  for i, (q, s, t, d) in enumerate(cfg):
    t0 = time.perf_counter()
    e_dpa = dp_accounting_eps(q, s, t, d)
    t_dpa += time.perf_counter() - t0
    row = dict(q=q, sigma=s, steps=t, delta=d, jaxdp_lower=float(lo[i]),
               jaxdp_upper=float(up[i]), dp_accounting=e_dpa)
    if i % prv_every == 0:
      t0 = time.perf_counter()
      pl, pe, pu = prv_eps(q, s, t, d)
      t_prv_i = time.perf_counter() - t0
      t_prv += t_prv_i
      row.update(prv_lower=pl, prv=pe, prv_upper=pu, prv_time=t_prv_i)
    rows.append(row)
  n_prv = sum("prv" in r for r in rows)

  print(f"{'q':>9} {'sigma':>5} {'T':>6} {'jaxdp eps':>10} {'cert.wid':>8} {'dp_acc':>9} "
        f"{'rel diff':>9} {'prv':>8} {'prv width':>9} {'in':>3}")
  for r in rows:
    rel = r["jaxdp_upper"] / r["dp_accounting"] - 1
    width = r["jaxdp_upper"] - r["jaxdp_lower"]
    prv_s = (f"{r['prv']:8.4f} {r['prv_upper'] - r['prv_lower']:9.4f} "
             f"{'y' if r['jaxdp_lower'] <= r['prv'] <= r['jaxdp_upper'] else 'N':>3}"
             if "prv" in r else f"{'':8} {'':9} {'':3}")
    print(f"{r['q']:9.5f} {r['sigma']:5.2f} {r['steps']:6d} {r['jaxdp_upper']:10.5f} "
          f"{width:8.5f} {r['dp_accounting']:9.5f} {rel:+9.2e} {prv_s}")
  rel = [abs(r["jaxdp_upper"] / r["dp_accounting"] - 1) for r in rows]
  rel_width = [(r["jaxdp_upper"] - r["jaxdp_lower"]) / r["jaxdp_upper"] for r in rows]
  per_cfg_jax = t_jax / len(cfg)
  per_cfg_dpa = t_dpa / len(cfg)
  per_cfg_prv = t_prv / max(n_prv, 1)
  print(f"\n{len(cfg)} configurations")
  print(f"jaxdp: compile+first {first:.2f} s, warm batch {t_jax:.3f} s "
        f"({per_cfg_jax * 1e3:.1f} ms/config)")
  print(f"dp_accounting PLD: {per_cfg_dpa * 1e3:.1f} ms/config  -> speed ratio {per_cfg_dpa / per_cfg_jax:.1f}x")
  print(f"prv_accountant: {per_cfg_prv * 1e3:.1f} ms/config ({n_prv} configs) "
        f"-> speed ratio {per_cfg_prv / per_cfg_jax:.1f}x")
  print(f"max |rel diff| to dp_accounting: {max(rel):.2e};  median rel. certified interval width "
        f"{statistics.median(rel_width):.2e}")

  result = dict(
      benchmark="pld", quick=args.quick, machine=platform.node(), platform=platform.platform(),
      processor=platform.processor(), cpu_count=os.cpu_count(), jax_version=jax.__version__,
      device=str(jax.devices()[0]), n_configs=len(cfg),
      jaxdp_compile_and_first_s=first, jaxdp_warm_batch_s=t_jax,
      dp_accounting_per_config_s=per_cfg_dpa, prv_per_config_s=per_cfg_prv,
      speed_ratio_vs_dp_accounting=per_cfg_dpa / per_cfg_jax,
      speed_ratio_vs_prv=per_cfg_prv / per_cfg_jax,
      max_rel_diff_dp_accounting=max(rel), new_configs_after_warm_up=new, broad_batch=broad,
      rows=rows)
  os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
  with open(os.path.join(os.path.dirname(__file__), "results", "pld.json"), "w") as f:
    json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
