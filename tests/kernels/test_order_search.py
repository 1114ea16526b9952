"""The pruned minimum over orders (jaxdp._src.kernels.order_search) against evaluating all.

The reference is the exhaustive jitted path (:func:`jaxdp.rdp.dpsgd_epsilon`
/ ``dpsgd_delta``, every order evaluated), whose kernels are checked against
mpmath in test_rdp.py / test_soundness.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp._src.core import numerics as nx
from jaxdp import rdp
from jaxdp._src.kernels import order_bounds
from jaxdp._src.kernels import order_search as _order_search

DP_ORDERS = np.concatenate([1.0 + np.arange(1, 100) / 10.0, np.arange(11, 64), [128, 256, 512, 1024]])


def _configs(rng, n, sigma_lo=0.3):
  q = np.exp(rng.uniform(np.log(1e-6), 0.0, n))
  q[:3] = [0.0, 1.0, 0.5]
  sigma = np.exp(rng.uniform(np.log(sigma_lo), np.log(20.0), n))
  steps = np.round(np.exp(rng.uniform(0.0, np.log(1e6), n)))
  steps[3] = 0
  return q, sigma, steps


def _exhaustive(kind, q, sigma, steps, x, orders):
  fn = rdp.dpsgd_epsilon if kind == "epsilon" else rdp.dpsgd_delta
  with nx.x64():
    return np.asarray(jax.jit(lambda *a: fn(*a, orders))(q, sigma, steps, x))


# The default grid passed explicitly: with orders=None jaxdp.epsilon also
# searches between the grid orders (tests/kernels/test_continuous_order.py).
@pytest.mark.parametrize("orders", [DP_ORDERS, rdp.DEFAULT_ORDERS], ids=["dp_accounting", "default"])
def test_epsilon_equals_min_over_all_orders(orders):
  rng = np.random.default_rng(0)
  q, sigma, steps = _configs(rng, 300)
  delta = np.exp(rng.uniform(np.log(1e-12), np.log(1e-2), q.size))
  assert _order_search.plan(None if orders is None else tuple(orders)) is not None
  ours = jaxdp.epsilon(q, sigma, steps, delta, orders=orders)
  ref = _exhaustive("epsilon", q, sigma, steps, delta, rdp.DEFAULT_ORDERS if orders is None else orders)
  np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


# The default grid passed explicitly: with orders=None jaxdp.epsilon also
# searches between the grid orders (tests/kernels/test_continuous_order.py).
@pytest.mark.parametrize("orders", [DP_ORDERS, rdp.DEFAULT_ORDERS], ids=["dp_accounting", "default"])
def test_delta_equals_min_over_all_orders(orders):
  rng = np.random.default_rng(1)
  q, sigma, steps = _configs(rng, 300)
  eps = rng.uniform(0.0, 20.0, q.size)
  ours = jaxdp.delta(q, sigma, steps, eps, orders=orders)
  ref = _exhaustive("delta", q, sigma, steps, eps, rdp.DEFAULT_ORDERS if orders is None else orders)
  # δ = exp((α-1)·(T·ε(α) - …)): a 1e-12 relative change of ε(α) moves δ by
  # up to (α-1)·T·ε(α)·1e-12.
  np.testing.assert_allclose(ours, ref, rtol=1e-8, atol=1e-300)


def _large_delta_configs(n=300, seed=3):
  """Large δ (0.05-0.99), few steps, large q: where the improved conversion
  goes negative at some orders and the KL clause gives exactly 0 at others
  (the draws above, δ <= 1e-2, never reach it). The first two are the cases
  that exposed the dropped orders: q = 1, σ = 1, T = 2 and q = 0.3, σ = 1,
  T = 14, both at δ = 0.9."""
  rng = np.random.default_rng(seed)
  q = np.exp(rng.uniform(np.log(1e-3), 0.0, n))
  sigma = np.exp(rng.uniform(np.log(0.3), np.log(20.0), n))
  steps = np.round(np.exp(rng.uniform(0.0, np.log(1e4), n)))
  delta = rng.uniform(0.05, 0.99, n)
  q[:2], sigma[:2], steps[:2], delta[:2] = [1.0, 0.3], 1.0, [2.0, 14.0], 0.9
  return q, sigma, steps, delta


@pytest.mark.parametrize("orders", [DP_ORDERS, rdp.DEFAULT_ORDERS], ids=["dp_accounting", "default"])
def test_epsilon_equals_min_over_all_orders_at_large_delta(orders):
  # The search's bounds need ε(α) non-decreasing in the RDP value; the
  # improved conversion's negative values beside the KL clause's exact 0
  # broke that, and orders where ε is 0 were dropped (3 of these 300).
  q, sigma, steps, delta = _large_delta_configs()
  ours = jaxdp.epsilon(q, sigma, steps, delta, orders=orders)
  ref = _exhaustive("epsilon", q, sigma, steps, delta, orders)
  np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=0)


def test_default_epsilon_never_above_the_grid_and_monotone_in_steps():
  q, sigma, steps, delta = _large_delta_configs()
  ours = np.asarray(jaxdp.epsilon(q, sigma, steps, delta))
  ref = _exhaustive("epsilon", q, sigma, steps, delta, rdp.DEFAULT_ORDERS)
  assert np.all(ours <= ref * (1 + 1e-9)), np.nonzero(ours > ref * (1 + 1e-9))
  # Composition never lowers the loss: ε is non-decreasing in T.
  t = np.concatenate([np.arange(1.0, 61.0), np.round(np.geomspace(61, 1e5, 40))])
  for qq, ss, dd in [(1.0, 1.0, 0.9), (0.3, 1.0, 0.9), (1.0, 3.0, 0.99), (0.05, 0.7, 0.5),
                     (1.0, 0.5, 0.2), (0.01, 1.1, 1e-5)]:
    e = np.asarray(jaxdp.epsilon(qq, ss, t, dd))
    assert np.all(np.diff(e) >= 0), (qq, ss, dd, t[1:][np.diff(e) < 0])
  # q = 1, σ = 1, T = 2, δ = 0.9: at α = 1.01 the RDP is 2·1.01/2 = 1.01 <
  # -log(1 - 0.9²) = 1.66, so the KL clause gives ε = 0 (and the exact ε is
  # 0: the composed Gaussian's total variation 2Φ(√2/2) - 1 = 0.52 < 0.9).
  assert float(jaxdp.epsilon(1.0, 1.0, 2, 0.9)) == 0.0


def test_small_sigma_is_within_the_quadrature_allowance():
  rng = np.random.default_rng(2)
  q, sigma, steps = _configs(rng, 100, sigma_lo=0.1)
  sigma = np.minimum(sigma, 0.3)
  ours = jaxdp.epsilon(q, sigma, steps, 1e-5, orders=DP_ORDERS)
  ref = _exhaustive("epsilon", q, sigma, steps, np.full(q.size, 1e-5), DP_ORDERS)
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_contain_every_order(seed):
  """lo ≤ ε(α) ≤ hi at every order, for random sets of evaluated orders."""
  rng = np.random.default_rng(seed)
  orders = np.unique(rdp.DEFAULT_ORDERS if seed == 2 else DP_ORDERS)
  q, sigma, _ = _configs(rng, 64)
  with nx.x64():
    table = np.asarray(rdp.sampled_gaussian(q[:, None], sigma[:, None], orders))
    known = rng.random(table.shape) < 0.2
    known[:, (orders == 2) | (orders == 3)] = True
    lo, hi = jax.jit(order_bounds._bounds, static_argnames="orders")(
        jnp.asarray(np.where(known, table, np.inf)), jnp.asarray(known), jnp.asarray(q), jnp.asarray(sigma),
        orders=tuple(orders))
  lo, hi = np.asarray(lo), np.asarray(hi)
  assert np.all(lo <= table * (1 + 1e-12))
  assert np.all(hi >= table * (1 - 1e-12))
  # Not vacuous: away from the evaluated orders the bounds differ from the value.
  assert np.mean(lo < table * (1 - 1e-3)) > 0.2
  assert np.all(lo[known] == table[known]) and np.all(hi[known] == table[known])


def test_plan_needs_base_orders_and_something_to_skip():
  assert _order_search.plan((2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0)) is None   # nothing to skip
  assert _order_search.plan((1.5, 2.5, 3.5)) is None                          # no base orders
  assert _order_search.plan(tuple(DP_ORDERS) + (np.inf,)) is None              # α = ∞ handled exhaustively
  pl = _order_search.plan(tuple(DP_ORDERS))
  assert pl is not None and set(pl.orders[pl.base]) == set(range(2, 64))


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_probe_candidates_equal_the_general_program(kind):
  """The search's compiled candidates (base orders + at most one probe per
  configuration: constant neighbours, two programs) are bit for bit those of
  :func:`candidates` compiled on the same table, in every round; with more
  than one extra order per configuration it takes the general program."""
  rng = np.random.default_rng(5)
  n = 256
  q, sigma, steps = _configs(rng, n, sigma_lo=0.05)
  x = (np.exp(rng.uniform(np.log(1e-12), np.log(0.5), n)) if kind == "epsilon"
       else rng.uniform(0.0, 20.0, n))
  with nx.x64():
    pl = _order_search.plan(tuple(DP_ORDERS))
    key = tuple(float(o) for o in pl.orders)
    full = np.asarray(rdp.sampled_gaussian(q[:, None], sigma[:, None], pl.orders))
    args = tuple(jnp.asarray(v) for v in (q, sigma, steps, x))
    general = jax.jit(lambda *a: _order_search.candidates(*a, orders=key, kind=kind,
                                                          method="improved"))
    for extra in (0, 1, 3):   # base only; one probe (or none) per row; the fallback
      known = np.zeros(full.shape, bool)
      known[:, pl.base] = True
      for _ in range(extra):
        col = rng.integers(0, pl.orders.size, n)
        keep = rng.random(n) < 0.8
        known[np.nonzero(keep)[0], col[keep]] = True
      table = np.where(known, full, np.inf)
      ours = _order_search._compiled_candidates(pl, key, args, kind, "improved", table, known)
      ref = general(jnp.asarray(table), jnp.asarray(known), *args)
      for a, b in zip(ours, ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
      assert np.asarray(ours[0]).any()   # not vacuous: some orders remain candidates
