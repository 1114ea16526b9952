"""Tests for jaxdp.rdp_samplers: RDP of WOR, truncated Poisson, balls-in-bins
and shuffled batches.

Oracles: exact enumeration of every batch of tiny datasets in mpmath
(tests/sampler_reference.py, independent of the formulas), mpmath forward
differences, and dp_accounting (its RDP for sampling without replacement, its
truncated-Poisson PLD parameters) as a test-only peer.
"""

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import sampler_reference as R
from jaxdp._src.kernels import rdp_wor as _rdp_wor
from jaxdp import rdp
from jaxdp import rdp_samplers as rs

ORDERS = np.array([2.0, 3.0, 5.0, 8.0])
# Orders for the references that need quadrature (both distributions mixtures).
QORDERS = np.array([2.0, 3.0, 5.0])


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _ratio_at_least_one(kernel, exact, rtol=1e-9):
  kernel = np.asarray(kernel, np.float64)
  exact = np.asarray([float(e) for e in exact])
  assert np.all(kernel >= exact * (1 - rtol)), (kernel, exact)
  return kernel / exact


# --------------------------------------------------------------------------
# Forward differences (the ingredient dp_accounting gets wrong at large σ)
# --------------------------------------------------------------------------


def test_forward_differences_match_mpmath():
  sig = np.array([0.05, 0.3, 7.7, 100.0])
  fd = np.asarray(_rdp_wor._log_forward_differences(jnp.asarray(1 / (2 * sig**2)), 256))
  with mp.workdps(700):
    for si, s in enumerate(sig):
      c = 1 / (2 * mp.mpf(s) ** 2)
      for l in (2, 3, 9, 64, 256):
        ex = float(mp.log(mp.fsum((-1) ** (l - i) * mp.binomial(l, i) * mp.exp(i * (i - 1) * c)
                                  for i in range(l + 1))))
        assert fd[si, l] >= ex                                  # an upper bound ...
        assert fd[si, l] - ex <= 1e-10 + 1e-14 * abs(ex)        # ... and a tight one


# --------------------------------------------------------------------------
# Sampling without replacement
# --------------------------------------------------------------------------

WOR_ORDERS = np.concatenate([np.arange(2.0, 33.0), [64.0, 256.0, 300.0, 1024.0, 1.5, 2.5, 10.7, 255.5]])


def test_wor_replace_one_matches_dp_accounting():
  from dp_accounting import dp_event, privacy_accountant
  from dp_accounting.rdp import rdp_privacy_accountant as ra
  # dp_accounting's own test configuration first, then other regimes in which
  # its forward differences are still accurate.
  configs = [(1000, 10, 1.0), (60000, 256, 1.1), (1000, 100, 2.0), (100, 50, 0.8), (10**5, 1, 0.3)]
  n, b, s = (np.array(x, np.float64)[:, None] for x in zip(*configs))
  mine = np.asarray(rs.without_replacement_gaussian(n, b, s, WOR_ORDERS[None, :]))
  for row, (nn, bb, ss) in enumerate(configs):
    acc = ra.RdpAccountant(list(WOR_ORDERS), privacy_accountant.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_event.SampledWithoutReplacementDpEvent(nn, bb, dp_event.GaussianDpEvent(ss)))
    ref = np.minimum(acc._rdp, WOR_ORDERS / (2 * ss * ss))   # we also cap by the Gaussian
    np.testing.assert_allclose(mine[row], ref, rtol=1e-9)
    assert np.all(mine[row] >= ref)


def test_wor_replace_one_beats_dp_accounting_where_it_cancels():
  from dp_accounting.rdp import rdp_privacy_accountant as ra
  # σ = 20: dp_accounting's signed log-space differences of order ≥ 64 are
  # garbage (log Δ^128 ≈ +57 instead of -96), inflating its bound.
  mine = np.asarray(rs.without_replacement_gaussian(1000, 300, 20.0, np.array([64.0, 128.0])))
  theirs = float(ra._compute_rdp_sample_wor_gaussian(0.3, 20.0, [128.0])[0])
  assert mine[1] < 0.2 * theirs
  assert mine[1] > mine[0]


@pytest.mark.parametrize("others,batch,sigma", [([0.0, 0.0, 0.0], 2, 0.5), ([-1.0, -1.0, -1.0], 2, 0.6)])
def test_wor_replace_one_upper_bounds_enumeration(others, batch, sigma):
  # Replace-one sensitivity is 2 clip units: noise std = 2σ in those units.
  d1 = R.without_replacement_mixture(others + [1.0], batch)
  d2 = R.without_replacement_mixture(others + [-1.0], batch)
  exact = [R.renyi_both_1d(d1, d2, int(a), 2 * sigma) for a in QORDERS]
  _ratio_at_least_one(rs.without_replacement_gaussian(len(others) + 1, batch, sigma, QORDERS), exact)


