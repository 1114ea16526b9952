"""Repeat-and-select (tuning) RDP: the run-count distributions and the kernel.

The lower half of :mod:`jaxdp.tuning` (its docstring has the method:
Papernot & Steinke 2022, Theorems 2 and 6): the distributions of the number
of runs K (truncated negative binomial, Poisson), and the jitted kernel that
turns a run's RDP curve into the tuned release's (:func:`repeat_and_select_rdp`,
:func:`tuned`). The event-level functions (:func:`jaxdp.tuning.epsilon`,
:func:`jaxdp.tuning.sigma`) are in :mod:`jaxdp._src.solvers.tuning`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import persist

__all__ = ["repeat_and_select_rdp", "tuned", "tnb_mean", "DEFAULT_LAMBDA_HATS"]

# Relative upward nudge (in ulps of the working dtype) of every tuned value, so
# the few roundings of the formula can only increase it.
_SAFETY_ULPS = 16.0


def _default_lambda_hats() -> np.ndarray:
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  # dp_accounting's RdpAccountant default orders (values, not an import).
  dpa = np.concatenate([1.0 + np.arange(1, 100) / 10.0, np.arange(11.0, 64.0),
                        [128.0, 256.0, 512.0, 1024.0]])
  grid = np.union1d(np.union1d(_rdp.DEFAULT_ORDERS, dpa),
                    1.0 + np.geomspace(1e-3, 1e5, 750))
  grid.setflags(write=False)
  return grid


#: Default candidate second orders λ̂ (and default target orders) of the
#: event-level functions: :data:`jaxdp.rdp.DEFAULT_ORDERS`, dp_accounting's
#: default RDP orders, and λ̂ − 1 geometric from 1e-3 to 1e5 (2.5 % apart).
#: Holding dp_accounting's orders, the tuned curve and ε are never above
#: dp_accounting's ``RepeatAndSelectDpEvent`` for the same event (up to
#: jaxdp's ~1e-11 relative rounding-up).
DEFAULT_LAMBDA_HATS = _default_lambda_hats()


# --------------------------------------------------------------------------
# The distribution of the number of runs
# --------------------------------------------------------------------------


class _Dist(NamedTuple):
  """Host-side constants of the run-count distribution."""
  poisson: bool
  mean: float          # E[K]
  shape: float         # η (inf for Poisson)
  log_mean: float      # log E[K]
  log_inv_gamma: float  # log(1/γ) (TNB), 0 for Poisson


def _expm1_over_x(x: float) -> float:
  """(e^x − 1)/x, 1 at x = 0 (expm1 keeps it accurate for small |x|)."""
  return 1.0 if x == 0.0 else math.expm1(x) / x


def _log_over_xm1(g: float) -> float:
  """log(g)/(g − 1) for g in (0, 1], 1 at g = 1 (log1p keeps it accurate)."""
  return 1.0 if g == 1.0 else math.log1p(g - 1.0) / (g - 1.0)


def tnb_mean(gamma: float, shape: float) -> float:
  """E[K] of the truncated negative binomial (Papernot–Steinke Definition 1).

  E[K] = η(1 − γ)/(γ(1 − γ^η)) (η ≠ 0), (1 − γ)/(γ·log(1/γ)) (η = 0, the
  logarithmic distribution), 1/γ (η = 1, geometric); written as
  1/(γ · expm1(η log γ)/(η log γ) · log(γ)/(γ − 1)), stable for η log γ → 0
  and γ → 1.

  Args:
    gamma: halting parameter in (0, 1].
    shape: η ≥ 0.

  Returns:
    The mean, ≥ 1.

  Raises:
    ValueError: for γ outside (0, 1] or η < 0 (NaN and infinities included).
  """
  if not 0.0 < float(gamma) <= 1.0:
    raise ValueError(f"gamma must be in (0, 1]; found {gamma!r}.")
  if not (float(shape) >= 0.0 and math.isfinite(float(shape))):
    raise ValueError(f"shape must be a finite number >= 0; found {shape!r}.")
  if shape == 1.0:
    return 1.0 / gamma
  return 1.0 / (gamma * _expm1_over_x(shape * math.log(gamma)) * _log_over_xm1(gamma))


def _tnb_gamma(mean: float, shape: float) -> float:
  """γ of the TNB with this mean, rounded down (the bound only grows)."""
  if mean == 1.0:
    return 1.0
  if shape == 1.0:
    return float(np.nextafter(1.0 / mean, 0.0))
  # E[K] decreases from inf (γ → 0) to 1 (γ = 1), and E[K] ≤ 2(η + 1)/γ.
  # The 1e-13 margin covers the rounding of tnb_mean: lo stays below the
  # exact γ.
  lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)
  for _ in range(2000):
    mid = 0.5 * (lo + hi)
    if not lo < mid < hi:
      break
    if tnb_mean(mid, shape) >= mean * (1.0 + 1e-13):
      lo = mid
    else:
      hi = mid
  if lo == 0.0:  # not reached for finite means; never claim γ = 0
    raise ValueError(f"mean {mean!r} is too large for shape {shape!r}.")
  return lo


def _distribution(mean, shape) -> _Dist:
  """Validates (mean, shape) and returns the distribution's constants."""
  for name, value in (("mean", mean), ("shape", shape)):
    if np.ndim(value) != 0:
      raise ValueError(f"{name} must be a scalar; found shape {np.shape(value)}.")
    if not nx.is_concrete(value):
      raise ValueError(f"{name} must be a concrete number (not traced).")
  nx.check_array("mean", mean)  # NaN, inf, non-numeric
  nx.check_array("shape", shape, allow_inf=True)
  mean, shape = float(mean), float(shape)
  if mean < 1.0:
    raise ValueError(f"mean (E[K], the mean number of runs) must be >= 1; found {mean!r}.")
  if shape < 0.0:
    raise ValueError(f"shape must be >= 0 (inf: Poisson, 1: geometric, 0: logarithmic); "
                     f"found {shape!r}.")
  if math.isinf(shape):
    return _Dist(True, mean, shape, math.log(mean), 0.0)
  gamma = _tnb_gamma(mean, shape)
  return _Dist(False, mean, shape, math.log(mean), -math.log(gamma))


