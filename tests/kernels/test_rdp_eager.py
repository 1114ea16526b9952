"""Eager calls of jaxdp.rdp.sampled_gaussian answered on the host (rdp_eager).

The host answer must be the compiled kernel's (float64: to rounding; float32:
an upper bound at most the compiled float32 value) over the whole legal
domain, compile nothing, and leave every other call (traced, large, edge
inputs, after the budget) to the compiled kernel unchanged.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import rdp
from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp as rdp_kernel
from jaxdp._src.kernels import rdp_eager

from reference import ref_sgm_rdp_auto


@pytest.fixture
def host_budget(monkeypatch):
  """A fresh process's budget of eager host calls (conftest sets 0)."""
  monkeypatch.setattr(rdp_eager._host_calls, "left", rdp_eager._EAGER_HOST_CALLS)
  return rdp_eager._host_calls


def _domain(n, seed):
  """(q, σ) pairs over the legal domain, edges first."""
  rng = np.random.default_rng(seed)
  q = 10**rng.uniform(-8, 0, n)
  sigma = 10**rng.uniform(np.log10(0.05), 2, n)
  edges = [(0.0, 1.0), (1.0, 1.0), (1.0, 0.05), (1e-8, 100.0), (0.999, 0.05), (1e-3, 0.2),
           (0.5, 0.29), (0.01, 0.5), (0.01, 0.49)]
  for i, (qi, si) in enumerate(edges):
    q[i], sigma[i] = qi, si
  return q, sigma


# The default orders, fractional orders near 1 and far out, and integer
# orders on both sides of the exact sums' limit (4096).
ORDERS = np.unique(np.concatenate([rdp.DEFAULT_ORDERS, [1.0001, 1.37, 17.3, 250.5, 4095.0, 4097.0,
                                                        5000.0, 12000.5]]))


def _host(q, sigma, orders):
  """Host answers, 16 pairs per call (the host path's limit)."""
  rows = []
  for i in range(0, q.size, 16):
    out = rdp.sampled_gaussian(q[i:i + 16, None], sigma[i:i + 16, None], orders)
    assert isinstance(out, jax.Array)
    rows.append(np.asarray(out))
  return np.concatenate(rows)


def test_float64_host_answers_are_the_compiled_kernels(host_budget):
  q, sigma = _domain(96, seed=0)
  with nx.x64():
    host = _host(q, sigma, ORDERS)
    assert host_budget.left == rdp_eager._EAGER_HOST_CALLS - 6
    compiled = np.asarray(rdp_kernel.sampled_gaussian(q[:, None], sigma[:, None], ORDERS))
  assert host.dtype == compiled.dtype == np.float64
  np.testing.assert_array_equal(host == 0, compiled == 0)
  assert np.all(np.isfinite(host))
  pos = compiled > 0
  rel = np.abs(host[pos] / compiled[pos] - 1)
  # NumPy's and XLA's elementary functions differ by ulps, amplified where
  # the terms cancel: far inside every value's 4e-12 safety factor.
  assert rel.max() <= 1e-12, rel.max()


def test_float32_host_answers_are_sound_and_at_most_the_compiled_kernels(host_budget):
  q, sigma = _domain(96, seed=1)
  host = _host(q, sigma, ORDERS)
  compiled = np.asarray(rdp_kernel.sampled_gaussian(q[:, None], sigma[:, None], ORDERS))
  assert host.dtype == compiled.dtype == np.float32
  # The question the float32 kernel answers: the inputs rounded to float32.
  q32, s32 = q.astype(np.float32).astype(np.float64), sigma.astype(np.float32).astype(np.float64)
  a32 = np.where(ORDERS == np.floor(ORDERS), ORDERS, ORDERS.astype(np.float32))
  with nx.x64():
    exact64 = np.asarray(rdp_kernel.sampled_gaussian(q32[:, None], s32[:, None], a32))
  host64 = host.astype(np.float64)
  assert np.all(host64 >= exact64 * (1 - 1e-12))      # an upper bound (float64 certified)
  assert np.all(host <= compiled)                      # never looser than the compiled kernel
  pos = exact64 > 0
  assert np.all(host64[pos] <= exact64[pos] * (1 + 2.0**-23) + 1e-45)   # one rounding up


@pytest.mark.parametrize("q,sigma,alpha", [(1e-6, 0.3, 4097.0), (0.01, 1.1, 1.0001),
                                           (0.3, 0.8, 17.3), (1e-4, 20.0, 250.5)])
def test_host_answers_bound_the_mpmath_reference(host_budget, q, sigma, alpha):
  for x64 in (False, True):
    if x64:
      with nx.x64():
        value = float(rdp.sampled_gaussian(q, sigma, alpha))
      q_ref, s_ref = q, sigma
    else:
      value = float(rdp.sampled_gaussian(q, sigma, alpha))
      q_ref, s_ref, alpha = float(np.float32(q)), float(np.float32(sigma)), float(np.float32(alpha))
    ref = float(ref_sgm_rdp_auto(q_ref, s_ref, alpha))
    assert ref <= value <= ref * (1 + 1e-6)
  assert host_budget.left == rdp_eager._EAGER_HOST_CALLS - 2


def test_the_readme_call_compiles_nothing(host_budget, cold_programs, record_compilations):
  with record_compilations() as compiles:
    curve = rdp.sampled_gaussian(0.01, 1.1, rdp.DEFAULT_ORDERS)
    with nx.x64():
      curve64 = rdp.sampled_gaussian(np.array([0.01, 0.02]), 1.1, rdp.DEFAULT_ORDERS[:, None])
  assert compiles == []
  assert curve.shape == rdp.DEFAULT_ORDERS.shape and curve.dtype == jnp.float32
  assert curve64.shape == (rdp.DEFAULT_ORDERS.size, 2) and curve64.dtype == jnp.float64
  assert host_budget.left == rdp_eager._EAGER_HOST_CALLS - 2