@pytest.mark.parametrize("others,tight", [([-1.0, -1.0, -1.0], True), ([0.0, 1.0, -1.0], False)])
def test_wor_add_remove_upper_bounds_enumeration(others, tight):
  sigma, batch = 0.8, 2
  big = R.without_replacement_mixture(others + [1.0], batch)
  small = R.without_replacement_mixture(others, batch)
  exact = [R.renyi_both_1d(big, small, int(a), sigma) for a in QORDERS]
  kernel = rs.without_replacement_gaussian(len(others) + 1, batch, sigma, QORDERS, relation="add_remove")
  ratio = _ratio_at_least_one(kernel, exact)
  if tight:   # others -1: the extra +1 displaces a -1, the dominating pair exactly
    np.testing.assert_allclose(ratio, 1.0, rtol=1e-8)


# --------------------------------------------------------------------------
# Truncated Poisson sampling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("others,q,cap,sigma", [
    ([-1.0, -1.0, -1.0], 0.4, 2, 1.0),     # worst case: truncation swaps -1 for +1
    ([0.0, 1.0, -1.0], 0.5, 1, 1.5),
])
def test_truncated_upper_bounds_enumeration(others, q, cap, sigma):
  big = R.poisson_capacity_mixture(others + [1.0], q, cap)
  small = R.poisson_capacity_mixture(others, q, cap)
  exact = [R.renyi_both_1d(big, small, int(a), sigma) for a in QORDERS]
  _ratio_at_least_one(rs.truncated_poisson_gaussian(len(others) + 1, q, cap, sigma, QORDERS), exact)


def test_truncated_pair_matches_dp_accounting_parameters():
  from scipy import stats
  for n, q, cap in [(1000, 0.01, 10), (60000, 256 / 60000, 300), (10**6, 1e-3, 1050), (100, 0.3, 20)]:
    pair = rs.truncated_poisson_pair(n, q, cap)
    # dp_accounting's from_truncated_subsampled_gaussian_mechanism:
    t = stats.binom.sf(cap - 1, n - 1, q)
    q_prime = stats.binom.sf(cap, n, q) * cap / t / n
    np.testing.assert_allclose(float(pair.block_weights[1]), t, rtol=1e-9)
    np.testing.assert_allclose(float(pair.p_weights[1, 1]), q_prime, rtol=1e-9)
    np.testing.assert_allclose(float(pair.block_weights.sum()), 1.0, rtol=1e-9)


def test_truncated_no_truncation_is_poisson_rdp():
  from dp_accounting.rdp import rdp_privacy_accountant as ra
  mine = np.asarray(rs.truncated_poisson_gaussian(1000, 0.01, 1000, 1.0, QORDERS))
  ref = ra._compute_rdp_poisson_subsampled_gaussian(0.01, 1.0, QORDERS)
  np.testing.assert_allclose(mine, ref, rtol=1e-9)
  assert np.all(np.asarray(rs.truncated_poisson_gaussian(1000, 0.01, 0, 1.0, QORDERS)) == 0.0)
  assert np.all(np.asarray(rs.truncated_poisson_gaussian(1000, 0.0, 5, 1.0, QORDERS)) == 0.0)


def test_truncated_pair_delta_between_enumeration_and_dp_accounting_pld():
  from dp_accounting.pld import privacy_loss_distribution as pld
  n, q, cap, sigma, eps = 4, 0.4, 2, 1.0, 0.5
  pair = rs.truncated_poisson_pair(n, q, cap)
  t, qp = float(pair.block_weights[1]), float(pair.p_weights[1, 1])
  blk = lambda rate, shift: {(shift,): rate, (0.0,): 1 - rate}
  n0 = {(0.0,): mp.mpf(1)}
  ours = max((1 - t) * R.hockey_stick_1d(blk(q, 1.0), n0, eps, sigma) + t * R.hockey_stick_1d(blk(qp, 2.0), n0, eps, sigma),
             (1 - t) * R.hockey_stick_1d(n0, blk(q, 1.0), eps, sigma) + t * R.hockey_stick_1d(n0, blk(qp, 2.0), eps, sigma))
  big = R.poisson_capacity_mixture([-1.0] * (n - 1) + [1.0], q, cap)
  small = R.poisson_capacity_mixture([-1.0] * (n - 1), q, cap)
  exact = max(R.hockey_stick_1d(big, small, eps, sigma), R.hockey_stick_1d(small, big, eps, sigma))
  theirs = pld.from_truncated_subsampled_gaussian_mechanism(n, q, cap, sigma).get_delta_for_epsilon(eps)
  assert exact <= ours <= theirs + 1e-9
  # The RDP bound converts to an even larger δ.
  assert float(rdp.to_delta(rs.truncated_poisson_gaussian(n, q, cap, sigma, QORDERS), QORDERS, eps)) >= ours


