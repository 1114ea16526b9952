"""rdp_common.pairwise_sum: the kernels' sums in a fixed order.

Its error is bounded by ⌈log₂ n⌉ roundings (against math.fsum), NumPy and a
compiled program give the same bits, and the RDP kernels built on it give
the same bits at every batch shape (XLA's own reductions did not: ~0.2% of
the base-order values moved by an ulp between the 16, 256 and 2048 shapes).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import order_search
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_common


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 80, 128, 129, 4095])
def test_error_bound_and_executors_agree(n):
  rng = np.random.default_rng(n)
  x = rng.random((4, n)) * 10.0 ** rng.uniform(-30, 30, (4, n))
  got = rdp_common.pairwise_sum(x, -1, np)
  assert got.shape == (4, 1)
  u = np.finfo(np.float64).eps / 2
  levels = max(n - 1, 0).bit_length()
  for row, value in zip(x, got[:, 0]):
    exact = math.fsum(row)
    assert abs(value - exact) <= levels * u * exact * (1 + 1e-12)
  with nx.x64():
    compiled = jax.jit(lambda v: rdp_common.pairwise_sum(v, -1))(jnp.asarray(x))
  np.testing.assert_array_equal(np.asarray(compiled), got)
  # Any axis, kept.
  np.testing.assert_array_equal(rdp_common.pairwise_sum(x.T, 0, np), got.T)


def test_rdp_kernels_give_the_same_bits_at_every_batch_shape():
  rng = np.random.default_rng(1)
  n = 2048
  q = 10 ** rng.uniform(-9, 0, n)
  sigma = 10 ** rng.uniform(math.log10(0.05), math.log10(50), n)
  pl = order_search.plan(None)
  base = tuple(float(o) for o in pl.orders[pl.base])   # the exact sums at integer orders <= 64
  with nx.x64():
    kernel = rdp._static_kernel((len(base),), base, 64)
    whole = np.asarray(kernel(q[:, None], sigma[:, None]))
    for m in (16, 256):
      parts = np.concatenate([np.asarray(kernel(q[i:i + m, None], sigma[i:i + m, None]))
                              for i in range(0, n, m)])
      np.testing.assert_array_equal(parts, whole)
    # The quadrature's two pair-batch shapes (order_search._PAIR_SIZES).
    alpha = pl.orders[rng.integers(0, pl.orders.size, 4096)]
    qq, ss = np.tile(q, 2), np.tile(sigma, 2)
    big = np.asarray(rdp._traced_kernel(qq, ss, alpha, 64))
    small = np.concatenate([np.asarray(rdp._traced_kernel(qq[i:i + 256], ss[i:i + 256],
                                                          alpha[i:i + 256], 64))
                            for i in range(0, 4096, 256)])
    np.testing.assert_array_equal(small, big)
