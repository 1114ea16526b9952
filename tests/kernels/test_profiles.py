"""Tests for jaxdp.profiles against mpmath references and dp_accounting."""

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxdp import profiles as P
from tests import reference as R
from jaxdp._src.kernels import profiles as P_impl

BODY_REL = 1e-8
TAIL_REL = 1e-6


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _rel_one_sided(ours, ref):
  """(ours - ref)/ref for a rounded-up result: must be in [0, tol]."""
  return float(mp.mpf(float(ours)) / ref - 1)


def _log_rel(ours_log, ref):
  lr = mp.log(ref)
  return float((mp.mpf(float(ours_log)) - lr) / abs(lr))


# --------------------------------------------------------------------------
# Gaussian profile
# --------------------------------------------------------------------------

GAUSS_BODY = [(e, s) for s in (0.05, 0.3, 1.0, 3.0, 10.0, 100.0, 1000.0)
              for e in (0.0, 1e-3, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 80.0)]


def test_gaussian_matches_closed_form_mpmath():
  eps = np.array([e for e, _ in GAUSS_BODY])
  sig = np.array([s for _, s in GAUSS_BODY])
  log_d = np.asarray(P.gaussian_log_delta(eps, sig))
  d = np.asarray(P.gaussian(eps, sig))
  checked_tail = 0
  for e, s, ld, dd in zip(eps, sig, log_d, d):
    ref = R.ref_gaussian_delta(e, s)
    if ref > mp.mpf("1e-300"):
      rel = _rel_one_sided(dd, ref)
      assert 0.0 <= rel <= BODY_REL, (e, s, rel)
    else:
      checked_tail += 1
      assert abs(_log_rel(ld, ref)) <= TAIL_REL, (e, s)
      assert float(ld) >= float(mp.log(ref))
  assert checked_tail > 0


def test_gaussian_far_tail_log_delta():
  # ε = 80, σ = 0.3: δ ≈ e^-255 is fine, e.g. ε = 800, σ = 0.3 is ≪ 1e-300.
  for e, s in [(80.0, 0.3), (800.0, 0.3), (3000.0, 0.1), (5000.0, 0.05), (500.0, 0.1)]:
    ref = R.ref_gaussian_delta(e, s)
    ld = P.gaussian_log_delta(e, s)
    assert np.isfinite(ld)
    assert abs(_log_rel(ld, ref)) <= TAIL_REL
    assert float(ld) >= float(mp.log(ref))


def test_gaussian_matches_direct_integration():
  for e, s, dl in [(0.0, 1.0, 1.0), (0.5, 0.7, 1.0), (2.0, 1.0, 2.0), (3.0, 2.0, 1.0), (0.3, 10.0, 1.0),
                   (3.0, 0.4, 1.0)]:
    ref = R.ref_gaussian_delta_integral(e, s, dl)
    assert abs(_rel_one_sided(P.gaussian(e, s, dl), ref)) <= BODY_REL


def test_gaussian_positive_where_true_delta_positive():
  # Large σ / tiny θ: the two Φ terms nearly cancel.
  eps = np.array([0.0, 1e-6, 1e-3, 0.05, 0.3])
  for s in (1e3, 1e4, 1e5):
    d = np.asarray(P.gaussian(eps, s))
    for e, dd in zip(eps, d):
      ref = R.ref_gaussian_delta(e, s)
      if ref > mp.mpf("1e-300"):
        assert dd > 0
        assert 0 <= _rel_one_sided(dd, ref) <= BODY_REL


def test_log_mills_continued_fraction():
  xs = np.array([-5.0, -5.5, -7.0, -10.0, -20.0, -37.0, -100.0, -1e4])
  got = np.asarray(P_impl._log_mills_cf(jnp.asarray(xs)))
  for x, g in zip(xs, got):
    with mp.workdps(50):
      ref = mp.log(mp.ncdf(x) / mp.npdf(x))
    assert abs(g - float(ref)) <= 1e-14 * max(1.0, abs(float(ref)))


