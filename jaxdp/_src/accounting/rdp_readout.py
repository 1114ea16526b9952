"""The RDP accountant's ε / δ read-out of a concrete state, on the host.

``accountant.rdp().epsilon(state, δ)`` called eagerly (outside any trace) on
a state that holds concrete arrays, as in the README's
``print(acc.epsilon(state, 1e-5))``, used to build its XLA program first
(0.34 s on a 2-core CPU) for a conversion NumPy evaluates in ~0.2 ms. Such
reads are now answered here by the same functions
(:func:`jaxdp._src.kernels.rdp_convert.to_epsilon_refined` /
:func:`~jaxdp._src.kernels.rdp_convert.to_delta_refined` with
``xp=numpy``), in float64 at the state's values, then rounded up into the
state's dtype, as the accountant's eager ``compose`` already computes its
events' RDP on the host. The target is taken as given, in float64 (the
compiled read rounds it to the state's dtype).

* The compensated sum ``rdp + compensation`` is formed in float64 and moved
  up by one float64 ulp (the compiled read adds in the state's dtype and
  moves up by one ulp of it).
* float64 state: equal to the compiled read-out to rounding (≤ 1e-13
  relative on whole-domain schedules, tests/accounting/test_rdp_readout.py),
  inside the 4e-12 margin both carry.
* float32 state: the float64 conversion of the same state, rounded up: an
  upper bound at most the compiled float32 read-out (which carries float32
  rounding allowances, ~1e-6 relative) or within one float32 ulp of it.
* δ keeps the compiled read's floor: below the state's pure-DP ε, never
  under the dtype's smallest normal number; capped at 1.

Inside ``jit``/``vmap``/``scan`` (traced state or target), with arrays on a
device other than the default one, for dtypes other than float32/float64 and
after the first :data:`_EAGER_HOST_READS` host reads of a process, the read
runs the compiled program unchanged.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxdp._src.core import numerics as nx

__all__ = ["host_readout"]

# Host reads per process: one costs ~0.2 ms with the default orders, the
# compiled read ~0.35 s to build; a loop of reads then builds it once.
_EAGER_HOST_READS = 256
_host_reads = nx.HostBudget(_EAGER_HOST_READS)


def _concrete(state, value):
  """float64 views ``(dtype, rdp, compensation, pure_epsilon, value)`` of a
  concrete, default-placed state and target, or None."""
  # The target broadcasts against the state's leading axes, not its orders.
  concrete = nx.concrete_numbers([state.rdp, state.compensation, state.pure_epsilon, value],
                                 broadcast=False)
  if concrete is None:
    return None
  arrays = concrete[0]
  dtype = arrays[0].dtype
  if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
    return None
  hi, lo, pe = (a.astype(np.float64) for a in arrays[:3])
  # The target as given (the compiled read rounds it to the state's dtype,
  # to nearest: a δ or ε rounded up would answer a slightly easier question).
  return dtype, hi, lo, pe, arrays[3].astype(np.float64)


def host_readout(state, value, sorted_idx, orders, kind):
  """ε (``kind`` "epsilon", ``value`` δ) or δ (``kind`` "delta", ``value`` ε)
  of an RDP accountant's state on the host, as a jax Array of the state's
  dtype; None where the compiled read must answer (module docstring).

  Args:
    state: :class:`jaxdp.accountant.RdpState`.
    value: δ in (0, 1) or ε >= 0 (validated by the caller).
    sorted_idx: permutation putting the state's orders in ascending order.
    orders: the ascending orders (float64).
    kind: "epsilon" or "delta".
  """
  if _host_reads.left <= 0:
    return None
  inputs = _concrete(state, value)
  if inputs is None:
    return None
  _host_reads.take()
  from jaxdp._src.kernels import rdp_convert  # pylint: disable=g-import-not-at-top
  dtype, hi, lo, pe, value = inputs
  total = hi + lo
  total = np.where(total > 0, np.nextafter(total, np.inf), total)[..., sorted_idx]
  fp = float(np.finfo(np.float64).eps)
  with np.errstate(all="ignore"):   # edge values (δ -> 0, ε = ∞) are handled by the masks
    if kind == "epsilon":
      out = rdp_convert.to_epsilon_refined(total, orders, value, xp=np) * (1.0 + 4.0 * fp)
      return jax.device_put(nx.round_to_dtype_up(np.asarray(out, np.float64), dtype))
    d = rdp_convert.to_delta_refined(total, orders, value, xp=np) * (1.0 + 4.0 * fp)
  d = nx.round_to_dtype_up(np.asarray(d, np.float64), dtype)
  # The compiled read's floor (accountant._floor_delta) in the state's dtype.
  live = value < pe
  d = np.where(live, np.maximum(d, np.finfo(dtype).tiny), d)
  return jax.device_put(np.minimum(d, np.asarray(1.0, dtype)).astype(dtype))
