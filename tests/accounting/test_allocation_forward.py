"""Balls-in-bins through the PLD accountant (issue 38): the certified interval of
composed epochs against independent references: k = 1 is T-fold Gaussian
composition (closed form), two epochs and a partial one against a
fixed-seed Monte-Carlo estimate, and the RDP answer as a ceiling."""

import math

import numpy as np
import pytest
from scipy.stats import norm

import jaxdp
from jaxdp import sampling


def gaussian_delta(eps, mu):
  """δ(ε) of the Gaussian mechanism with sensitivity/σ = mu (Balle & Wang 2018)."""
  return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def test_k1_is_composed_gaussian():
  s = sampling.balls_in_bins(50, 50, 50)           # k = 1: every step sees the example
  assert s.steps_per_epoch == 1
  sigma, steps = 2.0, 7
  eps = np.array([0.5, 1.0, 2.0])
  lo, up = jaxdp.pld.delta(s, sigma, steps, eps, return_bounds=True,
                           value_discretization_interval=2e-3)
  ref = gaussian_delta(eps, math.sqrt(steps) / sigma)
  assert np.all(lo <= ref) and np.all(ref <= up), (lo, ref, up)


def _mc_delta(sigma, k, epochs, m, eps, n=400_000, seed=38):
  """Monte-Carlo δ(ε) (mean, standard error) of ``epochs`` whole epochs and an
  m-step partial one, both directions."""
  rng = np.random.default_rng(seed)
  out = {}
  for direction in ("remove", "add"):
    total = np.zeros(n)
    for e in range(epochs + (1 if m else 0)):
      cols = k if e < epochs else m
      x = rng.normal(0.0, sigma, size=(n, cols))
      if direction == "remove":   # the example's step: uniform over all k steps
        where = rng.integers(0, k, size=n)
        hit = where < cols
        x[np.flatnonzero(hit), where[hit]] += 1.0
      w = (2 * x - 1) / (2 * sigma ** 2)
      lse = np.logaddexp.reduce(w, axis=1)
      if cols < k:
        lse = np.logaddexp(lse, math.log(k - cols))
      loss = lse - math.log(k)
      total += loss if direction == "remove" else -loss
    h = np.maximum(-np.expm1(eps - total), 0.0)
    out[direction] = (h.mean(), h.std(ddof=1) / math.sqrt(n))
  return out


