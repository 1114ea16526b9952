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
  """log Σ exp(x) along ``axis``, the sum by :func:`pairwise_sum` (the same
  bits at every batch shape)."""
  m = xp.max(x, axis=axis, keepdims=True)
  m_safe = xp.where(xp.isfinite(m), m, 0.0)
  s = pairwise_sum(xp.exp(x - m_safe), axis, xp)
  out = xp.log(s) + m_safe
  out = xp.where(m == xp.inf, xp.inf, out)
  return xp.squeeze(out, axis=axis)


def pairwise_sum(x, axis, xp=jnp):
  """Σ of ``x`` along ``axis`` (kept, of size 1) by a fixed binary tree.

  The axis is zero-padded to a power of two, then its two halves are added
  until one element is left. Every output is thus the same sequence of
  additions whatever the sizes of the other axes, so a compiled program
  gives the same bits for a configuration alone as in a batch of thousands
  (``xp.sum``'s order is the compiler's: XLA's changed with the array
  shape in the last bit of ~0.2% of the RDP kernel's sums). For
  non-negative terms the relative error is at most ⌈log₂ n⌉·u (Higham
  2002, §4.2): 12u for the 4096-term binomial sums, inside the 256-ulp
  safety factor of every RDP value.
  """
  x = xp.moveaxis(x, axis, -1)
  n = x.shape[-1]
  size = 1 << max(n - 1, 0).bit_length()
  if size > n:
    x = xp.concatenate([x, xp.zeros(x.shape[:-1] + (size - n,), x.dtype)], axis=-1)
  while x.shape[-1] > 1:
    half = x.shape[-1] // 2
    x = x[..., :half] + x[..., half:]
  return xp.moveaxis(x, -1, axis)
