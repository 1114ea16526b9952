"""Tests for jaxdp.rdp: sampled-Gaussian RDP kernels and conversions.

References: mpmath direct integration (tests/reference.py, independent of both
the binomial sum and the quadrature) and dp_accounting as a test-only oracle.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import rdp
from reference import ref_sgm_rdp

# Orders used by dp_accounting's RdpAccountant by default.
DP_ORDERS = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) +
                     [128, 256, 512, 1024], dtype=np.float64)

# (q, sigma, alpha): hard cases named in the issue plus a spread of regimes.
HARD_CASES = [
    # dp_accounting drops these orders (series does not converge in 1000 terms)
    (0.1, 0.5, 1.1), (0.1, 0.5, 1.2), (0.1, 0.5, 1.3), (0.1, 0.5, 1.4),
    (0.1, 0.5, 1.5), (0.1, 0.5, 1.6),
    # dp_accounting over-reports here (truncated series), ~7% at α = 1.1
    (0.01, 1.0, 1.1), (0.05, 2.0, 1.1), (256 / 60000, 1.1, 1.1),
    # α → 1 (tensorflow/privacy#166 returned 0 at α = 1 + 1e-8)
    (0.01, 1.0, 1.0001), (0.01, 4.0, 1.0 + 1e-6), (0.2, 1.0, 1.0 + 1e-8),
    # tiny q (Opacus loses precision at q = 1e-9: log(1-q) instead of log1p)
    (1e-8, 1.0, 2.0), (1e-9, 1.0, 32.0), (1e-8, 0.3, 2.5), (1e-8, 1e4, 5.5),
    (1e-8, 2.0, 1.5),
    # large α (Opacus: NaN for integer α ≳ 1030)
    (0.01, 1.0, 1024.0), (0.01, 1.0, 1031.0), (0.001, 10.0, 4096.0), (0.2, 50.0, 10000.5),
    (0.13, 50.0, 10000.3), (0.3, 2.0, 1000.5), (0.5, 0.3, 100.5),
    # small σ, q near 1
    (0.99, 0.3, 3.7), (0.9, 0.3, 2.0), (0.5, 0.3, 7.0), (0.999, 0.5, 1.05),
    # large σ
    (0.5, 1e4, 3.0), (0.01, 1e3, 2.5), (0.1, 100.0, 1000.0),
    # typical DP-SGD
    (256 / 60000, 1.1, 8.5), (256 / 60000, 1.1, 32.0), (0.01, 4.0, 12.0), (0.02, 0.8, 6.25),
    (0.001, 0.6, 3.3), (0.05, 1.5, 17.0), (0.1, 1.0, 2.0), (0.3, 5.0, 44.4),
]


def _random_cases(n, seed):
  rng = np.random.default_rng(seed)
  q = 10 ** rng.uniform(-8, 0, n)
  s = 10 ** rng.uniform(math.log10(0.3), 2, n)
  a = 1 + 10 ** rng.uniform(-3, 3, n)
  return list(zip(q, s, a))


def _ours_elementwise(cases, traced_alpha=False):
  q, s, a = (np.array(c, dtype=np.float64) for c in zip(*cases))
  with jax.enable_x64(True):
    if traced_alpha:
      return np.asarray(jax.jit(rdp.sampled_gaussian)(q, s, a))
    return np.asarray(rdp.sampled_gaussian(q, s, a))


@pytest.fixture(scope="module")
def hard_refs():
  cases = HARD_CASES + _random_cases(12, seed=7)
  return cases, np.array([float(ref_sgm_rdp(*c, dps=30)) for c in cases])


@pytest.mark.parametrize("traced_alpha", [False, True])
def test_matches_mpmath(hard_refs, traced_alpha):
  cases, ref = hard_refs
  assert len(cases) >= 50
  ours = _ours_elementwise(cases, traced_alpha)
  assert np.all(np.isfinite(ours))
  rel = ours / ref - 1.0
  # Never below the reference (upper bound), and ≤ 1e-8 above it.
  assert np.all(rel >= -1e-12), [(cases[i], rel[i]) for i in np.nonzero(rel < -1e-12)[0]]
  assert np.all(rel <= 1e-8), [(cases[i], rel[i]) for i in np.nonzero(rel > 1e-8)[0]]


@pytest.mark.slow
def test_matches_mpmath_exhaustive():
  cases = _random_cases(300, seed=11)
  ref = np.array([float(ref_sgm_rdp(*c)) for c in cases])
  rel = _ours_elementwise(cases, traced_alpha=True) / ref - 1
  assert rel.min() >= -1e-12 and rel.max() <= 1e-8


def test_exact_integer_path_agrees_with_quadrature():
  q = np.array([[1e-8], [0.004], [0.1], [0.7]])
  s = np.array([[0.5], [1.1], [3.0], [20.0]])
  orders = np.array([2.0, 3.0, 7.0, 33.0, 200.0])
  with jax.enable_x64(True):
    exact = np.asarray(rdp.sampled_gaussian(q, s, orders))
    quad = np.asarray(jax.jit(rdp.sampled_gaussian)(q, s, jnp.asarray(orders)))
  np.testing.assert_allclose(exact, quad, rtol=5e-12)


def test_special_values():
  with jax.enable_x64(True):
    assert float(rdp.sampled_gaussian(0.0, 1.0, 10.0)) == 0.0
    assert float(rdp.sampled_gaussian(0.0, 1.0, 1.5)) == 0.0
    exact = np.array([2.0, 2.5, 1e4]) / (2 * 0.09)
    at_one = np.asarray(rdp.sampled_gaussian(1.0, 0.3, [2.0, 2.5, 1e4]))
    np.testing.assert_allclose(at_one, exact, rtol=1e-11)
    assert np.all(at_one >= exact)
    assert float(rdp.sampled_gaussian(0.1, 1.0, np.inf)) == np.inf
    assert np.isnan(float(rdp.sampled_gaussian(0.1, 1.0, 1.0)))
    # α = 1 + 1e-8 is positive, not 0 (tensorflow/privacy#166)
    assert float(rdp.sampled_gaussian(0.2, 1.0, 1 + 1e-8)) > 0


def test_broadcasting_layouts_agree():
  q = np.array([0.01, 0.2, 1e-6])
  s = np.array([0.8, 2.0, 5.0])
  orders = np.array([1.5, 2.0, 10.0, 64.0])
  with jax.enable_x64(True):
    outer = np.asarray(rdp.sampled_gaussian(q[:, None], s[:, None], orders))
    assert outer.shape == (3, 4)
    # general (per-element) layout
    gen = np.asarray(rdp.sampled_gaussian(np.repeat(q, 4), np.repeat(s, 4), np.tile(orders, 3)))
  np.testing.assert_allclose(outer.ravel(), gen, rtol=1e-13)


def test_dp_accounting_integer_orders():
  from dp_accounting.rdp import rdp_privacy_accountant as dpr
  orders = DP_ORDERS[DP_ORDERS == np.floor(DP_ORDERS)]
  for q, s in [(256 / 60000, 1.1), (0.01, 0.7), (0.1, 2.0), (0.5, 5.0), (1e-5, 1.0)]:
    theirs = dpr._compute_rdp_poisson_subsampled_gaussian(q, s, orders)
    with jax.enable_x64(True):
      ours = np.asarray(rdp.sampled_gaussian(q, s, orders))
    np.testing.assert_allclose(ours, theirs, rtol=1e-8)


def test_dp_accounting_epsilon_agreement():
  import dp_accounting
  from dp_accounting.rdp import rdp_privacy_accountant as dpr
  int_orders = DP_ORDERS[DP_ORDERS == np.floor(DP_ORDERS)]
  for q, s, t, d in [(256 / 60000, 1.1, 14062, 1e-5), (0.01, 1.0, 1000, 1e-5), (0.05, 3.0, 500, 1e-6)]:
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s))
    # Integer orders: both exact → agree to 1e-8.
    acc = dpr.RdpAccountant(int_orders)
    acc.compose(event, t)
    np.testing.assert_allclose(jaxdp.epsilon(q, s, t, d, orders=int_orders), acc.get_epsilon(d),
                               rtol=1e-8)
    # All default orders: dp_accounting truncates its fractional-order series
    # (over-reporting near α → 1), so jaxdp is never above it and within 1e-5.
    acc = dpr.RdpAccountant(DP_ORDERS)
    acc.compose(event, t)
    theirs = acc.get_epsilon(d)
    ours = jaxdp.epsilon(q, s, t, d, orders=DP_ORDERS)
    assert ours <= theirs * (1 + 1e-10)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_classic_dpsgd_sanity_value():
  # MNIST DP-SGD: q = 256/60000, σ = 1.1, 60 epochs, δ = 1e-5 → 2.5966 with
  # dp_accounting's default orders (their published value).
  steps = int(60 * 60000 / 256)
  eps = jaxdp.epsilon(256 / 60000, 1.1, steps, 1e-5, orders=DP_ORDERS)
  assert abs(eps - 2.5966) < 5e-4
  # jaxdp's coarser default grid costs at most 0.1% here
  assert jaxdp.epsilon(256 / 60000, 1.1, steps, 1e-5) <= eps * (1 + 1e-3)


def test_bound_is_above_exact():
  q = np.array([0.001, 0.01, 0.05, 0.2])[:, None, None]
  s = np.array([4.0, 8.0, 20.0])[None, :, None]
  orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
  with jax.enable_x64(True):
    bound = np.asarray(rdp.sampled_gaussian_bound(q, s, orders))
    exact = np.asarray(rdp.sampled_gaussian(q, s, orders))
  finite = np.isfinite(bound)
  assert finite.sum() > 20
  assert np.all(bound[finite] >= exact[finite])
  # conditions fail → inf
  with jax.enable_x64(True):
    assert float(rdp.sampled_gaussian_bound(0.3, 5.0, 2.0)) == np.inf
    assert float(rdp.sampled_gaussian_bound(0.01, 2.0, 2.0)) == np.inf


def test_gaussian_rdp():
  with jax.enable_x64(True):
    np.testing.assert_allclose(rdp.gaussian(2.0, [2.0, 10.0]), [0.25, 1.25], rtol=1e-11)


def test_to_epsilon_formulas():
  orders = np.array([2.0, 4.0, 8.0])
  curve = np.array([0.1, 0.3, 0.9])
  delta = 1e-5
  classic = curve + math.log(1 / delta) / (orders - 1)
  improved = curve + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
  with jax.enable_x64(True):
    e_c, o_c = rdp.to_epsilon(curve, orders, delta, method="classic")
    e_i, o_i = rdp.to_epsilon(curve, orders, delta)
  np.testing.assert_allclose(e_c, classic.min(), rtol=1e-11)
  assert float(o_c) == orders[np.argmin(classic)]
  np.testing.assert_allclose(e_i, improved.min(), rtol=1e-11)
  assert float(e_i) >= improved.min()  # rounded up, never down
  assert float(e_i) <= float(e_c)


def test_to_delta_inverts_to_epsilon():
  with jax.enable_x64(True):
    curve = rdp.dpsgd_rdp(0.01, 1.0, 1000, rdp.DEFAULT_ORDERS)
    eps, _ = rdp.to_epsilon(curve, rdp.DEFAULT_ORDERS, 1e-6)
    d = float(rdp.to_delta(curve, rdp.DEFAULT_ORDERS, eps))
  assert d <= 1e-6 * (1 + 1e-9)
  assert d > 1e-6 * 0.5


def test_rdp_epsilon_upper_bounds_exact_one_step_profile():
  # One step: the exact (ε, δ) curve is the sampled-Gaussian privacy profile;
  # any RDP-derived ε must be at least the exact one.
  from scipy.stats import norm
  from scipy.optimize import brentq
  q, s, delta = 0.05, 1.0, 1e-5

  def exact_delta(e):  # remove direction (the larger one here), closed form
    t = math.log1p((math.exp(e) - 1) / q)
    return q * (norm.cdf(-t * s + 1 / (2 * s)) - math.exp(t) * norm.cdf(-t * s - 1 / (2 * s)))

  exact_eps = brentq(lambda e: exact_delta(e) - delta, 1e-6, 50)
  assert jaxdp.epsilon(q, s, 1, delta) >= exact_eps


def test_grid_broadcasting_and_monotonicity():
  q = np.geomspace(1e-4, 0.5, 30)[:, None]
  s = np.linspace(0.5, 8, 30)[None, :]
  eps = jaxdp.epsilon(q, s, 1000, 1e-5)
  assert eps.shape == (30, 30)
  assert np.all(np.isfinite(eps))
  assert np.all(np.diff(eps, axis=0) >= 0)   # non-decreasing in q
  assert np.all(np.diff(eps, axis=1) <= 0)   # non-increasing in σ


def test_delta_top_level():
  d = jaxdp.delta(0.01, 1.0, 1000, 2.0)
  e = jaxdp.epsilon(0.01, 1.0, 1000, d)
  assert 0 < d < 1
  assert e <= 2.0 * (1 + 1e-6)


def test_jit_vmap_grad():
  orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0])
  with jax.enable_x64(True):
    f = jax.jit(lambda q, s: rdp.dpsgd_epsilon(q, s, 1000, 1e-5, orders))
    v = jax.vmap(f)(jnp.array([0.01, 0.02]), jnp.array([1.0, 1.5]))
    assert v.shape == (2,) and np.all(np.isfinite(v))
    g = jax.grad(lambda s: rdp.dpsgd_epsilon(0.01, s, 1000, 1e-5, orders))(1.2)
    assert np.isfinite(g) and g < 0
    # ∂RDP/∂σ at fixed order via the traced-α quadrature, vs finite differences
    r = lambda s: rdp.sampled_gaussian(0.05, s, jnp.asarray(2.5))
    gs = jax.grad(r)(1.3)
    fd = (r(1.3 + 1e-5) - r(1.3 - 1e-5)) / 2e-5
    np.testing.assert_allclose(gs, fd, rtol=1e-5)


def test_float32_inside_jit_is_conservative():
  orders = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0])
  q = np.array([0.001, 0.01, 0.05, 0.2], np.float32)
  s = np.array([0.7, 1.0, 2.0, 5.0], np.float32)
  with jax.enable_x64(False):
    e32 = np.asarray(jax.jit(lambda q, s: rdp.dpsgd_epsilon(q, s, 1000, 1e-5, orders))(q, s))
  assert e32.dtype == np.float32
  e64 = jaxdp.epsilon(q.astype(np.float64), s.astype(np.float64), 1000, 1e-5, orders=orders)
  assert np.all(e32 >= e64)
  np.testing.assert_allclose(e32, e64, rtol=1e-3)


def test_user_x64_setting_is_left_alone():
  before = jax.config.jax_enable_x64
  jaxdp.epsilon(0.01, 1.0, 100, 1e-5, orders=np.array([2.0, 4.0]))
  assert jax.config.jax_enable_x64 == before


@pytest.mark.parametrize("kwargs, name", [
    (dict(q=1.5), "q"), (dict(q=-0.1), "q"), (dict(sigma=0.0), "sigma"),
    (dict(sigma=np.nan), "sigma"), (dict(delta=1.0), "delta"), (dict(delta=0.0), "delta"),
    (dict(steps=2.5), "steps"), (dict(steps=-1), "steps"), (dict(q=[0.1, np.nan]), "q"),
])
def test_validation(kwargs, name):
  args = dict(q=0.01, sigma=1.0, steps=100, delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    jaxdp.epsilon(**args)


def test_validation_orders_and_shapes():
  with pytest.raises(ValueError, match="orders"):
    jaxdp.epsilon(0.01, 1.0, 100, 1e-5, orders=[0.5, 2.0])
  with pytest.raises(ValueError, match="broadcast"):
    jaxdp.epsilon([0.01, 0.02], [1.0, 2.0, 3.0], 100, 1e-5)
  with pytest.raises(ValueError, match=r"index \(1,\)"):
    jaxdp.epsilon([0.01, 2.0], 1.0, 100, 1e-5)