@pytest.mark.parametrize("steps", [6, 7])     # 2 whole epochs; and a partial third
def test_composed_epochs_against_monte_carlo(steps):
  s = sampling.balls_in_bins(30, 10, 30)      # k = 3
  sigma, eps = 0.9, 1.0
  lo, up = jaxdp.pld.delta(s, sigma, steps, eps, return_bounds=True,
                           value_discretization_interval=5e-3)
  mc = _mc_delta(sigma, 3, steps // 3, steps % 3, eps)
  est = max(v[0] for v in mc.values())
  se = max(v[1] for v in mc.values())
  assert up >= est - 5 * se, (float(up), est, se)
  assert lo <= est + 5 * se, (float(lo), est, se)


@pytest.mark.slow   # ~50 s: the sampler's RDP answers compile
def test_not_above_rdp_and_grows_with_epochs():
  s = sampling.balls_in_bins(600, 100, 600)   # k = 6
  pld = jaxdp.epsilon(s, 1.0, np.array([6, 12, 15]), 1e-5, accountant="pld")
  rdp = jaxdp.epsilon(s, 1.0, np.array([6, 12, 15]), 1e-5)
  assert np.all(pld <= rdp)
  lo1, _ = jaxdp.pld.epsilon(s, 1.0, 6, 1e-5, return_bounds=True)
  _, up2 = jaxdp.pld.epsilon(s, 1.0, 12, 1e-5, return_bounds=True)
  assert up2 >= lo1 and pld[1] >= lo1
  d = jaxdp.delta(s, 1.0, 12, 1.0, accountant="pld")
  assert d <= jaxdp.delta(s, 1.0, 12, 1.0)


@pytest.mark.slow   # ~20 s: the sampler's RDP answer compiles
def test_capacity_uses_the_coupling():
  full = sampling.balls_in_bins(600, 100, 600)
  cut = sampling.balls_in_bins(600, 100, 160)
  lo_f, up_f = jaxdp.pld.epsilon(full, 1.0, 12, 1e-5, return_bounds=True)
  lo_c, up_c = jaxdp.pld.epsilon(cut, 1.0, 12, 1e-5, return_bounds=True)
  assert up_c >= up_f and lo_c <= up_c
  assert up_c <= jaxdp.epsilon(cut, 1.0, 12, 1e-5)      # RDP with the same coupling


def test_too_fine_grid_raises():
  s = sampling.balls_in_bins(600, 100, 600)
  with pytest.raises(ValueError, match="value_discretization_interval"):
    jaxdp.pld.epsilon(s, 0.05, 6, 1e-5, value_discretization_interval=1e-6)


@pytest.mark.slow
def test_calibrated_sigma_meets_the_target_below_the_rdp_sigma():
  """calibrate.sigma(q=balls_in_bins, accountant="pld") (it raised before the
  tight_upper route): the σ meets the target by the public ε and is below
  the RDP calibration's (~2 min on 2 cores)."""
  import jaxdp
  from jaxdp import calibrate, sampling
  s = sampling.balls_in_bins(1000, 100, 1000)
  sig = float(calibrate.sigma(2.0, 1e-5, s, 25, accountant="pld"))
  assert float(jaxdp.epsilon(s, sig, 25, 1e-5, accountant="pld")) <= 2.0
  assert sig < float(calibrate.sigma(2.0, 1e-5, s, 25))


def test_tiny_delta_upper_monotone_in_sigma():
  """Regression (issue 38, found by the slow harness): where the true δ is far
  below the booked +∞ masses (here ~1e-14), the upper δ must still not grow
  with σ. The booked masses are bounds that depend on k and the tail cut only,
  not on σ or the grid."""
  s = sampling.balls_in_bins(661, 7, 661)          # k = 94, 89 epochs
  sigma, steps, eps = 85.43011681910336, 8366, 0.6050823789950159
  lo, up = jaxdp.pld.delta(s, np.array([sigma, 1.25 * sigma]), np.array([steps, steps]),
                           np.array([eps, eps]), return_bounds=True)
  assert up[1] <= up[0] and np.all(lo <= up), (lo, up)
  assert 0 < up[0] < 1e-12


def test_pld_accountant_composes_balls_in_bins_epochs():
  """``accountant.pld()`` on balls-in-bins epochs (events.BallsInBinsGaussian,
  one compose per epoch; it raised TypeError before): the same answer as
  ``jaxdp.epsilon/delta(sampler, …, accountant="pld")``, bit for bit, inside
  its certified interval; k = 1 (B = N) is the Gaussian mechanism, whose
  exact δ(ε) lies in the interval; mixed configurations raise."""
  from jaxdp import accountant, events  # pylint: disable=g-import-not-at-top

  acc = accountant.pld()
  ev = events.BallsInBinsGaussian(400, 20, 1.0)
  st = acc.compose(acc.compose(acc.init(), ev, count=2), ev)   # 3 epochs of k = 20
  smp = sampling.balls_in_bins(400, 20, 400)
  lo, up = acc.epsilon(st, 1e-5, return_bounds=True)
  assert up == jaxdp.epsilon(smp, 1.0, 60, 1e-5, accountant="pld")
  assert 0 < lo <= up
  d_lo, d_up = acc.delta(st, float(up), return_bounds=True)
  assert 0 <= d_lo <= d_up <= 1e-5 * (1 + 1e-6)

  st1 = acc.compose(acc.init(), events.BallsInBinsGaussian(50, 50, 1.0), count=4)
  mu = 2.0   # sqrt(4 epochs) / σ
  eps = np.array([0.5, 1.0, 3.0])
  exact = norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)
  lo1, up1 = acc.delta(st1, eps, return_bounds=True)
  assert np.all(lo1 <= exact * (1 + 1e-9)) and np.all(exact <= up1 * (1 + 1e-9)), (lo1, exact, up1)

  mixed = acc.compose(st, events.BallsInBinsGaussian(400, 20, 2.0))
  with pytest.raises(ValueError, match="one configuration"):
    acc.epsilon(mixed, 1e-5)