def test_gaussian_sensitivity_scaling_and_group():
  e = np.array([0.1, 1.0, 3.0])
  np.testing.assert_allclose(P.gaussian(e, 2.0, 3.0), P.gaussian(e, 2.0 / 3.0), rtol=1e-12)
  np.testing.assert_allclose(P.gaussian_group(e, 2.0, 3), P.gaussian(e, 2.0, 3.0), rtol=1e-14)
  # White-box group profile beats the black-box group bound (§3).
  k = 3
  black = np.expm1(e) * np.asarray(P.gaussian(e / k, 2.0)) / np.expm1(e / k)
  assert np.all(np.asarray(P.gaussian_group(e, 2.0, k)) <= black)


# --------------------------------------------------------------------------
# Gaussian inverse and analytic Gaussian calibration
# --------------------------------------------------------------------------


def test_gaussian_epsilon_conservative_and_tight():
  deltas = np.array([1e-12, 1e-9, 1e-6, 1e-5, 1e-3, 0.1, 0.4])
  sigmas = np.array([0.2, 0.5, 1.0, 2.0, 5.0, 30.0])
  dd, ss = np.meshgrid(deltas, sigmas)
  eps = np.asarray(P.gaussian_epsilon(dd, ss))
  assert eps.shape == dd.shape
  for d, s, e in zip(dd.ravel(), ss.ravel(), eps.ravel()):
    ref0 = R.ref_gaussian_delta(0.0, s)
    if ref0 <= d:
      assert e == 0.0
      continue
    assert R.ref_gaussian_delta(e, s) <= d
    assert R.ref_gaussian_delta(e * (1 - 1e-9), s) > d, (d, s, e)


def test_gaussian_epsilon_matches_dp_accounting():
  from dp_accounting import gaussian_mechanism as gm
  for d, s in [(1e-5, 1.0), (1e-6, 3.0), (1e-3, 0.5), (1e-10, 2.0)]:
    ours = float(P.gaussian_epsilon(d, s))
    theirs = gm.get_epsilon_gaussian(s, d)
    assert ours == pytest.approx(theirs, rel=1e-8)


def test_analytic_gaussian_sigma_meets_target_and_is_tight():
  eps = np.array([0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 8.0, 30.0])
  deltas = np.array([1e-10, 1e-5, 1e-2, 0.5])
  ee, dd = np.meshgrid(eps, deltas)
  sig = np.asarray(P.analytic_gaussian_sigma(ee, dd))
  for e, d, s in zip(ee.ravel(), dd.ravel(), sig.ravel()):
    assert R.ref_gaussian_delta(e, s) <= d
    # Tight to 1e-9 except for huge σ (θ < 1e-6), where the rounding slack of
    # d = log R(a) - log R(b) ~ 1e-16/θ dominates (still conservative).
    tight = 1e-9 if s < 1e6 else 1e-4
    assert R.ref_gaussian_delta(e, s * (1 - tight)) > d, (e, d, s)
  # Sensitivity scales σ linearly.
  np.testing.assert_allclose(P.analytic_gaussian_sigma(ee, dd, 2.5), 2.5 * sig, rtol=1e-10)


def test_analytic_gaussian_beats_classical():
  eps = np.array([0.05, 0.2, 0.5, 0.9, 0.99])
  deltas = np.array([1e-10, 1e-6, 1e-5, 1e-3])
  ee, dd = np.meshgrid(eps, deltas)
  classical = np.sqrt(2 * np.log(1.25 / dd)) / ee
  ours = np.asarray(P.analytic_gaussian_sigma(ee, dd))
  assert np.all(ours < classical)
  # The classical σ (valid for ε < 1) meets its target too.
  for e, d, s in zip(ee.ravel(), dd.ravel(), classical.ravel()):
    assert R.ref_gaussian_delta(e, s) <= d


def test_analytic_gaussian_matches_dp_accounting():
  from dp_accounting import gaussian_mechanism as gm
  for e, d in [(1.0, 1e-5), (0.1, 1e-6), (5.0, 1e-8), (0.5, 0.01)]:
    assert float(P.analytic_gaussian_sigma(e, d)) == pytest.approx(gm.get_sigma_gaussian(e, d), rel=1e-8)


