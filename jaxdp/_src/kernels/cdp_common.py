"""Helpers shared by the concentrated-DP and composition kernels.

:func:`dual_mode` runs a kernel in host mode (scoped float64, NumPy out) on
concrete inputs and as a pure JAX kernel on tracers; :func:`common_float` casts to a
common floating dtype; :func:`golden_min` is the golden-section minimiser of
the (ε, δ) conversions, whose every evaluated point is a valid certificate.
Used by :mod:`jaxdp._src.kernels.cdp` and :mod:`jaxdp._src.kernels.composition`;
split out of :mod:`jaxdp._src.kernels.cdp` (moves only).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from jaxdp._src.core import numerics as _numerics


_GOLDEN_ITERS = 64
_INV_PHI = 0.6180339887498949


def dual_mode(fn: Callable) -> Callable:
  """Host mode (x64, NumPy out) on concrete inputs; pure kernel on tracers."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
      return fn(*args, **kwargs)
    with _numerics.x64():
      return _numerics.to_host(fn(*args, **kwargs))

  return wrapper


def common_float(*xs):
  """Converts to a common floating dtype (the ambient default float or wider)."""
  xs = tuple(jnp.asarray(x) for x in xs)
  dtype = jnp.result_type(float, *xs)
  return tuple(x.astype(dtype) for x in xs)


def golden_min(f: Callable, lo, hi, iters: int = _GOLDEN_ITERS):
  """Golden-section search for min f on [lo, hi] (elementwise, broadcasting).

  Returns the best value of f seen at the evaluated points (each is a valid
  certificate for the callers here, so a non-unimodal f only loosens the
  answer).
  """
  lo, hi = jnp.broadcast_arrays(lo, hi)
  c = hi - _INV_PHI * (hi - lo)
  d = lo + _INV_PHI * (hi - lo)
  fc, fd = f(c), f(d)
  best = jnp.minimum(jnp.minimum(fc, fd), jnp.minimum(f(lo), f(hi)))

  def body(_, carry):
    lo, hi, c, d, fc, fd, best = carry
    left = fc < fd  # minimum in [lo, d]
    new_lo = jnp.where(left, lo, c)
    new_hi = jnp.where(left, d, hi)
    new_c = jnp.where(left, new_hi - _INV_PHI * (new_hi - new_lo), d)
    new_d = jnp.where(left, c, new_lo + _INV_PHI * (new_hi - new_lo))
    fx = f(jnp.where(left, new_c, new_d))
    new_fc = jnp.where(left, fx, fd)
    new_fd = jnp.where(left, fc, fx)
    best = jnp.minimum(best, fx)
    return new_lo, new_hi, new_c, new_d, new_fc, new_fd, best

  carry = jax.lax.fori_loop(0, iters, body, (lo, hi, c, d, fc, fd, best))
  return carry[-1]