def _check_orders(orders, name="orders") -> np.ndarray:
  orders = np.asarray(orders, dtype=np.float64)
  if orders.ndim != 1 or orders.size == 0:
    raise ValueError(f"{name} must be a non-empty 1-D array; found shape {orders.shape}.")
  nx.check_array(name, orders, low=1.0, low_open=True)
  return orders


# --------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------


@functools.partial(persist.jit, static_argnames=("poisson", "include_order_one"))
def _tuned_kernel_jit(rdp, orders, cand_rdp, cand_orders, consts, *, poisson: bool,
                      include_order_one: bool):
  """Tuned RDP at ``orders`` (sorted ascending) from per-run RDP.

  Args:
    rdp: per-run RDP at ``orders``, shape (..., n).
    orders: sorted 1-D orders > 1 (targets λ).
    cand_rdp: per-run RDP at the candidate second orders, shape (..., m).
    cand_orders: 1-D candidate orders λ̂ > 1.
    consts: (log E[K], log(1/γ), E[K], η) of the run-count distribution.
    poisson: Theorem 6 (else Theorem 2).
    include_order_one: also use the λ̂ → 1 limit (Theorem 2).

  Returns:
    The tuned curve, shape (..., n), in ``rdp``'s dtype, monotone in λ.
  """
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  dtype = rdp.dtype
  lam = orders.astype(dtype)
  lam_hat = cand_orders.astype(dtype)
  log_mean, big_l, mean, shape = (consts[i].astype(dtype) for i in range(4))
  cand_rdp = jnp.where(jnp.isnan(cand_rdp), jnp.inf, cand_rdp)
  extra = log_mean / (lam - 1.0)
  if poisson:
    # Theorem 6 with the largest allowed ε̂ = log(1 + 1/(λ − 1)); δ̂ is the
    # best conversion over the candidates (Balle et al. 2020 Prop 12 and the
    # KL bound, jaxdp.rdp.to_delta), one δ̂ per target λ.
    eps_hat = nx.log1p(1.0 / (lam - 1.0))
    delta_hat = _rdp.to_delta(cand_rdp[..., None, :], lam_hat, eps_hat)
    extra = extra + mean * delta_hat
  else:
    # Theorem 2, minimised over the candidate λ̂ (and λ̂ → 1).
    obj = (1.0 - 1.0 / lam_hat) * cand_rdp + big_l / lam_hat
    best = jnp.min(obj, axis=-1, keepdims=True)
    if include_order_one:
      best = jnp.minimum(best, big_l)
    extra = extra + (1.0 + shape) * best
  out = rdp + extra
  out = jnp.where(jnp.isnan(out), jnp.inf, out)
  # D_λ is non-decreasing in λ: the bound at any λ' ≥ λ also holds at λ.
  out = jax.lax.cummin(out, axis=out.ndim - 1, reverse=True)
  return out * (1.0 + _SAFETY_ULPS * float(jnp.finfo(dtype).eps))