# --------------------------------------------------------------------------
# Laplace
# --------------------------------------------------------------------------


def test_laplace_matches_integration():
  for e, b, dl in [(0.0, 0.5, 1.0), (0.3, 0.5, 1.0), (1.0, 0.5, 1.0), (1.99, 0.5, 1.0),
                   (0.2, 2.0, 1.0), (1.0, 1.0, 3.0)]:
    ref = R.ref_laplace_delta(e, b, dl)
    assert 0 <= _rel_one_sided(P.laplace(e, b, dl), ref) <= BODY_REL
  assert float(P.laplace(2.5, 0.5)) == 0.0
  assert P.laplace_log_delta(2.5, 0.5) == -np.inf
  # Group profile = sensitivity kΔ.
  np.testing.assert_allclose(P.laplace_group(0.5, 1.0, 2), P.laplace(0.5, 1.0, 2.0))


# --------------------------------------------------------------------------
# Poisson-sampled Gaussian, one step
# --------------------------------------------------------------------------

SG_FAST = [(0.0, 0.01, 1.0), (1e-3, 1e-3, 2.0), (0.005, 0.01, 1.0), (1.0, 0.1, 0.8)]
SG_SLOW = [(0.5, 0.01, 1.0), (3.0, 0.5, 0.5), (2.0, 1.0, 1.0), (0.1, 0.2, 4.0),
           (0.02, 0.05, 0.6), (1.5, 0.02, 0.4)]


def _check_sampled_integration(cases, direction):
  # mpmath quadrature is itself only good to ~1e-10 here, so two-sided.
  for e, q, s in cases:
    ref = R.ref_sampled_gaussian_delta(e, q, s, direction)
    ours = P.sampled_gaussian(e, q, s, direction=direction)
    if ref == 0:
      assert float(ours) == 0.0
      continue
    assert abs(_rel_one_sided(ours, ref)) <= BODY_REL, (e, q, s)


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_sampled_gaussian_matches_integration(direction):
  _check_sampled_integration(SG_FAST, direction)


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_sampled_gaussian_matches_integration_exhaustive(direction):
  _check_sampled_integration(SG_SLOW, direction)


def test_sampled_gaussian_far_tail():
  for e, q, s in [(20.0, 0.01, 0.3), (60.0, 1e-3, 0.2), (300.0, 0.01, 0.1)]:
    ref = R.ref_sampled_gaussian_delta(e, q, s, "remove")
    ld = P.sampled_gaussian_log_delta(e, q, s)
    assert abs(_log_rel(ld, ref)) <= TAIL_REL


def test_sampled_gaussian_special_cases():
  e = np.array([0.0, 0.3, 2.0, 10.0])
  np.testing.assert_allclose(P.sampled_gaussian(e, 1.0, 0.9), P.gaussian(e, 0.9), rtol=1e-12)
  np.testing.assert_allclose(P.sampled_gaussian(e, 1.0, 0.9, direction="add"),
                             P.gaussian(e, 0.9), rtol=1e-12)
  assert np.all(np.asarray(P.sampled_gaussian(e, 0.0, 0.9)) == 0.0)
  # Max over directions.
  both = np.asarray(P.sampled_gaussian(e, 0.3, 0.9))
  rm = np.asarray(P.sampled_gaussian(e, 0.3, 0.9, direction="remove"))
  ad = np.asarray(P.sampled_gaussian(e, 0.3, 0.9, direction="add"))
  np.testing.assert_array_equal(both, np.maximum(rm, ad))
  # Add direction vanishes for ε ≥ -log(1-q).
  assert float(P.sampled_gaussian(-math.log(0.7) + 1e-9, 0.3, 0.9, direction="add")) == 0.0


