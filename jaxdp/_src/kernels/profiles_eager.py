"""The one-step privacy profile of the sampled Gaussian, answering eager calls on the host.

:func:`jaxdp.profiles.sampled_gaussian` (and its log form) is a jittable,
broadcasting kernel (:func:`jaxdp._src.kernels.profiles.sampled_gaussian`).
Called eagerly, outside any trace, on a few concrete values (the README's
``profiles.sampled_gaussian(epsilon=1.0, q=0.01, sigma=1.1)``), it built an
XLA program first (0.5-0.9 s on a 2-core CPU) for a closed form that NumPy
evaluates in ~0.1 ms. Such calls are now answered on the host by the same
function (:func:`jaxdp._src.kernels.profiles._sampled_gaussian_log_delta`
with ``xp=numpy``, the evaluation the soundness guards already use: SciPy's
``log_ndtr`` and the host continued fraction of the Mills ratio), in float64
at the inputs rounded to the kernel's dtype, then rounded up into that dtype
(:func:`jaxdp._src.core.numerics.round_to_dtype_up`), as
:mod:`jaxdp._src.kernels.rdp_eager` does for the RDP kernel.

So, for the same question:

* float64 (x64 on): log δ on the host equals the compiled kernel's to
  rounding (NumPy's, SciPy's and XLA's elementary functions): ≤ 1e-13
  relative on a whole-domain draw (tests/kernels/test_profiles_eager.py),
  inside the allowances of at least 8 ulps per step that every value
  carries;
* float32: the host value is the float64 evaluation rounded up, an upper
  bound at most the compiled float32 value (which carries float32 round-off
  allowances): both are certified upper bounds.

δ = exp(log δ) is taken on the host too, in float64, and rounded up into the
dtype (the compiled path exponentiates in the dtype).

Inside ``jit``/``vmap``/``grad``/``scan`` (traced arguments), with arguments
on a device other than the default one, for more than :data:`_MAX_ELEMENTS`
results, for dtypes other than float32 and float64, and after the first
:data:`_EAGER_HOST_CALLS` host calls of a process (a loop of calls then
builds the program once and reuses it), the call runs the compiled kernel
unchanged. Arguments are validated first either way (``ValueError`` naming
the argument).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import profiles as _profiles

__all__ = ["sampled_gaussian", "sampled_gaussian_log_delta"]

# Host calls per process: one costs ~0.1-0.3 ms, a compiled call ~0.05 ms
# after a 0.5-0.9 s build; 256 host calls cost far less than the build.
_EAGER_HOST_CALLS = 256
_host_calls = nx.HostBudget(_EAGER_HOST_CALLS)
_MAX_ELEMENTS = 4096


def _host_inputs(epsilon, q, sigma):
  """``(dtype, ε, q, σ)`` as float64 NumPy at the kernel dtype's rounding
  when the call can be answered on the host, else None (nothing counted)."""
  args = (epsilon, q, sigma)
  concrete = nx.concrete_numbers(args)
  if concrete is None:
    return None
  arrays, shape = concrete
  dtype = np.dtype(_profiles._float_dtype_lists_as_arrays(*args))  # pylint: disable=protected-access
  if dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or int(np.prod(shape)) > _MAX_ELEMENTS:
    return None
  return (dtype,) + tuple(a.astype(dtype).astype(np.float64) for a in arrays)


def _host_log_delta(inputs, direction):
  dtype, e64, q64, s64 = inputs
  with np.errstate(all="ignore"):   # edge values (ε = ∞, q = 0) are handled by masks
    return dtype, _profiles._sampled_gaussian_log_delta(  # pylint: disable=protected-access
        e64, q64, s64, direction, xp=np)


def _host_turn(epsilon, q, sigma, direction):
  """Validates (as the kernel does), then the host inputs when this call is
  the host's (one of the process's first ``_EAGER_HOST_CALLS``), else None."""
  _profiles.check_sampled_gaussian(epsilon, q, sigma, direction)
  if _host_calls.left <= 0:
    return None
  inputs = _host_inputs(epsilon, q, sigma)
  if inputs is not None:
    _host_calls.take()
  return inputs


def sampled_gaussian_log_delta(epsilon, q, sigma, direction="max"):  # pylint: disable=missing-function-docstring  (set below)
  inputs = _host_turn(epsilon, q, sigma, direction)
  if inputs is None:
    return _profiles.sampled_gaussian_log_delta(epsilon, q, sigma, direction)
  dtype, log_delta = _host_log_delta(inputs, direction)
  return jax.device_put(nx.round_to_dtype_up(np.asarray(log_delta, np.float64), dtype))


def sampled_gaussian(epsilon, q, sigma, direction="max"):  # pylint: disable=missing-function-docstring  (set below)
  inputs = _host_turn(epsilon, q, sigma, direction)
  if inputs is None:
    return _profiles.sampled_gaussian(epsilon, q, sigma, direction)
  dtype, log_delta = _host_log_delta(inputs, direction)
  log_delta = np.asarray(log_delta, np.float64)
  # exp rounds to nearest: one ulp up keeps δ an upper bound (capped at 1;
  # δ = 0 exactly where log δ = -∞: ε = ∞ or q = 0, as in the kernel).
  delta = np.minimum(np.nextafter(np.exp(log_delta), np.inf), 1.0)
  delta = np.where(log_delta == -np.inf, 0.0, delta)
  return jax.device_put(nx.round_to_dtype_up(delta, dtype))


_NOTE = """
  Called eagerly (outside any trace) on at most 4096 concrete values in
  float32 or float64, it answers on the host with nothing to compile
  (:mod:`jaxdp._src.kernels.profiles_eager`): the same function in float64
  at the inputs rounded to the kernel's dtype, rounded up into that dtype,
  for the first 256 such calls of a process. In float64 that equals the
  compiled value to rounding (inside its allowances); in float32 it is an
  upper bound at most the compiled float32 value.

  Args:"""

sampled_gaussian.__doc__ = _profiles.sampled_gaussian.__doc__.replace("\n  Args:", _NOTE, 1)
sampled_gaussian_log_delta.__doc__ = (_profiles.sampled_gaussian_log_delta.__doc__
                                      + "\n" + _NOTE.replace("\n\n  Args:", "\n"))
