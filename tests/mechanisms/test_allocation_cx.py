"""Second-order (convex-order) laws of random allocation, issue 38: the same
independent references as test_allocation.py (Gaussian closed form for k = 1,
quadrature for k = 2, 3 and partial epochs, fixed-seed Monte Carlo for k = 8),
with intervals ~100x narrower at the same grid."""

import math

import numpy as np
import pytest

from jaxdp._src.mechanisms import allocation_cx as cx
from test_allocation import gaussian_delta, integrated_delta


def _deltas(ep, eps):
  """(lower, upper) δ(ε) of one epoch, remove and add, read from the laws:
  remove E_Q[(S/k − e^ε)_+], add E_Q[(1 − e^ε S/k)_+], +∞ masses on the upper side."""
  ell = (ep.lo_up + np.arange(ep.q_up.size)) * ep.eta
  ell_a = (ep.lo_up_add + np.arange(ep.q_up_add.size)) * ep.eta
  e = math.exp(eps)
  return {
      "remove": (np.sum(ep.q_low * np.maximum(np.exp(ep.loss_low) - e, 0.0)),
                 np.sum(ep.q_up * np.maximum(np.exp(ell) - e, 0.0)) + ep.inf_remove),
      "add": (np.sum(ep.q_low * np.maximum(1 - e * np.exp(ep.loss_low), 0.0)),
              np.sum(ep.q_up_add * np.maximum(1 - e * np.exp(ell_a), 0.0)) + ep.inf_add)}


@pytest.mark.parametrize("sigma", [0.6, 1.1, 3.0])
def test_k1_is_the_gaussian_mechanism(sigma):
  ep = cx.epoch_pairs(sigma, 1, 1, 5e-3)
  for eps in (0.0, 0.3, 1.0, 2.5):
    ref = gaussian_delta(eps, sigma)
    for lo, up in _deltas(ep, eps).values():
      assert lo <= ref <= up
      assert up - lo <= 1e-4 * ref + 1e-11   # + the booked round-off mass


@pytest.mark.parametrize("k,m,sigma", [(2, 2, 1.0), (3, 3, 1.3), (2, 1, 1.0), (3, 2, 0.9)])
def test_integration_inside_interval(k, m, sigma, nodes=None):
  ep = cx.epoch_pairs(sigma, k, m, 3e-2)
  nodes = nodes or ((240, 160) if m <= 2 else (160, 120))
  for eps in (0.05, 0.4, 1.2):
    got = _deltas(ep, eps)
    for direction in ("remove", "add"):
      ref = integrated_delta(eps, sigma, k, m, direction, *nodes)
      lo, up = got[direction]
      assert lo <= ref <= up, (direction, eps, lo, ref, up)
      assert up - lo <= 0.01 * ref + 1e-10


@pytest.mark.slow   # small σ: the quadrature needs ~40 s of nodes to resolve 1e-5
def test_integration_inside_interval_small_sigma():
  test_integration_inside_interval(2, 2, 0.7, nodes=(700, 500))


def test_monte_carlo_one_epoch():
  k, sigma, n = 8, 0.8, 1_000_000
  ep = cx.epoch_pairs(sigma, k, k, 1e-2)
  rng = np.random.default_rng(38)
  x = rng.normal(0.0, sigma, size=(n, k))
  x_p = x.copy()
  x_p[:, 0] += 1.0
  loss = lambda z: np.logaddexp.reduce((2 * z - 1) / (2 * sigma ** 2), axis=1) - math.log(k)
  l_p, l_q = loss(x_p), loss(x)
  for eps in (0.2, 0.8, 1.6):
    got = _deltas(ep, eps)
    for direction, sample in (("remove", l_p), ("add", -l_q)):
      h = np.maximum(-np.expm1(eps - sample), 0.0)
      est, se = h.mean(), h.std(ddof=1) / math.sqrt(n)
      lo, up = got[direction]
      assert up >= est - 5 * se and lo <= est + 5 * se, (direction, eps, lo, est, se, up)


