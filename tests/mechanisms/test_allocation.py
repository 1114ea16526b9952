"""Certified one-epoch laws of random allocation (balls-in-bins), issue 38.

Independent references: the Gaussian mechanism's closed form (k = 1), δ(ε) by
numerical integration over the output space (Gauss-Legendre product rules,
the innermost coordinate integrated only over the region where the hinge is
positive, so every integrand is smooth; k = 2, 3 and a partial epoch), and a
fixed-seed Monte-Carlo estimate (k = 8).
"""

import math

import numpy as np
import pytest
from scipy.stats import norm

from jaxdp._src.mechanisms import allocation as al


def gaussian_delta(eps, sigma):
  """δ(ε) of the Gaussian mechanism, sensitivity 1 (Balle & Wang 2018)."""
  mu = 1.0 / sigma
  return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def _legendre(lo, hi, n):
  x, w = np.polynomial.legendre.leggauss(n)
  lo, hi = np.asarray(lo, float), np.asarray(hi, float)
  half = (hi - lo)[..., None] / 2
  return lo[..., None] + half * (x + 1), half * w


def integrated_delta(eps, sigma, k, m, direction, n_outer=160, n_inner=120):
  """δ(ε) of one epoch restricted to m coordinates, by quadrature over R^m.

  remove: E_P[(1 − e^{ε−L})_+], P = (1/k)Σ_{i≤m} N(e_i) + (1 − m/k) N(0);
  add: E_Q[(1 − e^{ε+L})_+]; L = log(1 − m/k + (1/k)Σ_{i≤m} W_i).
  """
  s = sigma
  c0 = (k - m) / k
  span = 12 * s

  def inner(t, mean):
    """E over x_m ~ N(mean, s²) of the hinge, given T = c0 + Σ_{i<m} W_i / k."""
    if direction == "remove":    # (1 − e^ε/(T + W/k))_+ ; positive for W > k(e^ε − T)
      need = k * (math.exp(eps) - t)
      b = np.where(need > 0, s * s * np.log(np.maximum(need, 1e-300)) + 0.5, -np.inf)
      lo = np.maximum(b, mean - span)
      hi = np.full(lo.shape, mean + span)
      x, w = _legendre(lo, np.maximum(hi, lo), n_inner)
      wv = np.exp((2 * x - 1) / (2 * s * s))
      f = (1 - math.exp(eps) / (t[..., None] + wv / k)) * norm.pdf(x, mean, s)
    else:                          # (1 − e^ε (T + W/k))_+ ; positive for W < k(e^{−ε} − T)
      need = k * (math.exp(-eps) - t)
      b = np.where(need > 0, s * s * np.log(np.maximum(need, 1e-300)) + 0.5, -np.inf)
      hi = np.minimum(b, mean + span)
      lo = np.full(hi.shape, mean - span)
      x, w = _legendre(lo, np.maximum(hi, lo), n_inner)
      wv = np.exp((2 * x - 1) / (2 * s * s))
      f = (1 - math.exp(eps) * (t[..., None] + wv / k)) * norm.pdf(x, mean, s)
    return np.sum(np.maximum(f, 0.0) * w, axis=-1)

  def expect(means):
    """E over independent x_i ~ N(means[i], s²) of the hinge (last one inner)."""
    t = np.array([c0])
    wt = np.array([1.0])
    for mean in means[:-1]:
      x, w = _legendre(mean - span, mean + span, n_outer)
      wv = np.exp((2 * x - 1) / (2 * s * s)) / k
      t = (t[:, None] + wv[None, :]).ravel()
      wt = (wt[:, None] * (w * norm.pdf(x, mean, s))[None, :]).ravel()
    return float(np.sum(wt * inner(t, means[-1])))

  if direction == "add":
    return expect([0.0] * m)
  # remove: with prob m/k the shifted coordinate is among the m (put it last),
  # with prob 1 − m/k none is shifted
  out = (m / k) * expect([0.0] * (m - 1) + [1.0])
  if m < k:
    out += (1 - m / k) * expect([0.0] * m)
  return out


def _bounds(laws, eps, direction):
  up = getattr(laws, direction + "_up")
  low = getattr(laws, direction + "_low")
  return al.delta_of_law(low, eps), al.delta_of_law(up, eps)


