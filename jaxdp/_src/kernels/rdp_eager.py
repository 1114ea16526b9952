"""The public RDP kernel of the sampled Gaussian, answering eager calls on the host.

:func:`jaxdp.rdp.sampled_gaussian` is a jittable, broadcasting kernel
(:func:`jaxdp._src.kernels.rdp.sampled_gaussian`). Called eagerly, outside any
trace, on a few concrete values (the README's ``rdp.sampled_gaussian(0.01,
1.1, rdp.DEFAULT_ORDERS)``), it used to build a program over the whole order
list first: 1.5-1.9 s on a 2-core CPU for the 179 default orders, for a
computation that takes ~3 ms in NumPy. Such calls are now answered on the host
by the same formulas (:func:`jaxdp._src.kernels.host_rdp.kernel_rdp`: exact
binomial sums for integer orders ≤ 4096, the windowed quadrature for the
others, the same quadrature nodes and safety factors), in float64 at the
inputs rounded to the kernel's dtype, then rounded up into that dtype
(:func:`jaxdp._src.core.numerics.round_to_dtype_up`), as the in-loop
accountant's eager ``compose`` already does for its events.

So, for the same question:

* float64 (x64 on): the host value equals the compiled kernel's to rounding
  (NumPy's and XLA's elementary functions): ≤ 2e-13 relative on a draw
  over q ∈ [1e-8, 1], σ ∈ [0.05, 100] at the default orders and others, inside
  every value's 4e-12 safety factor; beyond it, ≤ 1e-12 where σ ≥ 0.3 and up
  to 6e-11 where σ < 0.3 and α → 1 (α - 1 = 1e-6 divides the rounding), inside
  the quadrature allowance (≥ 2e-7) that both values carry there (tested);
* float32: the host value is an upper bound at most the compiled float32
  value, which carries allowances for float32 round-off that a float64
  evaluation does not need: on a whole-domain draw the compiled value is
  ~4e-5 above the host's (median), more than 1e-3 above in 0.8% of the
  cells, up to ~2% at α > 4096 and up to ~9× where α → 1 (α = 1.0001).
  Both are certified upper bounds (tests/kernels/test_rdp_eager.py).

Inside ``jit``/``vmap``/``grad``/``scan`` (traced arguments), with arguments on
a device other than the default one, for larger inputs, for edge inputs (q
outside [0, 1], σ ≤ 0, non-finite values, α ≤ 1 or α = ∞), for other dtypes
and after the first :data:`_EAGER_HOST_CALLS` host calls of a process (a loop
of calls then builds the program once and reuses it), the call runs the
compiled kernel unchanged.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import host_rdp
from jaxdp._src.kernels import rdp as _rdp

__all__ = ["sampled_gaussian"]

# Host calls per process. One host call with the 179 default orders costs
# ~3-4 ms on the 2-core CPU, the compiled program ~1.7 s to build and ~1 ms a
# call: 256 host calls (~1 s) cost less than the build, so a loop of calls
# pays at most about twice the better path.
_EAGER_HOST_CALLS = 256
_host_calls = nx.HostBudget(_EAGER_HOST_CALLS)

# Larger calls go to the compiled kernel (host cost grows with the number of
# distinct (q, σ) pairs times distinct orders; the default orders: 179).
_MAX_PAIRS = 16
_MAX_CELLS = 4096


def _host_inputs(q, sigma, alpha):
  """``(dtype, shape, pair_shape, q, σ, orders, order_index)`` when the call
  can be answered on the host: the kernel's dtype, the broadcast shapes of
  (q, σ, α) and of (q, σ), q and σ as float64 NumPy at the dtype's rounding,
  the distinct orders (likewise) and where α takes each (α's shape); else
  None (and no host call is counted)."""
  args = (q, sigma, alpha)
  concrete = nx.concrete_numbers(args)   # None: a tracer, an array on another device, ...
  if concrete is None:
    return None
  arrays, shape = concrete
  # Python scalars stay weakly typed, as in the kernel's jnp.asarray.
  dtype = np.dtype(_rdp.result_float_dtype(*(a if type(a) in (bool, int, float) else x  # pylint: disable=unidiomatic-typecheck
                                              for a, x in zip(args[:2], arrays[:2]))))
  if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
    return None
  q64, s64 = (a.astype(dtype).astype(np.float64) for a in arrays[:2])
  a64 = np.asarray(arrays[2], np.float64)
  # Fractional orders enter the kernel in its dtype; integers are exact in both.
  a64 = np.where(_rdp._exact_orders(a64), a64, a64.astype(dtype).astype(np.float64))  # pylint: disable=protected-access
  pair_shape = np.broadcast_shapes(q64.shape, s64.shape)
  n_pairs = int(np.prod(pair_shape))
  orders, order_index = np.unique(a64, return_inverse=True)
  if not (0 < n_pairs <= _MAX_PAIRS and n_pairs * orders.size <= _MAX_CELLS):
    return None
  with np.errstate(invalid="ignore"):
    legal = (np.all((q64 >= 0) & (q64 <= 1)) and np.all(np.isfinite(s64) & (s64 > 0))
             and np.all(np.isfinite(a64) & (a64 > 1)))
  if not legal:
    return None
  return dtype, shape, pair_shape, q64, s64, orders, order_index.reshape(a64.shape)


def sampled_gaussian(q, sigma, alpha, *, _nodes=None):  # pylint: disable=missing-function-docstring  (set below)
  inputs = None if _nodes is not None else _host_inputs(q, sigma, alpha)
  if inputs is None or not _host_calls.take():
    return _rdp.sampled_gaussian(q, sigma, alpha, _nodes=_nodes)
  dtype, shape, pair_shape, q64, s64, orders, order_index = inputs
  pairs_q, pairs_s = (np.broadcast_to(x, pair_shape).reshape(-1) for x in (q64, s64))
  # The kernel chooses its quadrature nodes from the σ it was given.
  nodes = _rdp._nodes_for(sigma)  # pylint: disable=protected-access
  with np.errstate(all="ignore"):   # edge values (q = 0 or 1) are finite by design
    table = host_rdp.kernel_rdp(pairs_q, pairs_s, orders, nodes)
  rows = np.broadcast_to(np.arange(pairs_q.size).reshape(pair_shape), shape)
  cols = np.broadcast_to(order_index, shape)
  return jax.device_put(nx.round_to_dtype_up(table[rows, cols], dtype))


sampled_gaussian.__doc__ = _rdp.sampled_gaussian.__doc__.replace(
    "\n  Args:", """
  Called eagerly (outside any trace) on at most 16 concrete (q, σ) pairs
  with finite orders > 1, it answers on the host with nothing to compile
  (:mod:`jaxdp._src.kernels.rdp_eager`): the same formulas in float64 at
  the inputs rounded to the kernel's dtype, rounded up into that dtype, for
  the first 256 such calls of a process. In float64 that equals the
  compiled value to rounding (≤ 2e-13 relative where σ ≥ 0.05, inside the
  safety factors everywhere); in float32 it is an upper bound at most
  the compiled float32 value (which carries float32 round-off allowances:
  typically 4e-5 relative, more where α → 1 or α > 4096).

  Args:""", 1)