# --------------------------------------------------------------------------
# Balls-in-bins (random allocation), one epoch
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n,b,sigma", [(4, 2, 1.0), (6, 2, 0.7), (6, 2, 1.3)])
def test_balls_in_bins_remove_is_exact(n, b, sigma):
  k = n // b
  epoch = R.balls_in_bins_epoch_mixture([0.0] * (n - 1) + [1.0], k)
  null = {(0.0,) * k: mp.mpf(1)}
  exact = [R.renyi_closed_form(epoch, null, int(a), sigma) for a in ORDERS]
  ratio = _ratio_at_least_one(rs.balls_in_bins_gaussian_epoch(n, b, sigma, ORDERS, direction="remove"), exact)
  np.testing.assert_allclose(ratio, 1.0, rtol=1e-9)


def test_balls_in_bins_add_upper_bounds_exact():
  for sigma in (0.7, 2.0):
    exact = [R.balls_in_bins_add_renyi(2, int(a), sigma) for a in ORDERS]
    _ratio_at_least_one(rs.balls_in_bins_gaussian_epoch(4, 2, sigma, ORDERS, direction="add"), exact)


def test_balls_in_bins_epoch_bounds_one_step_of_general_data():
  # A single step is a post-processing of the epoch; data in {0, 1}.
  n, b, sigma = 6, 2, 1.0
  others = [0.0, 1.0, 1.0, 0.0, 1.0]
  step_big = R.balls_in_bins_step_mixture(others + [1.0], n // b)
  step_small = R.balls_in_bins_step_mixture(others, n // b)
  exact = [R.renyi_both_1d(step_big, step_small, int(a), sigma) for a in QORDERS]
  _ratio_at_least_one(rs.balls_in_bins_gaussian_epoch(n, b, sigma, QORDERS), exact)


def test_balls_in_bins_single_step_and_large_k():
  # k = 1: the unamplified Gaussian, exactly.
  np.testing.assert_allclose(rs.balls_in_bins_gaussian_epoch(7, 7, 1.3, ORDERS), ORDERS / (2 * 1.3**2), rtol=1e-9)
  # Large k: both directions are amplified far below the Gaussian (the add
  # direction through the certified integral bound of jaxdp._src.kernels.bins_add; its
  # value is about α(e^{1/σ²} - 1)/(2k)).
  rem = np.asarray(rs.balls_in_bins_gaussian_epoch(10**9, 1000, 2.0, ORDERS, direction="remove"))
  add = np.asarray(rs.balls_in_bins_gaussian_epoch(10**9, 1000, 2.0, ORDERS, direction="add"))
  assert np.all(rem < 1e-5 * ORDERS / 8.0)
  assert np.all(add >= 0) and np.all(add < 1e-5 * ORDERS / 8.0)


# --------------------------------------------------------------------------
# Shuffling
# --------------------------------------------------------------------------


def test_shuffle_add_remove_displacement_model_and_sensitivity():
  # Enumerate all permutations: N = 4 examples of gradient -1 in k = 2
  # batches of 2, plus (add/remove) one example of gradient +1.
  sigma = 1.0
  big = R.shuffle_epoch_mixture([-1.0] * 4 + [1.0], 2, 2)
  small = R.shuffle_epoch_mixture([-1.0] * 4, 2, 2)
  w = mp.mpf(4) / 5
  model = {(-2.0, -2.0): 1 - w, (0.0, -2.0): w / 2, (-2.0, 0.0): w / 2}
  assert set(big) == set(model)
  for key, val in model.items():
    assert abs(big[key] - val) < 1e-12
  assert list(small) == [(-2.0, -2.0)] and abs(small[(-2.0, -2.0)] - 1) < 1e-12
  # One batch (k = 1): the epoch's RDP exceeds α/(2σ²) (sensitivity 1 is
  # unsound under add/remove) and stays below shuffle_gaussian_epoch's.
  big1 = R.shuffle_epoch_mixture([-1.0] * 3 + [1.0], 3, 1)
  small1 = R.shuffle_epoch_mixture([-1.0] * 3, 3, 1)
  exact = [R.renyi_both_1d(big1, small1, int(a), sigma) for a in ORDERS]
  ratio = _ratio_at_least_one(rs.shuffle_gaussian_epoch(sigma, ORDERS), exact)
  assert np.all(np.array([float(e) for e in exact]) > np.asarray(rdp.gaussian(sigma, ORDERS)))
  np.testing.assert_allclose(rs.shuffle_gaussian_epoch(sigma, ORDERS, relation="zero_out"), rdp.gaussian(sigma, ORDERS))
  assert np.all(ratio < 4.0)


@pytest.mark.parametrize("relation", ["add_remove", "zero_out", "replace_one"])
def test_shuffle_lower_bound_below_upper_bound(relation):
  orders = rdp.DEFAULT_ORDERS
  n, b, sigma, epochs, delta = 1000, 10, 1.0, 5, 1e-5
  lower = rs.shuffle_lower_bound_epsilon(n, b, sigma, epochs, delta, relation=relation)
  upper = float(rdp.to_epsilon(epochs * rs.shuffle_gaussian_epoch(sigma, orders, relation=relation), orders, delta)[0])
  assert 0.0 < lower <= upper


def test_shuffle_lower_bound_single_batch_is_nearly_the_gaussian():
  # k = 1, zero-out: the pair is N(2) vs N(1) up to the shift: ε(δ) of the
  # Gaussian mechanism; the one-threshold test attains it almost exactly.
  from jaxdp import profiles
  lower = rs.shuffle_lower_bound_epsilon(50, 50, 1.0, 1, 1e-5, relation="zero_out")
  exact = float(profiles.gaussian_epsilon(1e-5, 1.0))
  assert 0.97 * exact <= lower <= exact


# --------------------------------------------------------------------------
# jit / vmap / extremes / validation
# --------------------------------------------------------------------------


def _wor_f32_vs_f64(n, b, sigma, alpha):
  fn = lambda *x: rs.without_replacement_gaussian(*x)
  with jax.enable_x64(False):
    v32 = np.asarray(jax.jit(fn)(*(np.asarray(x, np.float32) for x in (n, b, sigma, alpha))),
                     np.float64)
  with jax.enable_x64(True):
    args = (np.asarray(x, np.float32).astype(np.float64) for x in (n, b, sigma, alpha))
    v64 = np.asarray(jax.jit(fn)(*args))
  return v32, v64


def test_wor_float32_batch_of_128_is_an_upper_bound():
  """Regression (float32 scan, 2026-11-24): in this compiled batch of 128 σ the
  forward-difference table's alternating sums came out wrong on XLA CPU (two
  fused reductions), log m_6 = 17.20 for 18.04, and the table's error
  estimate accepted them: -5.2% at σ = 0.9116, α = 6 (right when alone)."""
  rng = np.random.default_rng(1)
  rng.uniform(0, 7, 512)
  rng.uniform(-8, 0, 512)
  sigma = (10**rng.uniform(np.log10(0.3), 3, 512))[:128]
  n = np.full(128, 26.0)
  v32, v64 = _wor_f32_vs_f64(n, np.ones(128), sigma, np.full(128, 6.0))
  assert np.all(v32 >= v64), (v32 / v64 - 1).min()


def test_wor_float32_cancelling_terms_are_covered():
  """float32, large α: WBK's terms i·log q, log C(α, i) and ~i²/(2σ²) cancel
  (previously -8.3e-5 relative in this batch)."""
  rng = np.random.default_rng(0)
  sigma = 10**rng.uniform(np.log10(0.3), 3, 128)
  alpha = np.round(10**rng.uniform(0.31, np.log10(4096), 128))
  v32, v64 = _wor_f32_vs_f64(np.full(128, 26.0), np.ones(128), sigma, alpha)
  assert np.all(v32 >= v64), (v32 / v64 - 1).min()
  assert np.all(v32 <= v64 * 1.05)


def test_jit_and_vmap_agree_with_eager():
  # (The truncated-Poisson kernel is jitted internally; jit of the public
  # function is in the slow test_traced_orders.)
  o = ORDERS
  f = jax.jit(lambda n, b, s: rs.without_replacement_gaussian(n, b, s, o))
  np.testing.assert_allclose(f(1000, 10, 1.0), rs.without_replacement_gaussian(1000, 10, 1.0, o), rtol=1e-12)
  v = jax.vmap(lambda s: rs.balls_in_bins_gaussian_epoch(1000, 10, s, o))
  np.testing.assert_allclose(v(jnp.array([0.7, 1.0])),
                             rs.balls_in_bins_gaussian_epoch(1000, 10, jnp.array([[0.7], [1.0]]), o), rtol=1e-12)
  p = jax.jit(rs.truncated_poisson_pair)(1000, 0.01, 10)
  np.testing.assert_allclose(p.block_weights, rs.truncated_poisson_pair(1000, 0.01, 10).block_weights, rtol=1e-12)


@pytest.mark.slow
def test_traced_orders():
  o = np.array([2.0, 8.0, 300.5])
  g = jax.jit(lambda a: rs.without_replacement_gaussian(1000, 10, 1.0, a))
  np.testing.assert_allclose(g(jnp.asarray(o)), rs.without_replacement_gaussian(1000, 10, 1.0, o), rtol=1e-12)
  assert math.isnan(float(g(jnp.array([0.5, 8.0, 9.0]))[0]))     # α ≤ 1 inside jit: NaN, not an error
  b = jax.jit(lambda a: rs.balls_in_bins_gaussian_epoch(1000, 10, 1.0, a))
  np.testing.assert_allclose(b(jnp.asarray(o)), rs.balls_in_bins_gaussian_epoch(1000, 10, 1.0, o), rtol=1e-12)
  t = jax.jit(lambda a: rs.truncated_poisson_gaussian(1000, 0.01, 12, 1.0, a))
  np.testing.assert_allclose(t(jnp.asarray(o[:2])), rs.truncated_poisson_gaussian(1000, 0.01, 12, 1.0, o[:2]),
                             rtol=1e-9)
  h = jax.jit(lambda n, q, c, s: rs.truncated_poisson_gaussian(n, q, c, s, o))
  np.testing.assert_allclose(h(1000, 0.01, 12, 1.0), rs.truncated_poisson_gaussian(1000, 0.01, 12, 1.0, o), rtol=1e-12)


def test_extreme_inputs_are_finite_and_monotone():
  # Fractional orders exercise this module's own interpolation; the kernels
  # built on rdp.sampled_gaussian get integer orders (its fractional-order
  # quadrature is tested in test_rdp.py and is slow to compile).
  mixed = np.array([1.01, 1.5, 2.0, 3.5, 8.0, 64.0, 255.5, 256.0])
  integer = np.array([2.0, 3.0, 8.0, 64.0, 256.0])
  n = np.array([1e9, 1e9, 2.0])[:, None, None]
  b = np.array([1.0, 1e5, 1.0])[:, None, None]
  sig = np.array([0.01, 1.0, 100.0])[None, :, None]
  for orders, v in ((mixed, rs.without_replacement_gaussian(n, b, sig, mixed)),
                    (mixed, rs.balls_in_bins_gaussian_epoch(n, b, sig, mixed)),
                    (integer, rs.without_replacement_gaussian(n, b, sig, integer, relation="add_remove")),
                    (integer, rs.truncated_poisson_gaussian(n, b / n, b, sig, integer))):
    v = np.asarray(v)
    assert v.shape == (3, 3, len(orders))
    assert np.all(np.isfinite(v)) and np.all(v >= 0)
    assert np.all(np.diff(v, axis=-1) >= -1e-9 * np.abs(v[..., 1:]))
    assert np.all(v <= 4 * orders / (2 * sig**2) * (1 + 1e-9))   # never worse than sensitivity 2


def test_validation():
  with pytest.raises(ValueError, match="relation"):
    rs.without_replacement_gaussian(10, 2, 1.0, 2.0, relation="swap")
  with pytest.raises(ValueError, match="batch_size"):
    rs.without_replacement_gaussian(10, 20, 1.0, 2.0)
  with pytest.raises(ValueError, match="sigma"):
    rs.balls_in_bins_gaussian_epoch(10, 2, 0.0, 2.0)
  with pytest.raises(ValueError, match="q"):
    rs.truncated_poisson_gaussian(10, 1.5, 2, 1.0, 2.0)
  with pytest.raises(ValueError, match="alpha"):
    rs.shuffle_gaussian_epoch(1.0, 0.5)
  with pytest.raises(ValueError, match="direction"):
    rs.balls_in_bins_gaussian_epoch(10, 2, 1.0, 2.0, direction="up")