@pytest.mark.parametrize("sigma", [0.6, 1.1, 3.0])
def test_k1_is_the_gaussian_mechanism(sigma):
  laws = al.epoch_laws(sigma, 1, 1, 2e-3)
  eps = np.array([0.0, 0.3, 1.0, 2.5])
  ref = gaussian_delta(eps, sigma)
  for direction in ("remove", "add"):
    lo, up = _bounds(laws, eps, direction)
    assert np.all(lo <= ref) and np.all(ref <= up), (direction, lo, ref, up)
    assert np.all(up - lo <= 0.15 * ref)   # a grid step of 2e-3 in the loss


@pytest.mark.parametrize("k,m,sigma", [(2, 2, 1.0), (2, 2, 0.7), (3, 3, 1.3), (2, 1, 1.0), (3, 2, 0.9)])
def test_integration_inside_interval(k, m, sigma):
  laws = al.epoch_laws(sigma, k, m, 2e-3)
  for direction in ("remove", "add"):
    for eps in (0.05, 0.4, 1.2):
      ref = integrated_delta(eps, sigma, k, m, direction)
      lo, up = _bounds(laws, np.array(eps), direction)
      assert lo <= ref <= up, (direction, eps, float(lo), ref, float(up))
      assert up - lo <= 0.05 * ref


def test_integration_reference_matches_gaussian_at_k1():
  # the quadrature itself, against the closed form
  for eps in (0.0, 0.5, 2.0):
    for d in ("remove", "add"):
      assert integrated_delta(eps, 1.1, 1, 1, d) == pytest.approx(gaussian_delta(eps, 1.1), rel=1e-9)


def test_monte_carlo_one_epoch():
  k, sigma, n = 8, 0.8, 1_000_000
  laws = al.epoch_laws(sigma, k, k, 4e-3)
  rng = np.random.default_rng(38)
  x = rng.normal(0.0, sigma, size=(n, k))
  x_p = x.copy()
  x_p[:, 0] += 1.0                  # P: the example sits in one step (by symmetry the first)
  loss = lambda z: np.logaddexp.reduce((2 * z - 1) / (2 * sigma ** 2), axis=1) - math.log(k)
  l_p, l_q = loss(x_p), loss(x)
  for eps in (0.2, 0.8, 1.6):
    for direction, sample in (("remove", l_p), ("add", -l_q)):
      h = np.maximum(-np.expm1(eps - sample), 0.0)
      est, se = h.mean(), h.std(ddof=1) / math.sqrt(n)
      lo, up = _bounds(laws, np.array(eps), direction)
      assert up >= est - 5 * se, (direction, eps, float(up), est, se)
      assert lo <= est + 5 * se, (direction, eps, float(lo), est, se)


def test_laws_are_directed():
  # the upper laws dominate the lower ones in every δ(ε); masses ~ 1
  laws = al.epoch_laws(1.0, 5, 5, 1e-2)
  eps = np.linspace(0.0, 3.0, 13)
  for direction in ("remove", "add"):
    lo, up = _bounds(laws, eps, direction)
    assert np.all(lo <= up)
  # the upper laws keep all the mass (a lost unit of mass could hide δ), the
  # lower ones at most all of it
  for law in (laws.remove_up, laws.add_up):
    assert 1.0 <= law.p.sum() + law.tail <= 1 + 1e-9
  for law in (laws.remove_low, laws.add_low):
    assert law.p.sum() <= 1.0
  assert laws.remove_up.mode == "up" and laws.add_up.mode == "up"


@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_combine_keeps_mass_and_moments(sigma):
  # log(e^A + e^B) of two Gaussians against a seeded sample: the mean lies
  # between the down and up laws' means (± 5 standard errors)
  eta, mu, s = 5e-3, 0.5 / sigma ** 2, 1 / sigma
  rng = np.random.default_rng(7)
  v = np.logaddexp(rng.normal(-mu, s, 400_000), rng.normal(mu, s, 400_000))
  means = []
  for mode in ("up", "down"):
    c = al.combine(al.gaussian_law(mu, s, eta, mode), al.gaussian_law(-mu, s, eta, mode))
    assert c.p.sum() + c.tail == pytest.approx(1.0, abs=1e-12)
    x = (c.lo + np.arange(c.p.size)) * eta
    means.append(float((c.p * x).sum() / c.p.sum()))
  se = v.std() / math.sqrt(v.size)
  assert means[1] - 5 * se <= v.mean() <= means[0] + 5 * se
  assert means[0] - means[1] <= 2.5 * eta


def test_bad_m_raises():
  with pytest.raises(ValueError, match="m must be"):
    al.epoch_laws(1.0, 3, 4, 1e-2)