def test_sampled_gaussian_matches_dp_accounting():
  from dp_accounting.pld import privacy_loss_mechanism as plm
  eps = np.array([0.0, 0.05, 0.3, 1.0, 2.0, 4.0])
  for q, s in [(0.01, 1.0), (0.1, 0.7), (0.5, 2.0), (1.0, 1.5), (0.003, 0.5)]:
    for direction, adj in [("remove", plm.AdjacencyType.REMOVE), ("add", plm.AdjacencyType.ADD)]:
      pl = plm.GaussianPrivacyLoss(s, sampling_prob=q, adjacency_type=adj)
      theirs = np.asarray(pl.get_delta_for_epsilon(eps))
      ours = np.asarray(P.sampled_gaussian(eps, q, s, direction=direction))
      mask = theirs > 1e-10
      np.testing.assert_allclose(ours[mask], theirs[mask], rtol=1e-6)
      np.testing.assert_allclose(ours[~mask], theirs[~mask], atol=1e-10)


# --------------------------------------------------------------------------
# Thm 6: MGF from the profile = RDP of the Gaussian
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [1.0, 2.0, 4.0])
def test_thm6_mgf_from_profile_is_gaussian_rdp(sigma):
  from jaxdp import rdp
  # Composite Gauss–Legendre on a fine panel grid, one vectorised profile call.
  nodes, weights = np.polynomial.legendre.leggauss(40)
  for alpha in (1.5, 2.0, 4.0, 8.0):
    s = alpha - 1.0
    # log integrand ≈ sε - (εσ)²/2: negligible beyond ε = 2s/σ² + 40/σ.
    upper = 2 * s / sigma**2 + 40.0 / sigma
    edges = np.linspace(0.0, upper, 201)
    mid, half = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    x = (mid[:, None] + half[:, None] * nodes[None, :]).ravel()
    w = (half[:, None] * weights[None, :]).ravel()
    ld = np.asarray(P.gaussian_log_delta(x, sigma))
    integral = np.sum(w * (np.exp(s * x + ld) + np.exp(-(s + 1) * x + ld)))
    mgf = 1.0 + s * (s + 1.0) * integral
    rdp_from_profile = math.log(mgf) / s
    assert rdp_from_profile == pytest.approx(alpha / (2 * sigma**2), rel=1e-7)
    assert rdp_from_profile == pytest.approx(float(rdp.gaussian(sigma, alpha)), rel=1e-7)


# --------------------------------------------------------------------------
# Hockey-stick divergences
# --------------------------------------------------------------------------


def test_hockey_stick_matches_mpmath():
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(7), size=5)
  q = rng.dirichlet(np.ones(7), size=5)
  eps = np.array([0.0, 0.1, 0.5, 1.0, 3.0])
  got = np.asarray(P.hockey_stick(p, q, eps))
  got_log = np.asarray(P.log_hockey_stick(np.log(p), np.log(q), eps))
  for i in range(5):
    ref = R.ref_hockey_stick(p[i], q[i], eps[i])
    if ref == 0:
      assert got[i] <= 1e-15
      continue
    assert 0 <= _rel_one_sided(got[i], ref) <= 1e-12
    assert 0 <= float(mp.exp(got_log[i]) / ref - 1) <= 1e-12
  # Batch broadcast: one ε for all rows, several ε for one pair.
  assert P.hockey_stick(p, q, 0.2).shape == (5,)
  assert P.hockey_stick(p[0], q[0], eps).shape == (5,)


def test_hockey_stick_edge_cases():
  p = np.array([0.5, 0.5, 0.0])
  q = np.array([0.0, 0.5, 0.5])
  assert float(P.hockey_stick(p, q, 1e6)) == pytest.approx(0.5, rel=1e-14)
  assert float(P.hockey_stick(p, q, np.inf)) == pytest.approx(0.5, rel=1e-14)
  lp = np.log(np.where(p > 0, p, 1.0)) + np.where(p > 0, 0, -np.inf)
  lq = np.log(np.where(q > 0, q, 1.0)) + np.where(q > 0, 0, -np.inf)
  assert float(np.exp(P.log_hockey_stick(lp, lq, 3.0))) == pytest.approx(0.5, rel=1e-14)
  assert float(P.hockey_stick(q, q, 0.0)) <= 1e-15


# --------------------------------------------------------------------------
# Amplification and tightness (Thms 8–11, 13, Lemma 12)
# --------------------------------------------------------------------------


