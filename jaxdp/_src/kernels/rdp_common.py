"""Dtype and rounding helpers shared by the sampled-Gaussian RDP kernels.

The relative safety factor every RDP value and conversion is inflated by
(:func:`_safety`), the float dtype a kernel computes in
(:func:`_float_dtype`) and a log-sum-exp that keeps +inf
(:func:`_logsumexp`). Split out of :mod:`jaxdp._src.kernels.rdp` (moves only).
"""
from __future__ import annotations


import jax.numpy as jnp



# Relative safety factor (in units of the dtype's epsilon) applied to every
# RDP value so that rounding and quadrature error cannot under-report.
_SAFETY_ULPS = 256.0


def _safety(dtype) -> float:
  # float64: 4e-12 covers the quadrature error (≤ 1e-12 relative, tested).
  return 1.0 + max(_SAFETY_ULPS * float(jnp.finfo(dtype).eps), 4e-12)


def _float_dtype(*xs):
  dt = jnp.result_type(*xs)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.result_type(float)


def _logsumexp(x, axis, xp=jnp):
  m = xp.max(x, axis=axis, keepdims=True)
  m_safe = xp.where(xp.isfinite(m), m, 0.0)
  s = xp.sum(xp.exp(x - m_safe), axis=axis, keepdims=True)
  out = xp.log(s) + m_safe
  out = xp.where(m == xp.inf, xp.inf, out)
  return xp.squeeze(out, axis=axis)