@pytest.mark.slow   # 10^7 samples, the Monte-Carlo reference (~1 min)
def test_monte_carlo_one_epoch_ten_million():
  """One epoch of random allocation (k = 8, σ = 0.8), 10^7 samples in chunks:
  the certified upper δ is never below the estimate minus 5 standard errors,
  nor the lower δ above it plus 5, in either direction."""
  k, sigma, n, chunk = 8, 0.8, 10_000_000, 1_000_000
  ep = cx.epoch_pairs(sigma, k, k, 1e-2)
  rng = np.random.default_rng(3807)
  epsilons = (0.2, 0.8, 1.6, 2.4)
  sums = {d: np.zeros((len(epsilons), 2)) for d in ("remove", "add")}
  loss = lambda z: np.logaddexp.reduce((2 * z - 1) / (2 * sigma ** 2), axis=1) - math.log(k)
  for _ in range(n // chunk):
    x = rng.normal(0.0, sigma, size=(chunk, k))
    l_q = loss(x)
    x[:, 0] += 1.0
    l_p = loss(x)
    for direction, sample in (("remove", l_p), ("add", -l_q)):
      for i, eps in enumerate(epsilons):
        h = np.maximum(-np.expm1(eps - sample), 0.0)
        sums[direction][i] += (h.sum(), np.square(h).sum())
  for i, eps in enumerate(epsilons):
    got = _deltas(ep, eps)
    for direction in ("remove", "add"):
      s1, s2 = sums[direction][i]
      est = s1 / n
      se = math.sqrt(max(s2 / n - est ** 2, 0.0) / (n - 1))
      lo, up = got[direction]
      assert up >= est - 5 * se and lo <= est + 5 * se, (direction, eps, lo, est, se, up)


def test_spread_keeps_mass_and_mean():
  # a mean-preserving spread: Q-mass 1 and E[S/k] = 1 (the remove side's P-mass),
  # up to the tracked round-off; the merged law has at most both
  for k, m in ((6, 6), (6, 4), (1, 1)):
    ep = cx.epoch_pairs(1.2, k, m, 1e-2)
    ell = (ep.lo_up + np.arange(ep.q_up.size)) * ep.eta
    ell_a = (ep.lo_up_add + np.arange(ep.q_up_add.size)) * ep.eta
    assert 1.0 <= ep.q_up_add.sum() + ep.inf_add <= 1 + 1e-8
    assert 1.0 <= ep.q_up.sum() + ep.inf_remove   # Q-mass of the remove chain, all kept
    assert 1.0 - 1e-20 <= np.sum(ep.q_up * np.exp(ell)) + ep.inf_remove <= 1 + 1e-8
    # the add chain's mean is at most 1 (mass moved down), the remove chain's at least 1
    assert np.sum(ep.q_up_add * np.exp(ell_a)) <= np.sum(ep.q_up * np.exp(ell))
    assert ep.q_low.sum() <= 1.0 and np.sum(ep.q_low * np.exp(ep.loss_low)) <= 1.0


def test_bad_m_raises():
  with pytest.raises(ValueError, match="m must be"):
    cx.epoch_pairs(1.0, 3, 4, 1e-2)


def _mp_gaussian_delta(eps, sigma):
  """δ(ε) of the Gaussian mechanism in mpmath (no cancellation at tiny δ)."""
  import mpmath as mp  # pylint: disable=g-import-not-at-top
  with mp.workdps(40):
    m, e = 1 / mp.mpf(sigma), mp.mpf(eps)
    return float(mp.ncdf(m / 2 - e / m) - mp.exp(e) * mp.ncdf(-m / 2 - e / m))


@pytest.mark.parametrize("k", [1, 50])
def test_infinite_mass_below_tiny_delta(k):
  """Regression (issue 38): at σ = 0.3 the upper laws booked 1.6e-9 (k = 1) to
  2.9e-8 (k = 50) at +∞ (the P-side tail of log W, round-off as mass), so a δ
  below that read ε = inf. The +∞ masses are now far below 1e-12, and at k = 1
  the interval still holds the exact Gaussian δ down to δ ~ 1e-13."""
  ep = cx.epoch_pairs(0.3, k, k, 4e-3) if k == 1 else cx.epoch_pairs(0.3, k, k, 1e-2, 2e-2)
  assert ep.inf_remove < 1e-15 and ep.inf_add < 1e-15, (ep.inf_remove, ep.inf_add)
  if k == 1:
    for eps in (27.0, 28.5, 29.5):
      ref = _mp_gaussian_delta(eps, 0.3)
      for lo, up in _deltas(ep, eps).values():
        assert lo <= ref <= up and up - lo <= 1e-3 * ref, (eps, lo, ref, up)


def _law(lo, p, eta, pos=None):
  return cx.CxLaw(lo, np.asarray(p, float), None if pos is None else np.asarray(pos, float),
                  eta, 1, 0.0, 0.0, 0.0, 0.0, 1)


@pytest.mark.parametrize("same", [True, False])
def test_spread_sum_against_pairwise_brute_force(same):
  """The vectorised spread of A + B (runs of equal offset as convolutions)
  equals a pair-by-pair loop in plain Python: every pair's sum e^{iη} + e^{jη}
  split between the grid points around it, mass and mean kept."""
  eta = 0.0123
  rng = np.random.default_rng(3)
  la = _law(-40, rng.random(57) * np.exp(-rng.random(57) * 30), eta)
  lb = la if same else _law(5, rng.random(31), eta)
  lo, out = cx._spread_sum(la, lb)
  ref = {}
  for i, pi in enumerate(la.p):
    for j, pj in enumerate(lb.p):
      s = math.exp((la.lo + i) * eta) + math.exp((lb.lo + j) * eta)
      c = math.floor(math.log(s) / eta)
      g0, g1 = math.exp(c * eta), math.exp((c + 1) * eta)
      w = (s - g0) / (g1 - g0)
      ref[c] = ref.get(c, 0.0) + pi * pj * (1 - w)
      ref[c + 1] = ref.get(c + 1, 0.0) + pi * pj * w
  got = {lo + t: v for t, v in enumerate(out) if v > 0}
  for c in set(ref) | set(got):
    r, g = ref.get(c, 0.0), got.get(c, 0.0)
    assert abs(g - r) <= 1e-9 * r + 1e-300, (c, g, r)


@pytest.mark.parametrize("same", [True, False])
def test_merge_sum_against_pairwise_brute_force(same):
  """The blocked S-space merge of A + B equals a pair-by-pair loop: each cell
  holds the mass of the pairs whose sum falls in it, at their mean."""
  eta = 0.0271
  rng = np.random.default_rng(4)
  n = 300     # more than one block of rows in the doubling case
  cells = -60 + np.arange(n)
  pa = rng.random(n) * np.exp(-rng.random(n) * 20)
  la = _law(-60, pa, eta, (cells + rng.random(n)) * eta)
  lb = la if same else _law(-10, rng.random(23), eta, (-10 + np.arange(23) + rng.random(23)) * eta)
  lo, mass, pos = cx._merge_sum(la, lb)
  ref_m, ref_s = {}, {}
  for pi, xi in zip(la.p, la.pos):
    for pj, xj in zip(lb.p, lb.pos):
      s = math.exp(xi) + math.exp(xj)
      c = math.floor(math.log(s) / eta)
      ref_m[c] = ref_m.get(c, 0.0) + pi * pj
      ref_s[c] = ref_s.get(c, 0.0) + pi * pj * s
  got = {lo + t: (m, x) for t, (m, x) in enumerate(zip(mass, pos)) if m > 0}
  assert set(got) == set(ref_m)
  for c, (m, x) in got.items():
    assert abs(m - ref_m[c]) <= 1e-12 * ref_m[c], (c, m, ref_m[c])
    assert abs(x - math.log(ref_s[c] / ref_m[c])) <= 1e-12, c
