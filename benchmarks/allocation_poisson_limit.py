"""Balls-in-bins against Poisson sampling as k grows (issue 38's note figure).

At a fixed noise multiplier σ and a fixed number of epochs E (E·k steps), a
balls-in-bins sampler with k steps per epoch (each example in exactly one
step per epoch) is compared with Poisson sampling at the same expected batch
fraction q = 1/k over the same E·k steps. Printed per k = 2, 4, ..., 1024:
balls-in-bins' certified interval [lower, upper] of ε at δ
(``jaxdp.pld.epsilon(..., return_bounds=True)``, automatic grid), Poisson's
tight ε (``jaxdp.epsilon(q, σ, steps, δ, accountant="pld")``), their ratio,
and the seconds of the balls-in-bins call. No assertion: the answer should
approach Poisson's as k grows (Feldman & Shenfeld 2026), which the table
shows or not.

Measured 2026-11-27 (shared 2-core CPU, load ~3), σ = 1, 10 epochs, δ = 1e-5:

         k     lower     upper  Poisson q=1/k  upper/Poisson  seconds
         2   13.3498   13.3513        15.1234         0.8828     0.55
         4    9.6906    9.6969        11.2838         0.8594     0.35
         8    6.8629    6.8674         7.9495         0.8639     0.34
        16    4.7598    4.7636         5.4182         0.8792     0.33
        32    3.2498    3.2519         3.6192         0.8985     0.57
        64    2.1951    2.1966         2.3916         0.9184     0.45
       128    1.4758    1.4776         1.5766         0.9372     0.38
       256    0.9945    0.9959         1.0442         0.9537     0.77
       512    0.6727    0.6744         0.6974         0.9670     0.44
      1024    0.4574    0.4588         0.4695         0.9772     0.54

Balls-in-bins is below Poisson at every k here and the ratio tends to 1.

Usage: ``python benchmarks/allocation_poisson_limit.py [--sigma 1.0] [--epochs 10]
[--delta 1e-5] [--kmax 1024] [--out FILE]`` (JSON lines to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import time

import jaxdp
from jaxdp import sampling


def row(k, sigma, epochs, delta):
  """The table's row for k steps per epoch (a dict)."""
  steps = epochs * k
  s = sampling.balls_in_bins(100 * k, 100, 100 * k)
  t = time.perf_counter()
  lo, up = jaxdp.pld.epsilon(s, sigma, steps, delta, return_bounds=True)
  sec = time.perf_counter() - t
  poisson = float(jaxdp.epsilon(1.0 / k, sigma, steps, delta, accountant="pld"))
  lo, up = float(lo), float(up)
  return dict(k=k, steps=steps, lower=lo, upper=up, poisson=poisson,
              upper_over_poisson=up / poisson, lower_over_poisson=lo / poisson, seconds=sec)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--sigma", type=float, default=1.0)
  ap.add_argument("--epochs", type=int, default=10)
  ap.add_argument("--delta", type=float, default=1e-5)
  ap.add_argument("--kmax", type=int, default=1024)
  ap.add_argument("--out", default="")
  a = ap.parse_args()
  print(f"sigma = {a.sigma}, {a.epochs} epochs (steps = epochs * k), delta = {a.delta}")
  print(f"{'k':>6} {'lower':>9} {'upper':>9} {'Poisson q=1/k':>14} {'upper/Poisson':>14} {'seconds':>8}")
  k = 2
  while k <= a.kmax:
    r = row(k, a.sigma, a.epochs, a.delta)
    print(f"{k:>6} {r['lower']:>9.4f} {r['upper']:>9.4f} {r['poisson']:>14.4f} "
          f"{r['upper_over_poisson']:>14.4f} {r['seconds']:>8.2f}", flush=True)
    if a.out:
      with open(a.out, "a", encoding="utf-8") as f:
        f.write(json.dumps(dict(r, sigma=a.sigma, epochs=a.epochs, delta=a.delta)) + "\n")
    k *= 2


if __name__ == "__main__":
  main()