def _two_point_profile(p1_x, p1_xp, eps):
  """max over orders of D_{e^ε} between Bernoulli outputs (independent numpy)."""
  a = np.stack([p1_x, 1 - p1_x], -1)
  b = np.stack([p1_xp, 1 - p1_xp], -1)
  c = np.exp(eps)[..., None]
  d1 = np.sum(np.maximum(a - c * b, 0), -1)
  d2 = np.sum(np.maximum(b - c * a, 0), -1)
  return np.maximum(d1, d2), a, b


@pytest.mark.parametrize("kind", ["poisson", "wor", "wr"])
def test_randomized_membership_attains_bounds(kind):
  eps = np.array([0.0, 0.1, 0.5, 1.0, 2.0])
  for p in (0.6, 0.8, 0.95, 0.3):
    base = np.asarray(P.randomized_response(eps, p))
    if kind == "poisson":
      gamma = 0.07
      eta = gamma
      eps_p, delta_p = P.amplify_poisson(eps, base, gamma)
    elif kind == "wor":
      m, n = 5, 40
      eta = m / n
      eps_p, delta_p = P.amplify_without_replacement(eps, base, m, n)
    else:
      m, n = 6, 30
      eta = 1 - (1 - 1 / n) ** m
      # Membership is binary: the k-th group profile of M_{v,p} is ψ_p.
      group = np.repeat(base[:, None], m, axis=1)
      eps_p, delta_p = P.amplify_with_replacement(eps, group, m, n)
    eps_p = np.asarray(eps_p)
    delta_p = np.asarray(delta_p)
    # Output law of M_{v,p}∘S: v sampled w.p. η → R_p(1), else R_p(0).
    pt = p
    p_x = eta * pt + (1 - eta) * (1 - pt)
    p_xp = 1 - pt
    exact, a, b = _two_point_profile(np.full_like(eps, p_x), np.full_like(eps, p_xp), eps_p)
    np.testing.assert_allclose(delta_p, exact, rtol=1e-12, atol=1e-15)
    assert np.all(delta_p >= exact)
    np.testing.assert_allclose(P.randomized_membership(eps_p, p, eta), exact, rtol=1e-12, atol=1e-15)
    got = np.maximum(np.asarray(P.hockey_stick(a, b, eps_p)), np.asarray(P.hockey_stick(b, a, eps_p)))
    np.testing.assert_allclose(got, exact, rtol=1e-12, atol=1e-15)


def test_amplify_formulas_and_rounding():
  e, d = np.array([0.0, 1e-8, 0.5, 3.0, 800.0]), 1e-6
  eps_p, delta_p = P.amplify_poisson(e, d, 0.01)
  with mp.workdps(50):
    ref = [mp.log(1 + mp.mpf("0.01") * mp.expm1(x)) for x in e]
  for ours, r in zip(np.asarray(eps_p), ref):
    if r == 0:
      assert ours == 0
    else:
      assert 0 <= float(mp.mpf(float(ours)) / r - 1) <= 1e-14
  assert np.all(np.asarray(delta_p) >= 1e-8)
  assert np.asarray(P.amplify_poisson(np.inf, 0.1, 0.3)[0]) == np.inf
  assert np.asarray(P.amplify_poisson(np.inf, 0.1, 0.0)[0]) == 0.0
  ew, dw = P.amplify_without_replacement(1.0, 1e-5, 10, 100)
  assert float(ew) == pytest.approx(math.log1p(0.1 * math.expm1(1.0)), rel=1e-14)
  assert float(dw) == pytest.approx(1e-6, rel=1e-14)


