"""Balls-in-bins with a capacity: untruncated bound + overflow probability
(jaxdp._src.kernels.bins_coupling), checked against SciPy's exact binomial tail and the
coupling inequality δ' = δ_untruncated(ε) + (1 + e^ε)·p written out here."""

import math

import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp._src.kernels import bins_coupling as bc
from jaxdp import sampling

N, B, SIGMA, DELTA = 60000, 256, 1.1, 1e-5


def _exact_union(n, b, cap, epochs):
  k = n // b
  return min(1.0, epochs * k * stats.binom.sf(cap, n + 1, 1.0 / k))


@pytest.mark.parametrize("n,b,cap,epochs", [
    (60000, 256, 400, 9), (60000, 256, 300, 1), (1000, 10, 20, 3), (1000, 10, 12, 50),
    (100, 50, 60, 2), (100, 50, 100, 1), (5, 1, 1, 4)])
def test_overflow_probability_bounds_the_exact_union(n, b, cap, epochs):
  got = bc.overflow_probability(n, b, cap, epochs)
  ref = _exact_union(n, b, cap, epochs)
  assert 0.0 <= got <= 1.0
  assert got >= ref * (1 - 1e-9), (got, ref)
  if ref < 1e-3:   # Chernoff is within a polynomial factor of the tail where it is small
    assert got <= max(ref, 1e-300) * 1e4 * (n + 1), (got, ref)


def test_overflow_impossible_or_certain():
  assert bc.overflow_probability(100, 10, 101, 5) == 0.0     # more room than examples
  assert bc.overflow_probability(100, 10, 5, 5) == 1.0       # capacity below the mean
  assert bc.overflow_probability(100, 10, 30, 0) == 0.0


def _untruncated(steps, value, kind):
  smp = sampling.balls_in_bins(N, B, N)
  fn = jaxdp.epsilon if kind == "epsilon" else jaxdp.delta
  return float(fn(smp, SIGMA, steps, value))


@pytest.mark.parametrize("cap, steps", [
    (400, 2000), pytest.param(380, 700, marks=pytest.mark.slow),
    pytest.param(360, 234, marks=pytest.mark.slow)])
def test_delta_is_the_untruncated_delta_plus_the_overflow_term(cap, steps):
  smp = sampling.balls_in_bins(N, B, cap)
  epochs = math.ceil(steps / smp.steps_per_epoch)
  p = _exact_union(N, B, cap, epochs)
  for eps in (1.0, 4.0, 8.0):
    got = float(jaxdp.delta(smp, SIGMA, steps, eps))
    assert got >= _untruncated(steps, eps, "delta") + (1 + math.exp(eps)) * p * (1 - 1e-9)
    assert got <= 1.0


@pytest.mark.parametrize("cap, steps", [(400, 2000),
                                       pytest.param(380, 700, marks=pytest.mark.slow)])
def test_epsilon_meets_delta_through_the_coupling(cap, steps):
  smp = sampling.balls_in_bins(N, B, cap)
  eps = float(jaxdp.epsilon(smp, SIGMA, steps, DELTA))
  assert math.isfinite(eps)
  epochs = math.ceil(steps / smp.steps_per_epoch)
  p = _exact_union(N, B, cap, epochs)
  assert _untruncated(steps, eps, "delta") + (1 + math.exp(eps)) * p <= DELTA * (1 + 1e-9)
  # Far below the unamplified-epoch fallback of a truncated epoch (ε ≈ 40).
  assert eps < 0.2 * float(jaxdp.epsilon(1.0, SIGMA / 2.0, epochs, DELTA))


def test_small_capacity_keeps_the_fallback():
  """Capacity near N/k overflows often: the coupling cannot help, and the
  answer is the unamplified-epoch RDP bound (one Gaussian of sensitivity 2
  per started epoch), never anything smaller."""
  smp = sampling.balls_in_bins(N, B, 250)
  epochs = math.ceil(2000 / smp.steps_per_epoch)
  eps = float(jaxdp.epsilon(smp, SIGMA, 2000, DELTA))
  rdp_fallback = float(jaxdp.epsilon(1.0, SIGMA / 2.0, epochs, DELTA))
  # (the sampler path minimises over the order grid, jaxdp.epsilon over every
  # real order: equal up to the grid's resolution)
  assert rdp_fallback * (1 - 1e-9) <= eps <= rdp_fallback * 1.01
