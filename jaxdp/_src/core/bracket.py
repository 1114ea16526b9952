"""The jittable bracketing root finder behind :mod:`jaxdp.calibrate`.

Finds the boundary of {x : ε(x) ≤ target} for a function ε non-increasing in
x, batched: a safeguarded secant method on g(x) = log ε(x) - log target with
geometric bracketing, offset regula falsi and bisection steps (see the
:mod:`jaxdp.calibrate` docstring). Pure: used inside ``jit`` (:func:`_solve`)
and step by step on the host (:func:`_init`, :func:`_done`, :func:`_propose`,
:func:`_update`). Knows nothing of privacy accounting.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

_MAX_ITER = 100        # iteration budget of the jitted solver


class _Bracket(NamedTuple):
  lo: jax.Array       # largest x evaluated infeasible (or xmin)
  glo: jax.Array      # g(lo)
  has_lo: jax.Array
  hi: jax.Array       # smallest x evaluated feasible (or xmax)
  ghi: jax.Array
  eps_hi: jax.Array   # ε(hi)
  has_hi: jax.Array
  last: jax.Array     # 1: lo moved last, 2: hi moved last
  run: jax.Array      # consecutive moves of the same end
  k: jax.Array        # iterations done


def _tiny(dtype):
  return 1e-300 if dtype == jnp.float64 else 1e-37


def _g(eps, target):
  t = _tiny(eps.dtype)
  return jnp.log(jnp.maximum(eps, t)) - jnp.log(jnp.maximum(target, t))


def _init(x0, e0, target, xmin, xmax):
  feas = e0 <= target
  g0 = _g(e0, target)
  inf = jnp.full_like(x0, jnp.inf)
  return _Bracket(
      lo=jnp.where(feas, xmin, x0), glo=jnp.where(feas, inf, g0), has_lo=~feas,
      hi=jnp.where(feas, x0, xmax), ghi=jnp.where(feas, g0, -inf),
      eps_hi=jnp.where(feas, e0, inf), has_hi=feas,
      last=jnp.where(feas, 2, 1).astype(jnp.int32), run=jnp.ones(x0.shape, jnp.int32),
      k=jnp.zeros((), jnp.int32))


def _done(s: _Bracket, xmin, xmax, tol):
  both = s.has_lo & s.has_hi
  return ((both & (s.hi - s.lo <= tol)) | (s.has_hi & (s.hi <= xmin))
          | (s.has_lo & (s.lo >= xmax)))


def _propose(s: _Bracket, xmin, xmax, tol):
  """Next point: offset regula falsi / bisection / geometric expansion."""
  w = s.hi - s.lo
  mid = s.lo + 0.5 * w
  denom = s.glo - s.ghi
  ok = jnp.isfinite(denom) & (denom > 0) & jnp.isfinite(s.glo)
  frac = jnp.where(ok, s.glo / jnp.where(ok, denom, 1.0), 0.5)
  offset = jnp.where(s.last == 1, 0.25 * tol, -0.25 * tol)
  p_both = s.lo + frac * w + offset
  p_both = jnp.where(s.run >= 2, mid, p_both)
  margin = jnp.minimum(0.05 * w, 0.25 * tol)
  p_both = jnp.clip(p_both, s.lo + margin, s.hi - margin)
  grow = jnp.exp2(jnp.minimum(s.run - 1, 8).astype(s.lo.dtype))
  step_dn = jnp.clip(-1.5 * s.ghi, 2.0 * tol, 4.0) * grow
  step_up = jnp.clip(1.5 * s.glo, 2.0 * tol, 4.0) * grow
  p_dn = jnp.maximum(s.hi - jnp.where(jnp.isnan(step_dn), 1.0, step_dn), xmin)
  p_up = jnp.minimum(s.lo + jnp.where(jnp.isnan(step_up), 1.0, step_up), xmax)
  both = s.has_lo & s.has_hi
  p = jnp.where(both, p_both, jnp.where(s.has_hi, p_dn, p_up))
  fallback = jnp.where(both, mid, jnp.where(s.has_hi, xmin, xmax))
  return jnp.where(jnp.isfinite(p), p, fallback)


def _update(s: _Bracket, p, e, target, active):
  feas = e <= target
  g = _g(e, target)
  up_hi = active & feas
  up_lo = active & ~feas
  side = jnp.where(feas, 2, 1).astype(jnp.int32)
  run = jnp.where(active, jnp.where(side == s.last, s.run + 1, 1), s.run)
  return _Bracket(
      lo=jnp.where(up_lo, p, s.lo), glo=jnp.where(up_lo, g, s.glo), has_lo=s.has_lo | up_lo,
      hi=jnp.where(up_hi, p, s.hi), ghi=jnp.where(up_hi, g, s.ghi),
      eps_hi=jnp.where(up_hi, e, s.eps_hi), has_hi=s.has_hi | up_hi,
      last=jnp.where(active, side, s.last), run=run.astype(jnp.int32), k=s.k + 1)


def _solve(eps_of_x, target, x0, xmin, xmax, tol, max_iter=_MAX_ITER):
  """Boundary of {x : eps_of_x(x) ≤ target} in [xmin, xmax] (ε non-increasing in x).

  Pure and jittable. Returns the final :class:`_Bracket`: ``hi`` is the
  smallest x evaluated feasible (valid where ``has_hi``), ``lo`` the largest
  evaluated infeasible; on convergence ``hi - lo ≤ tol``, or ``hi == xmin``
  (feasible everywhere), or ``lo == xmax`` (unreachable).
  """
  x0 = jnp.clip(x0, xmin, xmax)
  s = _init(x0, eps_of_x(x0), target, xmin, xmax)

  def cond(s):
    return (s.k < max_iter) & jnp.any(~_done(s, xmin, xmax, tol))

  def body(s):
    active = ~_done(s, xmin, xmax, tol)
    p = _propose(s, xmin, xmax, tol)
    p = jnp.where(active, p, s.hi)
    return _update(s, p, eps_of_x(p), target, active)

  return jax.lax.while_loop(cond, body, s)