def test_amplify_with_replacement_gaussian_group_and_truncation():
  eps, sigma, m, n = 1.0, 2.0, 20, 200
  k = np.arange(1, m + 1)
  group = np.asarray(P.gaussian_group(eps, sigma, k))
  eps_p, delta_p = P.amplify_with_replacement(eps, group, m, n)
  with mp.workdps(40):
    ref = mp.fsum(mp.binomial(m, j) * mp.mpf(1) / n**j * (1 - mp.mpf(1) / n)**(m - j)
                  * R.ref_gaussian_delta(eps, sigma, float(j)) for j in range(1, m + 1))
    eta = 1 - (1 - mp.mpf(1) / n)**m
    ref_eps = mp.log(1 + eta * mp.expm1(eps))
  assert 0 <= _rel_one_sided(delta_p, ref) <= 1e-10
  assert 0 <= _rel_one_sided(eps_p, ref_eps) <= 1e-12
  # Only K = 3 group deltas: the missing terms are bounded by the binomial tail.
  _, delta_short = P.amplify_with_replacement(eps, group[:3], m, n)
  with mp.workdps(40):
    tail = mp.fsum(mp.binomial(m, j) * mp.mpf(1) / n**j * (1 - mp.mpf(1) / n)**(m - j)
                   for j in range(4, m + 1))
  assert float(delta_short) >= float(delta_p)
  assert float(delta_short) == pytest.approx(float(ref - mp.fsum(
      mp.binomial(m, j) * mp.mpf(1) / n**j * (1 - mp.mpf(1) / n)**(m - j)
      * R.ref_gaussian_delta(eps, sigma, float(j)) for j in range(4, m + 1)) + tail), rel=1e-8)


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("call, name", [
    (lambda: P.gaussian(-0.1, 1.0), "epsilon"),
    (lambda: P.gaussian(0.1, 0.0), "sigma"),
    (lambda: P.gaussian(0.1, 1.0, -1.0), "sensitivity"),
    (lambda: P.gaussian_epsilon(0.0, 1.0), "delta"),
    (lambda: P.gaussian_epsilon(1.0, 1.0), "delta"),
    (lambda: P.analytic_gaussian_sigma(1.0, 1.5), "delta"),
    (lambda: P.analytic_gaussian_sigma(-1.0, 1e-5), "epsilon"),
    (lambda: P.laplace(0.1, -1.0), "b"),
    (lambda: P.sampled_gaussian(0.1, 1.2, 1.0), "q"),
    (lambda: P.sampled_gaussian(0.1, 0.1, -1.0), "sigma"),
    (lambda: P.sampled_gaussian(0.1, 0.1, 1.0, direction="both"), "direction"),
    (lambda: P.amplify_poisson(0.1, 1e-5, 1.5), "gamma"),
    (lambda: P.amplify_poisson(0.1, 2.0, 0.5), "delta"),
    (lambda: P.amplify_without_replacement(0.1, 1e-5, 11, 10), "m"),
    (lambda: P.amplify_without_replacement(0.1, 1e-5, 2.5, 10), "m"),
    (lambda: P.amplify_with_replacement(0.1, [1e-5, 1e-4], 12, 10), "m"),
    (lambda: P.amplify_with_replacement(0.1, [1e-5, 1.4], 2, 10), "group_deltas"),
    (lambda: P.hockey_stick([0.5, 0.6], [0.5, 0.5], 0.1), "p"),
    (lambda: P.hockey_stick([0.5, 0.5], [-0.5, 1.5], 0.1), "q"),
    (lambda: P.hockey_stick([0.5, 0.5], [0.5, 0.5], -0.1), "epsilon"),
    (lambda: P.log_hockey_stick(np.log([0.5, 0.6]), np.log([0.5, 0.5]), 0.1), "log_p"),
    (lambda: P.gaussian_group(0.1, 1.0, 0), "k"),
    (lambda: P.randomized_membership(0.1, 0.7, 1.5), "eta"),
])
def test_bad_input_raises_naming_argument(call, name):
  with pytest.raises(ValueError, match=name):
    call()


# --------------------------------------------------------------------------
# JAX transformations, dtypes
# --------------------------------------------------------------------------


