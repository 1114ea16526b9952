"""Balls-in-bins (random allocation) under the PLD accountant (issue 38).

Measures, for the MNIST-like run (N = 60000, B = 256: k = 234 steps per epoch,
σ = 1.1, 60 epochs = 14040 steps, δ = 1e-5):

* the certified interval [lower, upper] of ε and its relative width at each
  grid step η given (``--eta``), with the time of each (one process, cold
  laws, NumPy);
* the references: Poisson sampling's tight ε at q = B/N (jaxdp's PLD
  accountant) and the sampler's certified RDP ε;
* the warm time per configuration of a batch of mixed configurations
  (``--batch``, ``--repeats``: σ in [0.8, 2], k in [50, 500] log-uniform,
  1-60 epochs, every other one with a partial epoch; one
  ``jaxdp.pld.epsilon(return_bounds=True)`` call each), the median over the
  repeats, next to dp_accounting's Poisson PLD (q = 1/k, grid 1e-4) on the
  same configurations (``--dp-accounting``), with the load average.

Usage: ``python benchmarks/allocation.py [--eta 1e-3 5e-4] [--batch 32] [--repeats 3] [--dp-accounting] [--out FILE]``.
The numbers of a run go to stdout as JSON lines (and to ``--out``). To time an
older checkout, run this script from outside the repository with
``PYTHONPATH=<checkout>``.

Measured 2026-11-27 on the shared 2-core CPU (load average 2.5-3.5: other
jobs running), convex-order laws, before (commit 2f68632) and after issue
38's speed work (one spread chain, convolution-run spreads, blocked S-space
merges, the upper side composed on η, the lower grid from the upper ε):

    eta    lower    upper    width   seconds (before: interval, seconds)
    8e-3   2.3263   2.3458   0.83%   0.40    ([2.3263, 2.3471], 0.8)
    4e-3   2.3367   2.3418   0.22%   0.65-0.75 ([2.3367, 2.3418], 2.3)  (automatic)
    2e-3   2.3386   2.3408   0.10%   1.4     ([2.3391, 2.3408], 5.1)
    references: Poisson sampling's tight ε 2.3800 (jaxdp PLD; dp_accounting's PLD 2.3796 in
    0.54 s), balls-in-bins certified RDP 2.5486.

    batch of 32 (seed 0)        before        after       dp_accounting Poisson PLD
    seconds per configuration   2.48 (2 runs)  0.715 (3)   0.44 (3)
    relative width, median/max  0.13%/0.36%   0.17%/0.37%
    after / dp_accounting: 1.63x; every upper end below Poisson's tight ε at q = 1/k.

    First-order laws (jaxdp._src.mechanisms.allocation, losses rounded up/down): at eta
    1e-3, [2.011, 2.657] in 3 s; the width is about epochs·(2·log2 k + 3)·eta.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import jaxdp
from jaxdp import sampling
from jaxdp._src.accounting import allocation_forward as af

N, B, SIGMA, STEPS, DELTA = 60000, 256, 1.1, 14040, 1e-5


def _emit(rec, out):
  line = json.dumps(rec)
  print(line, flush=True)
  if out:
    with open(out, "a", encoding="utf-8") as f:
      f.write(line + "\n")


def references(out):
  s = sampling.balls_in_bins(N, B, N)
  t = time.perf_counter()
  poisson = float(jaxdp.epsilon(B / N, SIGMA, STEPS, DELTA, accountant="pld"))
  rdp = float(jaxdp.epsilon(s, SIGMA, STEPS, DELTA))
  _emit(dict(kind="references", poisson_pld=poisson, balls_in_bins_rdp=rdp,
             seconds=time.perf_counter() - t), out)


def dp_accounting_poisson(out):
  """dp_accounting's PLD accountant, Poisson sampling at q = B/N (same machine)."""
  from dp_accounting import dp_event  # pylint: disable=g-import-not-at-top
  from dp_accounting.pld import pld_privacy_accountant  # pylint: disable=g-import-not-at-top
  t = time.perf_counter()
  acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dp_event.PoissonSampledDpEvent(B / N, dp_event.GaussianDpEvent(SIGMA)), STEPS)
  eps = float(acc.get_epsilon(DELTA))
  _emit(dict(kind="dp_accounting_poisson_pld", epsilon=eps, value_discretization_interval=1e-4,
             seconds=time.perf_counter() - t), out)


