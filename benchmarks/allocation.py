"""Balls-in-bins (random allocation) under the PLD accountant (issue 38).

Measures, for the MNIST-like run (N = 60000, B = 256: k = 234 steps per epoch,
σ = 1.1, 60 epochs = 14040 steps, δ = 1e-5):

* the certified interval [lower, upper] of ε and its relative width at each
  grid step η given (``--eta``), with the time of each (one process, cold
  laws, NumPy);
* the references: Poisson sampling's tight ε at q = B/N (jaxdp's PLD
  accountant) and the sampler's certified RDP ε;
* the warm time per configuration of a batch of configurations
  (``--batch``, σ in [0.8, 2], 10-60 epochs) at the automatic grid.

Usage: ``python benchmarks/allocation.py [--eta 1e-3 5e-4] [--batch 32] [--dp-accounting] [--out FILE]``.
The numbers of a run go to stdout as JSON lines (and to ``--out``).

Measured 2026-11-27 on the shared 2-core CPU (other jobs running), convex-order laws:

    eta    lower    upper    width   seconds
    8e-3   2.3263   2.3471   0.88%   0.8
    4e-3   2.3367   2.3418   0.22%   2.3   (automatic)
    2e-3   2.3391   2.3408   0.07%   5.1
    references: Poisson sampling's tight ε 2.3800 (jaxdp PLD; dp_accounting's PLD 2.3796 in
    0.53 s), balls-in-bins certified RDP 2.5486. Batch of 8 configurations (σ in [0.8, 2],
    10-60 epochs): 2.2 s per configuration, every upper end below Poisson's tight ε.
    First-order laws (jaxdp._src.mechanisms.allocation, losses rounded up/down): at eta
    1e-3, [2.011, 2.657] in 3 s; the width is about epochs·(2·log2 k + 3)·eta.
"""

from __future__ import annotations

import argparse
import json
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


def batch(n, out):
  rng = np.random.default_rng(0)
  sig = rng.uniform(0.8, 2.0, n)
  steps = rng.integers(10, 61, n) * (N // B)
  s = sampling.balls_in_bins(N, B, N)
  jaxdp.pld.epsilon(s, sig[:1], steps[:1], DELTA)      # warm-up
  t = time.perf_counter()
  up = jaxdp.pld.epsilon(s, sig, steps, np.full(n, DELTA))
  sec = time.perf_counter() - t
  _emit(dict(kind="batch", configurations=n, eta=af._AUTO_ETA, seconds=sec,  # pylint: disable=protected-access
             seconds_per_configuration=sec / n, upper_median=float(np.median(up))), out)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--eta", type=float, nargs="*", default=[2e-3, 1e-3])
  ap.add_argument("--batch", type=int, default=0)
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
    batch(a.batch, a.out)


if __name__ == "__main__":
  main()