@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("q,sigma", [(np.float32(0.01), 1.1), ([0.01, 0.02], np.array([[1.1], [2.0]])),
                                     (1, 2)])
def test_the_result_dtype_and_shape_are_the_kernels(host_budget, q, sigma, x64):
  with nx.x64() if x64 else contextlib.nullcontext():
    host = rdp.sampled_gaussian(q, sigma, 2.5)
    compiled = rdp_kernel.sampled_gaussian(q, sigma, 2.5)
  assert host_budget.left == rdp_eager._EAGER_HOST_CALLS - 1
  assert host.dtype == compiled.dtype and host.shape == compiled.shape
  if host.dtype == jnp.float32:
    assert np.all(np.asarray(host) <= np.asarray(compiled))
  else:
    np.testing.assert_allclose(np.asarray(host), np.asarray(compiled), rtol=1e-12)


def _same_as_kernel(*args):
  out = rdp.sampled_gaussian(*args)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(rdp_kernel.sampled_gaussian(*args)))
  return out


@pytest.mark.parametrize("q,sigma,alpha", [
    (0.01, 1.1, np.inf), (0.01, 1.1, 1.0), (0.01, 1.1, 0.5), (-0.1, 1.1, 2.0), (1.5, 1.1, 2.0),
    (0.01, 0.0, 2.0), (0.01, -1.0, 2.0), (0.01, np.inf, 2.0), (np.nan, 1.1, 2.0),
    (0.01, 1.1, np.array([2.0, np.nan])),
])
def test_edge_inputs_run_the_compiled_kernel(host_budget, q, sigma, alpha):
  _same_as_kernel(q, sigma, alpha)
  assert host_budget.left == rdp_eager._EAGER_HOST_CALLS


def test_large_and_traced_calls_run_the_compiled_kernel(host_budget):
  q = np.geomspace(1e-4, 0.5, 17)
  few = np.array([1.5, 2.0, 8.0])
  _same_as_kernel(q[:, None], 1.0, few)                                 # 17 pairs
  _same_as_kernel(q[:16, None], 1.0, np.linspace(1.5, 90.5, 257))   # more cells than the host takes
  # Traced: the very computation of the kernel (same jaxpr; nothing compiled).
  f = lambda q, s: rdp.sampled_gaussian(q, s, few)
  f_kernel = lambda q, s: rdp_kernel.sampled_gaussian(q, s, few)
  g = lambda f: jax.grad(lambda s: f(0.01, s)[-1])
  for transform, args in ((jax.jit, (q[:2, None], jnp.ones((2, 1)))), (jax.vmap, (q[:2], jnp.ones(2))),
                          (g, (1.1,))):
    assert str(jax.make_jaxpr(transform(f))(*args)) == str(jax.make_jaxpr(transform(f_kernel))(*args))
  assert host_budget.left == rdp_eager._EAGER_HOST_CALLS


def test_after_the_budget_calls_run_the_compiled_kernel(host_budget):
  host_budget.left = 1
  first = np.asarray(rdp.sampled_gaussian(0.01, 1.1, rdp.DEFAULT_ORDERS))
  assert host_budget.left == 0
  second = _same_as_kernel(0.01, 1.1, rdp.DEFAULT_ORDERS)
  assert np.all(first <= np.asarray(second))


def test_beyond_the_usual_domain_the_paths_agree_within_the_allowances(host_budget):
  """σ down to 1e-3 and up to 1e4, q down to 1e-12 and up to 1 - 1e-9, orders
  from 1 + 1e-6 to 99999.5: the same non-finite values; float64 agrees to
  1e-12 where σ ≥ 0.3, and where σ < 0.3 (up to 6e-11 measured, at α → 1,
  where the division by α - 1 amplifies rounding) within 1% of the quadrature
  allowance both values carry there (≥ 2e-7); float32 host ≤ compiled."""
  rng = np.random.default_rng(5)
  orders = np.unique(np.concatenate([[1 + 1e-6, 1.001, 1.5, 2, 3, 64, 65, 100.5, 4096, 4097, 1e4,
                                      99999.5], 10**rng.uniform(0, 5, 20)]))
  for _ in range(3):
    q = np.concatenate([[0, 1, 1e-12, 0.5, 1 - 1e-9], 10**rng.uniform(-12, 0, 11)])
    sigma = rng.permutation(np.concatenate([[1e-3, 1e4, 0.05, 0.3, 0.2], 10**rng.uniform(-3, 4, 11)]))
    for x64 in (False, True):
      with nx.x64() if x64 else contextlib.nullcontext():
        host = np.asarray(rdp.sampled_gaussian(q[:, None], sigma[:, None], orders)).astype(float)
        compiled = np.asarray(rdp_kernel.sampled_gaussian(q[:, None], sigma[:, None],
                                                          orders)).astype(float)
      np.testing.assert_array_equal(np.isnan(host), np.isnan(compiled))
      np.testing.assert_array_equal(np.isinf(host), np.isinf(compiled))
      both = np.isfinite(host) & np.isfinite(compiled)
      if not x64:
        assert np.all(host[both] <= compiled[both])
        continue
      rel = np.abs(host - compiled) / np.where(compiled > 0, compiled, 1.0)
      wide = np.broadcast_to(sigma[:, None] >= 0.3, rel.shape)
      assert rel[both & wide].max() <= 1e-12
      assert rel[both & ~wide].max() <= 2e-9