def test_jit_vmap_and_traced_inputs():
  e = jnp.linspace(0.0, 5.0, 7)
  s = jnp.linspace(0.3, 4.0, 7)
  eager = P.gaussian(e, s)
  np.testing.assert_allclose(jax.jit(P.gaussian)(e, s), eager, rtol=1e-12)
  np.testing.assert_allclose(jax.vmap(P.gaussian)(e, s), eager, rtol=1e-12)
  sg = jax.jit(lambda e, q, s: P.sampled_gaussian(e, q, s))(e, 0.05, s)
  np.testing.assert_allclose(sg, P.sampled_gaussian(e, 0.05, s), rtol=1e-12)
  d = jnp.array([1e-6, 1e-3])
  np.testing.assert_allclose(jax.jit(P.gaussian_epsilon)(d, 1.0), P.gaussian_epsilon(d, 1.0))
  np.testing.assert_allclose(jax.jit(P.analytic_gaussian_sigma)(1.0, d), P.analytic_gaussian_sigma(1.0, d))
  out = jax.jit(P.amplify_poisson)(e, 1e-6, 0.1)
  assert out[0].shape == (7,)
  assert jax.jit(P.hockey_stick)(jnp.array([0.3, 0.7]), jnp.array([0.6, 0.4]), 0.1).shape == ()


def test_grad_finite():
  g = jax.jit(jax.grad(lambda s, e: P.gaussian(e, s)))
  gl = jax.jit(jax.grad(lambda s, e: P.gaussian_log_delta(e, s)))
  ss, ee = np.meshgrid([0.01, 0.3, 1.0, 10.0, 1e3], [0.0, 0.5, 5.0, 80.0])
  assert np.all(np.isfinite(jax.vmap(g)(ss.ravel(), ee.ravel())))
  assert np.all(np.isfinite(jax.vmap(gl)(ss.ravel(), ee.ravel())))
  # Derivative sign: more noise, smaller δ.
  assert g(1.0, 1.0) < 0
  # Matches finite differences.
  h = 1e-6
  fd = (P.gaussian(1.0, 1.0 + h) - P.gaussian(1.0, 1.0 - h)) / (2 * h)
  assert float(g(1.0, 1.0)) == pytest.approx(float(fd), rel=1e-6)
  gs = jax.grad(lambda s: P.sampled_gaussian(0.5, 0.01, s))(1.0)
  assert np.isfinite(gs)
  ga = jax.grad(lambda e: P.analytic_gaussian_sigma(e, 1e-5))(1.0)
  assert np.isfinite(ga) and ga < 0


def test_float32_kernels():
  with jax.enable_x64(False):
    e = jnp.array([0.0, 0.5, 2.0, 20.0], jnp.float32)
    d = P.gaussian(e, jnp.float32(1.0))
    assert d.dtype == jnp.float32
    ref = np.array([float(R.ref_gaussian_delta(x, 1.0)) for x in np.asarray(e).tolist()])
    assert np.all(np.isfinite(d))
    np.testing.assert_allclose(d, ref, rtol=1e-4, atol=1e-37)
    rep = ref > 1e-37
    assert np.all(np.asarray(d)[rep] >= ref[rep] * (1 - 1e-6))
    ld = P.gaussian_log_delta(jnp.float32(80.0), jnp.float32(0.3))
    assert np.isfinite(ld) and ld.dtype == jnp.float32
    sg = P.sampled_gaussian(e, jnp.float32(0.01), jnp.float32(1.0))
    assert sg.dtype == jnp.float32 and np.all(np.isfinite(sg))
    s = P.analytic_gaussian_sigma(jnp.float32(1.0), jnp.float32(1e-5))
    assert s.dtype == jnp.float32
  s64 = float(P.analytic_gaussian_sigma(1.0, 1e-5))
  assert s64 <= float(s) <= s64 * (1 + 1e-4)


def test_broadcasting_shapes():
  e = np.linspace(0, 3, 4)[:, None]
  s = np.array([0.5, 1.0, 2.0])
  assert P.gaussian(e, s).shape == (4, 3)
  assert P.sampled_gaussian(e, np.array([0.01, 0.1, 1.0]), 1.0).shape == (4, 3)
  assert P.gaussian_epsilon(np.array([1e-5, 1e-6])[:, None], s).shape == (2, 3)
  assert P.analytic_gaussian_sigma(e[1:], np.array([1e-5, 1e-6, 1e-7])).shape == (3, 3)