def _tuned_kernel(rdp, orders, cand_rdp, cand_orders, dist: _Dist, include_order_one: bool):
  """:func:`_tuned_kernel_jit` for NumPy orders and host constants."""
  dtype = rdp.dtype
  consts = np.array([dist.log_mean, dist.log_inv_gamma, dist.mean,
                     0.0 if dist.poisson else dist.shape])
  return _tuned_kernel_jit(rdp, jnp.asarray(orders, dtype), cand_rdp,
                           jnp.asarray(cand_orders, dtype), jnp.asarray(consts, dtype),
                           poisson=dist.poisson, include_order_one=include_order_one)


def repeat_and_select_rdp(rdp, orders, mean, shape, *, include_order_one: bool = True):
  """RDP of the best of K runs, from the per-run RDP curve on a grid.

  ε'(λ) per Papernot–Steinke Theorem 2 (truncated negative binomial,
  geometric, logarithmic) or Theorem 6 (Poisson); see the module docstring.
  The free order λ̂ is minimised over the grid itself (and λ̂ → 1, unless
  ``include_order_one=False``): with only grid values, no other λ̂ can be
  certified to do better (convexity argument in the module docstring). For a
  finer λ̂ use :func:`repeat_and_select_event_rdp`. The result is then made
  non-decreasing in λ (min over larger orders), and rounded up by a few ulps.

  Pure in ``rdp`` (may be traced, e.g. inside ``jit``); ``orders``, ``mean``
  and ``shape`` must be concrete.

  Args:
    rdp: per-run RDP values, orders on the last axis (any leading shape).
    orders: the 1-D orders (> 1), in any order.
    mean: E[K] ≥ 1, the mean number of runs.
    shape: ``inf`` (Poisson), 1 (geometric), 0 (logarithmic) or any other
      η ≥ 0 (truncated negative binomial) — dp_accounting's
      ``RepeatAndSelectDpEvent`` semantics.
    include_order_one: use the λ̂ → 1 candidate (1 + η)·log(1/γ) (TNB only).

  Returns:
    The tuned release's RDP at ``orders``, same shape and float dtype as
    ``rdp``.

  Raises:
    ValueError: naming ``mean``, ``shape`` or ``orders`` when out of domain,
      or when ``rdp``'s last axis does not match ``orders``.
  """
  dist = _distribution(mean, shape)
  orders = _check_orders(orders)
  rdp = jnp.asarray(rdp)
  if not jnp.issubdtype(rdp.dtype, jnp.floating):
    rdp = rdp.astype(jnp.result_type(float))
  if rdp.ndim == 0 or rdp.shape[-1] != orders.size:
    raise ValueError(f"rdp's last axis must have len(orders) = {orders.size} entries; "
                     f"found shape {rdp.shape}.")
  perm = np.argsort(orders, kind="stable")
  inv = np.argsort(perm, kind="stable")
  srt = rdp[..., perm]
  out = _tuned_kernel(srt, orders[perm], srt, orders[perm], dist, include_order_one)
  return out[..., inv]


def tuned(state, orders, mean, shape):
  """Tuned RDP curve from an RDP-accountant state (one run = the state).

  ``state`` is a :class:`jaxdp.accountant.RdpState` of
  ``jaxdp.accountant.rdp(orders)``: everything composed into it is one run.
  Its total ``rdp + compensation`` (rounded up, as the accountant reads it) is
  passed to :func:`repeat_and_select_rdp`, so λ̂ ranges over the
  accountant's orders (and λ̂ → 1). Works inside ``jit`` (``orders``,
  ``mean``, ``shape`` concrete). To keep composing after the tuned release,
  wrap the curve as ``RdpState(rdp=curve, compensation=jnp.zeros_like(curve))``.

  Args:
    state: an ``RdpState`` (or a bare array of per-run RDP values).
    orders: the accountant's orders (``jaxdp.rdp.DEFAULT_ORDERS`` when it
      was built with ``orders=None``).
    mean, shape: the run-count distribution (see
      :func:`repeat_and_select_rdp`).

  Returns:
    The tuned RDP curve at ``orders``, in the state's dtype.
  """
  if hasattr(state, "rdp") and hasattr(state, "compensation"):
    total = state.rdp + state.compensation
    total = jnp.where(total > 0, jnp.nextafter(total, jnp.asarray(jnp.inf, total.dtype)), total)
  else:
    total = jnp.asarray(state)
  return repeat_and_select_rdp(total, orders, mean, shape)