def interval_at(eta, out):
  k = N // B
  t = time.perf_counter()
  lo, up = af.interval("epsilon", SIGMA, k, STEPS, np.array([DELTA]), eta)
  sec = time.perf_counter() - t
  lo, up = float(lo[0]), float(up[0])
  _emit(dict(kind="mnist_interval", eta=eta, k=k, lower=lo, upper=up,
             width=up - lo, relative_width=(up - lo) / up, seconds=sec), out)


def mixed_configs(n, seed=0):
  """``n`` configurations: σ in [0.8, 2], k in [50, 500] (log-uniform), 1-60
  epochs, every other one ending with a partial epoch; N = k·B + r, B = 100."""
  rng = np.random.default_rng(seed)
  sig = rng.uniform(0.8, 2.0, n)
  k = np.round(np.exp(rng.uniform(np.log(50), np.log(500), n))).astype(int)
  epochs = rng.integers(1, 61, n)
  steps = epochs * k + np.where(np.arange(n) % 2 == 1, k // 3, 0)
  return [(float(s_), int(k_), int(t_)) for s_, k_, t_ in zip(sig, k, steps)]


def _dp_accounting_poisson_eps(sigma, k, steps, delta=DELTA):
  from dp_accounting import dp_event  # pylint: disable=g-import-not-at-top
  from dp_accounting.pld import pld_privacy_accountant  # pylint: disable=g-import-not-at-top
  acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dp_event.PoissonSampledDpEvent(1.0 / k, dp_event.GaussianDpEvent(sigma)), steps)
  return float(acc.get_epsilon(delta))


def batch(n, out, repeats=1, dp_accounting=False):
  """Warm time per configuration of ``n`` mixed configurations (one
  ``jaxdp.pld.epsilon(return_bounds=True)`` call each, automatic grid), the
  median over ``repeats`` runs; with ``dp_accounting``, its Poisson PLD
  (q = 1/k, value_discretization_interval 1e-4) on the same configurations
  and machine, and the ratio of the two."""
  cfgs = mixed_configs(n)
  jaxdp.pld.epsilon(sampling.balls_in_bins(100 * 50, 100, 100 * 50), 1.0, 60, DELTA)   # warm-up
  times, ups, widths, poisson = [], [], [], []
  for _ in range(repeats):
    t = time.perf_counter()
    for sig, k, steps in cfgs:
      s = sampling.balls_in_bins(100 * k + 7, 100, 100 * k + 7)
      lo, up = jaxdp.pld.epsilon(s, sig, steps, DELTA, return_bounds=True)
      ups.append(float(up))
      widths.append((float(up) - float(lo)) / float(up))
    times.append(time.perf_counter() - t)
  rec = dict(kind="batch", configurations=n, repeats=repeats,
             seconds_median=float(np.median(times)), seconds=times,
             seconds_per_configuration=float(np.median(times)) / n,
             relative_width_max=float(np.max(widths)), relative_width_median=float(np.median(widths)))
  if dp_accounting:
    dtimes = []
    for _ in range(repeats):
      t = time.perf_counter()
      poisson = [_dp_accounting_poisson_eps(sig, k, steps) for sig, k, steps in cfgs]
      dtimes.append(time.perf_counter() - t)
    rec.update(dp_accounting_poisson_seconds_median=float(np.median(dtimes)),
               dp_accounting_poisson_seconds=dtimes,
               ratio_jaxdp_to_dp_accounting=float(np.median(times)) / float(np.median(dtimes)),
               upper_below_poisson=int(np.sum(np.array(ups[:n]) <= np.array(poisson))))
  rec["load_average"] = list(os.getloadavg())
  _emit(rec, out)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--eta", type=float, nargs="*", default=[2e-3, 1e-3])
  ap.add_argument("--batch", type=int, default=0)
  ap.add_argument("--repeats", type=int, default=1)
  ap.add_argument("--no-references", action="store_true")
  ap.add_argument("--dp-accounting", action="store_true")
  ap.add_argument("--out", default="")
  a = ap.parse_args()
  if not a.no_references:
    references(a.out)
  if a.dp_accounting:
    dp_accounting_poisson(a.out)
  for eta in a.eta:
    interval_at(eta, a.out)
  if a.batch:
    batch(a.batch, a.out, a.repeats, a.dp_accounting)


if __name__ == "__main__":
  main()
