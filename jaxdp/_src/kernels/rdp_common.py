"""Dtype and rounding helpers shared by the sampled-Gaussian RDP kernels.

The relative safety factor every RDP value and conversion is inflated by
(:func:`safety_factor`), the float dtype a kernel computes in
(:func:`result_float_dtype`) and a log-sum-exp that keeps +inf
(:func:`log_sum_exp`). Split out of :mod:`jaxdp._src.kernels.rdp` (moves only).
"""

from __future__ import annotations

import jax.numpy as jnp


# Relative safety factor (in units of the dtype's epsilon) applied to every
# RDP value so that rounding and quadrature error cannot under-report.
_SAFETY_ULPS = 256.0


def safety_factor(dtype) -> float:
  # float64: 4e-12 covers the quadrature error (≤ 1e-12 relative, tested).
  return 1.0 + max(_SAFETY_ULPS * float(jnp.finfo(dtype).eps), 4e-12)


def gaussian_rdp(sigma, alpha, dtype):
  """α/(2σ²) rounded up by :func:`safety_factor` (Mironov 2017, Prop. 7), on
  arrays of ``dtype`` of either namespace: :func:`jaxdp.rdp.gaussian` and
  the truncated-Poisson cap share it."""
  return (alpha / (2.0 * sigma ** 2)) * safety_factor(dtype)


def result_float_dtype(*xs):
  """The inputs' result dtype (``jnp.result_type``: Python scalars weakly
  typed) if floating, else the default float. Unlike
  :func:`jaxdp._src.kernels.profiles._float_dtype_lists_as_arrays` it takes
  no Python lists; unlike ``mechanisms.discrete._float_dtype`` it does not
  promote Python scalars to the default float."""
  dt = jnp.result_type(*xs)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.result_type(float)


def log_sum_exp(x, axis, xp=jnp):
  m = xp.max(x, axis=axis, keepdims=True)
  m_safe = xp.where(xp.isfinite(m), m, 0.0)
  s = xp.sum(xp.exp(x - m_safe), axis=axis, keepdims=True)
  out = xp.log(s) + m_safe
  out = xp.where(m == xp.inf, xp.inf, out)
  return xp.squeeze(out, axis=axis)
