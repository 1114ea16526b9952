"""Certified per-step RDP intervals at the orders an order search has not
evaluated (the bounds of :mod:`jaxdp._src.kernels.order_search`, whose
module docstring states them): from the convexity of (α-1)·ε(α) = log A_α
and the monotonicity of ε(α), through the nearest evaluated orders on each
side; split out of it.

:func:`_bounds` takes any evaluated set (``jnp`` or ``numpy``);
:func:`_probe_bounds` the search's own rounds (the base orders and at most
one more per configuration), as one compiled program without scans or
per-element gathers.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import persist

# Relative deflation of lower bounds: covers the rounding of the values they
# extrapolate (σ ≥ 0.3) or the quadrature allowance for σ < 0.3.
_SLACK = 1e-8
_SLACK_SMALL_SIGMA = 1e-2


def _neighbours(known, xp=jnp):
  """Nearest evaluated orders around every order, in the α = 1 + orders + sentinel layout.

  Args:
    known: (N, m) mask of evaluated orders.
    xp: ``jnp`` (traced) or ``numpy`` (the host path, :mod:`jaxdp._src.kernels.host_rdp`).

  Returns:
    ``(l1, l2, r1, r2)``, int32 (N, m + 2): the last and second-last evaluated
    column strictly left of each column (-1: none; column 0, α = 1, counts as
    evaluated) and the first and second strictly right (m + 1: none).
  """
  n, m = known.shape
  i32 = xp.int32
  kp = xp.concatenate([xp.ones((n, 1), bool), known, xp.zeros((n, 1), bool)], axis=1)
  idx = xp.arange(m + 2, dtype=i32)
  sentinel = i32(m + 1)
  if xp is jnp:
    # int32 associative scans: several times faster on CPU than lax.cummax.
    left = jax.lax.associative_scan(jnp.maximum, jnp.where(kp, idx, i32(-1)), axis=1)
    right = jax.lax.associative_scan(jnp.minimum, jnp.where(kp, idx, sentinel), axis=1,
                                     reverse=True)
  else:
    left = np.maximum.accumulate(np.where(kp, idx, i32(-1)), axis=1)
    right = np.minimum.accumulate(np.where(kp, idx, sentinel)[:, ::-1], axis=1)[:, ::-1]
  l1 = xp.concatenate([xp.full((n, 1), -1, i32), left[:, :-1]], axis=1)
  r1 = xp.concatenate([right[:, 1:], xp.full((n, 1), sentinel, i32)], axis=1)
  l2 = xp.where(l1 >= 0, xp.take_along_axis(l1, xp.maximum(l1, 0), axis=1), -1)
  r2 = xp.where(r1 < sentinel, xp.take_along_axis(r1, xp.minimum(r1, sentinel), axis=1), sentinel)
  return l1, l2, r1, r2


class _Around(NamedTuple):
  """Per (row, grid column): f = (α-1)·ε(α) and α at the two nearest
  evaluated grid columns on each side (l1, l2 left, r1, r2 right), and which
  of them exist (l1 always does: α = 1)."""
  f_l1: jnp.ndarray
  f_l2: jnp.ndarray
  f_r1: jnp.ndarray
  f_r2: jnp.ndarray
  a_l1: jnp.ndarray
  a_l2: jnp.ndarray
  a_r1: jnp.ndarray
  a_r2: jnp.ndarray
  past_one: jnp.ndarray   # l1 >= 1: the left neighbour is an order, not α = 1
  has_l2: jnp.ndarray
  has_r1: jnp.ndarray
  has_r2: jnp.ndarray


def _grid(orders, dtype, xp=jnp):
  """α = 1, the m orders, a sentinel beyond the last: the columns of :class:`_Around`."""
  a = xp.asarray(orders, dtype)
  return xp.concatenate([xp.ones((1,), dtype), a, xp.full((1,), 2.0 * a[-1] + 1.0, dtype)])


def _bounds(table, known, q, sigma, orders, xp=jnp):
  """Certified per-step RDP interval [lo, hi] at every order (module docstring).

  Args:
    table: (N, m) per-step RDP, valid where ``known``.
    known: (N, m) mask of evaluated orders.
    q, sigma: (N,) sampling rates and noise multipliers.
    orders: sorted tuple of the m orders.
    xp: ``jnp`` (traced) or ``numpy`` (the host path).

  Returns:
    ``(lo, hi)``, each (N, m); equal to ``table`` where known, hi = +inf
    beyond the largest evaluated order.
  """
  n, m = table.shape
  dtype = table.dtype
  grid = _grid(orders, dtype, xp)
  f = xp.where(known, table * (grid[1:m + 1] - 1.0), 0.0)
  fp = xp.concatenate([xp.zeros((n, 1), dtype), f, xp.zeros((n, 1), dtype)], axis=1)
  sentinel = m + 1
  l1, l2, r1, r2 = _neighbours(known, xp)
  take = lambda i: xp.take_along_axis(fp, xp.clip(i, 0, sentinel), axis=1)
  at = lambda i: grid[xp.clip(i, 0, sentinel)]
  around = _Around(take(l1), take(l2), take(r1), take(r2), at(l1), at(l2), at(r1), at(r2),
                   l1 >= 1, l2 >= 0, r1 < sentinel, r2 < sentinel)
  return _bounds_around(around, grid, table, known, q, sigma, xp)


def _bounds_around(nb: _Around, grid, table, known, q, sigma, xp=jnp):
  """:func:`_bounds` from the evaluated neighbours of every order."""
  m = table.shape[1]
  safe = lambda d: xp.where(d > 0, d, 1.0)
  lo = nb.f_l1
  lo = xp.where(nb.has_l2, xp.maximum(lo, nb.f_l1 + (grid - nb.a_l1) * (nb.f_l1 - nb.f_l2)
                                      / safe(nb.a_l1 - nb.a_l2)), lo)
  lo = xp.where(nb.has_r2, xp.maximum(lo, nb.f_r1 + (grid - nb.a_r1) * (nb.f_r2 - nb.f_r1)
                                      / safe(nb.a_r2 - nb.a_r1)), lo)
  hi = xp.where(nb.has_r1, nb.f_l1 + (grid - nb.a_l1) * (nb.f_r1 - nb.f_l1) / safe(nb.a_r1 - nb.a_l1),
                xp.inf)
  beta = safe(grid - 1.0)
  rdp_lo = lo / beta
  rdp_lo = xp.where(nb.past_one, xp.maximum(rdp_lo, nb.f_l1 / safe(nb.a_l1 - 1.0)), rdp_lo)
  rdp_hi = hi / beta
  rdp_hi = xp.where(nb.has_r1, xp.minimum(rdp_hi, nb.f_r1 / safe(nb.a_r1 - 1.0)), rdp_hi)
  rdp_lo, rdp_hi = rdp_lo[:, 1:m + 1], rdp_hi[:, 1:m + 1]
  # Every order: D_α ≥ D_1 = KL ≥ 2·TV² (Pinsker), TV = q·(2Φ(1/(2σ)) - 1) the
  # total variation between the mixture and N(0, σ²). Needed near α = 1, where
  # the bounds above reach 0 and the conversion's KL branch would then accept
  # every order as a candidate.
  tv = total_variation(q, sigma, xp)
  rdp_lo = xp.maximum(rdp_lo, (2.0 * tv * tv)[:, None])
  slack = xp.where(sigma >= 0.3, _SLACK, _SLACK_SMALL_SIGMA)[:, None]
  rdp_lo = xp.where(known, table, xp.maximum(rdp_lo, 0.0) * (1.0 - slack))
  rdp_hi = xp.where(known, table, rdp_hi)
  return rdp_lo, rdp_hi


def total_variation(q, sigma, xp=jnp):
  """TV distance between the sampled Gaussian's mixture (1-q)·N(0, σ²) +
  q·N(1, σ²) and N(0, σ²): q·(2Φ(1/(2σ)) - 1) = q·erf(1/(2√2σ)) (Pinsker's
  floor on every RDP order: D_α ≥ KL ≥ 2·TV²)."""
  return q * _erf(xp)(1.0 / (2.0 * math.sqrt(2.0) * sigma))


def _erf(xp):
  if xp is jnp:
    return jax.scipy.special.erf
  # math.erf (within an ulp of scipy's; the bound below keeps a slack far
  # above that): a host question then needs no scipy.special (~0.3 s to import).
  return lambda x: np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


@functools.partial(persist.jit, static_argnames=("orders",))
def _compiled_bounds(table, known, q, sigma, *, orders):
  """Jitted :func:`_bounds` (``jnp``)."""
  return _bounds(table, known, q, sigma, orders)


def _take_runs(x, index):
  """``x[:, index]`` for a static index array made of runs of equal values:
  each run a broadcast column (XLA's gather wrote its result transposed,
  and every consumer then read it across rows, several times slower)."""
  starts = np.flatnonzero(np.diff(index, prepend=index[0] - 1))
  ends = np.append(starts[1:], index.size)
  n = x.shape[0]
  return jnp.concatenate([jnp.broadcast_to(x[:, int(index[a]), None], (n, int(b - a)))
                          for a, b in zip(starts, ends)], axis=1)


@functools.partial(persist.jit, static_argnames=("orders", "base"))
def _probe_bounds(base_table, probe, probe_value, q, sigma, *, orders, base):
  """``(rdp_lo, rdp_hi, known)`` of :func:`_bounds` where the evaluated
  orders are the base ones and at most one probe per configuration
  (arguments: :func:`jaxdp._src.kernels.order_search._probe_candidates`'s):
  the base orders' neighbours are constants, moved by the probe only where
  it lies between an order and its nearest base neighbour."""
  n, m, dtype = q.shape[0], len(orders), base_table.dtype
  grid = _grid(orders, dtype)
  base = np.asarray(base)
  known_1 = np.zeros((1, m), bool)
  known_1[0, base] = True
  sl1, sl2, sr1, sr2 = (np.clip(v[0], -1, m + 1) for v in _neighbours(known_1, np))
  col = np.arange(m + 2)
  # The probe's grid column; none: left of every column, so no test below holds.
  pg = jnp.where(probe >= 0, probe + 1, -(m + 3))[:, None]
  known = jnp.zeros((n, m), bool).at[:, base].set(True) | (jnp.arange(m) == probe[:, None])
  table = jnp.full((n, m), jnp.inf, dtype).at[:, base].set(base_table)
  table = jnp.where(jnp.arange(m) == probe[:, None], probe_value[:, None], table)
  fs = jnp.zeros((n, m + 2), dtype).at[:, base + 1].set(base_table * (grid[base + 1] - 1.0))
  f_p = (probe_value * (grid[jnp.clip(pg[:, 0], 0, m + 1)] - 1.0))[:, None]
  a_p = grid[jnp.clip(pg, 0, m + 1)]
  f_at = lambda s: _take_runs(fs, np.clip(s, 0, m + 1))
  a_at = lambda s: grid[np.clip(s, 0, m + 1)]
  left1 = (pg < col) & (pg > sl1)                  # the probe is the nearest on the left
  left2 = ~left1 & (pg < sl1) & (pg > sl2)         # ... the second nearest
  right1 = (pg > col) & (pg < sr1)
  right2 = ~right1 & (pg > sr1) & (pg < sr2)
  pick = lambda is_p, v_p, v: jnp.where(is_p, v_p, v)
  around = _Around(
      f_l1=pick(left1, f_p, f_at(sl1)), f_l2=pick(left1, f_at(sl1), pick(left2, f_p, f_at(sl2))),
      f_r1=pick(right1, f_p, f_at(sr1)), f_r2=pick(right1, f_at(sr1), pick(right2, f_p, f_at(sr2))),
      a_l1=pick(left1, a_p, a_at(sl1)), a_l2=pick(left1, a_at(sl1), pick(left2, a_p, a_at(sl2))),
      a_r1=pick(right1, a_p, a_at(sr1)), a_r2=pick(right1, a_at(sr1), pick(right2, a_p, a_at(sr2))),
      past_one=left1 | (sl1 >= 1), has_l2=pick(left1, sl1 >= 0, left2 | (sl2 >= 0)),
      has_r1=right1 | (sr1 < m + 1), has_r2=pick(right1, sr1 < m + 1, right2 | (sr2 < m + 1)))
  rdp_lo, rdp_hi = _bounds_around(around, grid, table, known, q, sigma)
  return rdp_lo, rdp_hi, known
