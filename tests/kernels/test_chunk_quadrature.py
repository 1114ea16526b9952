"""One quadrature program per compiled RDP chunk (issue 37: first-call latency).

A compiled chunk of the RDP driver needs the fractional-order quadrature twice:
at the (configuration, order) pairs of its order search and in the golden
section between orders. Both now run through
``continuous_order.chunk_quadrature`` at the chunk's own size, where they used
to compile the pair kernel at two batch sizes and the golden section's own
program. These tests pin what that change may and may not move:

* the pairs' per-step RDP is bit for bit the public traced-order kernel's
  (``jaxdp.rdp.sampled_gaussian`` with traced α), over the whole legal domain;
* the golden section finds the same order as ``golden_minimum`` (the program
  the sweep inlines), and its value differs by a few ulps at most (the same
  formulas, compiled in another program);
* the driver calls nothing else for its quadrature, at the chunk sizes only.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import continuous_order
from jaxdp._src.kernels import host_rdp
from jaxdp._src.kernels import order_search
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_driver


def _domain(n, seed):
  """(q, σ, α) over the legal domain, with its edges."""
  rng = np.random.default_rng(seed)
  q = 10**rng.uniform(-10, 0, n)
  sigma = 10**rng.uniform(np.log10(0.05), np.log10(50.0), n)
  alpha = np.where(rng.uniform(size=n) < 0.5, np.round(rng.uniform(65, 4096, n)),
                   1.0 + 10**rng.uniform(-3, np.log10(8191.0), n))
  edges = [(0.0, 1.0, 2.5), (1.0, 1.0, 2.5), (1.0, 0.05, 4096.0), (1e-10, 50.0, 1.001),
           (0.999, 0.05, 8192.0), (0.5, 0.05, 1.01)]
  for i, row in enumerate(edges):
    q[i], sigma[i], alpha[i] = row
  return q, sigma, alpha


@pytest.mark.parametrize("nodes", [40, 64])
def test_pairs_are_the_traced_kernel_bit_for_bit(nodes):
  q, sigma, alpha = _domain(700, seed=nodes)   # batches of 256, the last one padded
  with nx.x64():
    ours = order_search.quadrature_at(q, sigma, alpha, kind="epsilon", method="improved",
                                      nodes=nodes, size=256)
    public = np.asarray(rdp._traced_kernel(jnp.asarray(q), jnp.asarray(sigma),
                                           jnp.asarray(alpha), nodes))
  assert np.all(np.isfinite(ours))
  np.testing.assert_array_equal(ours, public)


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_golden_mode_finds_golden_minimums_order(kind):
  rng = np.random.default_rng(3)
  n = 256
  q, sigma, _ = _domain(n, seed=5)
  steps = np.round(10**rng.uniform(0, 6, n))
  x = 10**rng.uniform(-12, -1, n) if kind == "epsilon" else 10**rng.uniform(-2, 1.5, n)
  lo = 1.0 + 10**rng.uniform(-2, 2, n)
  hi = lo * rng.uniform(1.01, 3.0, n)
  with nx.x64():
    args = [jnp.asarray(v) for v in (q, sigma, steps, x, lo, hi)]
    ref, ref_order = continuous_order.golden_minimum(*args, kind=kind, method="improved",
                                                     nodes=64, with_argmin=True)
    val, order, _ = continuous_order.chunk_quadrature(*args, args[4], jnp.asarray(False),
                                                      kind=kind, method="improved", nodes=64)
  ref, val = np.asarray(ref), np.asarray(val)
  np.testing.assert_array_equal(np.asarray(order), np.asarray(ref_order))
  assert np.array_equal(np.isfinite(val), np.isfinite(ref))
  fin = np.isfinite(ref) & (ref > 0)
  assert np.all(np.abs(val[fin] / ref[fin] - 1) <= 1e-14)
  np.testing.assert_array_equal(val[~fin], ref[~fin])


def test_driver_compiles_one_quadrature_program_per_chunk_size(monkeypatch):
  """The compiled driver (default and explicit orders) calls chunk_quadrature
  at its chunk or piece sizes only, and neither of the programs it replaced."""
  def refuse(*_, **__):
    raise AssertionError("the driver must not call this program")

  monkeypatch.setattr(rdp, "_traced_kernel", refuse)
  monkeypatch.setattr(continuous_order, "golden_minimum", refuse)
  sizes = []
  inner = continuous_order.chunk_quadrature

  def record(q, *args, **kwargs):
    sizes.append(q.shape)
    return inner(q, *args, **kwargs)

  monkeypatch.setattr(continuous_order, "chunk_quadrature", record)
  n = host_rdp.MAX_CONFIGURATIONS + 40
  q, sigma, _ = _domain(n, seed=11)
  sigma = np.maximum(sigma, 0.3)    # the quadrature's pairs (the exact sums start below 0.3)
  steps = np.full(n, 1000.0)
  expected = {(size,) for _, size, _ in rdp_driver._pieces(n, rdp_driver._bucket(n), sigma)}
  eps = jaxdp.epsilon(q, sigma, steps, 1e-5)
  assert np.all(np.isfinite(eps)) and sizes and set(sizes) <= expected
  sizes.clear()
  dpa = np.concatenate([np.linspace(1.1, 10.9, 99), np.arange(11, 64), [128, 256, 512, 1024]])
  eps_dpa = jaxdp.epsilon(q, sigma, steps, 1e-5, orders=dpa)
  assert np.all(eps_dpa >= eps * (1 - 1e-12))     # the real-order minimum is never above
  assert sizes and set(sizes) == {(rdp_driver._bucket(n),)}
