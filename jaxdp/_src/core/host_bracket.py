"""A batched bracketing root finder on the host, for expensive ε evaluations.

Finds, for each of n problems, the boundary of {x : ε(x) <= target} for an ε
non-increasing in x, to an absolute tolerance ``tol`` in x: it returns the
smallest x evaluated feasible (``hi``) and the largest evaluated infeasible
(``lo``) with ``hi - lo <= tol``. Only the problems still open are evaluated
each round, through a caller's ``eps_of(x, idx)``, so each round costs what is
left. Knows nothing of privacy accounting; NumPy throughout (no compilation).
A strategy of the one root finder (:mod:`jaxdp._src.core.roots`), with its
contract: ``certified="upper"``, only evaluated points returned.

It suits evaluations that cost far more than the solver (the batched PLD,
:func:`jaxdp._src.solvers.boundary._pld_boundary`): it spends rounds, not
arithmetic. On g(x) = log(ε(x) / target), smooth and decreasing:

* the first round may evaluate a second start ``x1`` beside ``x0`` (one
  call): the next round then has the function's own secant, or a bracket;
* the predicted root: the secant root through the two latest evaluations,
  or, with three, inverse quadratic interpolation where that stays within
  half the secant's step of the secant root (log ε is curved, and from
  starts on one side the secant alone creeps in);
* one end known: a step to the predicted root (a Newton step with the
  caller's slope before any secant), half a tolerance past it, doubling
  after repeated moves of the same end (after two without a secant, three
  with one);
* both ends known: the predicted root where it lies inside (regula falsi on
  the ends otherwise); once it is within 0.9·tol of an end, the probe sits
  0.95·tol from that end, so that either outcome leaves a bracket narrower
  than tol when the prediction holds; otherwise half a tolerance to its
  infeasible side, so the next probe can close. Bisection where the bracket
  did not halve in two rounds, unless the steps shrink fourfold;
* a closing pair: where the predicted root is sure to well within tol (the
  secant's next error, ~ its last step times the one before, below
  ``_SURE``·tol), both r - 0.45·tol and r + 0.45·tol are evaluated in the same
  round, closing the bracket in one round instead of two.

On the 32 targets of ``benchmarks/calibration.py`` (start: the small-order
RDP boundary, 5-27% above the PLD one in σ) every bracket of 5e-7 closes in
at most 5 rounds (was 9 with one start, plain secant steps and single probes).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

_MAX_ROUNDS = 60
_SURE = 1.0      # closing pairs where the predicted error is below _SURE · tol
_GROW_SEC = 3    # same-end moves in a row before steps double (with a secant)


class Boundary(NamedTuple):
  """The result of :func:`solve` (flat arrays of the n problems)."""
  hi: np.ndarray        # smallest x evaluated feasible (xmax where none was)
  has_hi: np.ndarray
  lo: np.ndarray        # largest x evaluated infeasible (xmin where none was)
  has_lo: np.ndarray
  eps_hi: np.ndarray    # ε(hi) (inf where none)
  eps_lo: np.ndarray    # ε(lo) (nan where none)
  rounds: int           # evaluation rounds, the start's included


def _g(eps, target):
  with np.errstate(divide="ignore", invalid="ignore"):
    g = np.log(np.maximum(eps, 1e-300)) - np.log(np.maximum(target, 1e-300))
  return np.where(np.isnan(eps), np.inf, g)


def solve(eps_of: Callable[[np.ndarray, np.ndarray], np.ndarray], target, x0, xmin, xmax,
          tol, slope0=-1.0, max_rounds=_MAX_ROUNDS, x1=None) -> Boundary:
  """Boundary of {x : ε(x) <= target} for n problems at once.

  Args:
    eps_of: ``eps_of(x, idx)`` -> ε at x (m,) for the problems ``idx`` (m,);
      non-increasing in x; NaN is read as infeasible.
    target: (n,) targets.  x0: (n,) starts (clipped to [xmin, xmax]).
    xmin, xmax: the range of x (floats).
    tol: absolute tolerance in x (> 0).
    slope0: (n,) or scalar estimate of dg/dx at the start (< 0; g = log(ε /
      target)), used until two evaluations give a secant.
    max_rounds: evaluation rounds at most (then the bracket is what it is).
    x1: optional (n,) second starts, evaluated in the first round beside x0
      (one call with every problem twice): the second round then has a
      secant of the function itself, or a bracket, instead of ``slope0``.

  Returns:
    :class:`Boundary`. A problem is closed when ``has_hi & has_lo & (hi - lo
    <= tol)``, when ``hi <= xmin`` (feasible everywhere), or when ``lo >=
    xmax`` (infeasible everywhere).
  """
  target = np.asarray(target, np.float64)
  n = target.shape[0]
  x = np.clip(np.asarray(x0, np.float64), xmin, xmax)
  lo, hi = np.full(n, float(xmin)), np.full(n, float(xmax))
  glo, ghi = np.full(n, np.inf), np.full(n, -np.inf)
  has_lo, has_hi = np.zeros(n, bool), np.zeros(n, bool)
  eps_hi, eps_lo = np.full(n, np.inf), np.full(n, np.nan)
  prev_x, prev_g = np.full(n, np.nan), np.full(n, np.nan)     # the evaluation before
  old_x, old_g = np.full(n, np.nan), np.full(n, np.nan)       # and the one before that
  last_x, last_g = np.full(n, np.nan), np.full(n, np.nan)     # the latest one
  width = np.full((2, n), np.inf)                              # bracket widths, 2 rounds back
  run = np.zeros(n, np.int64)                                  # same-end moves in a row
  last_side = np.zeros(n, np.int64)
  slope0 = np.broadcast_to(np.asarray(slope0, np.float64), (n,))
  idx = np.arange(n)
  rounds = 0
  # Each round evaluates x (every open problem) and, where ``two``, x2 too.
  x2 = x.copy() if x1 is None else np.clip(np.asarray(x1, np.float64), xmin, xmax)
  two = np.full(n, x1 is not None)
  for rounds in range(1, max_rounds + 1):
    pair = idx[two[idx]]
    e_all = np.asarray(eps_of(np.concatenate([x[idx], x2[pair]]), np.concatenate([idx, pair])),
                       np.float64).reshape(-1)
    for ij, xj, e in ((idx, x[idx], e_all[:idx.size]), (pair, x2[pair], e_all[idx.size:])):
      if not ij.size:
        continue
      g = _g(e, target[ij])
      feas = e <= target[ij]
      side = np.where(feas, 2, 1)
      run[ij] = np.where(side == last_side[ij], run[ij] + 1, 1)
      last_side[ij] = side
      # The feasible end is the smallest feasible x, the infeasible end the
      # largest infeasible one (what the latest probe gives when it lies
      # inside the bracket, as every single probe after the first round does).
      new_hi = feas & (~has_hi[ij] | (xj <= hi[ij]))
      new_lo = ~feas & (~has_lo[ij] | (xj >= lo[ij]))
      up_hi, up_lo = ij[new_hi], ij[new_lo]
      hi[up_hi], ghi[up_hi], eps_hi[up_hi], has_hi[up_hi] = xj[new_hi], g[new_hi], e[new_hi], True
      lo[up_lo], glo[up_lo], eps_lo[up_lo], has_lo[up_lo] = xj[new_lo], g[new_lo], e[new_lo], True
      old_x[ij], old_g[ij] = prev_x[ij], prev_g[ij]
      prev_x[ij], prev_g[ij] = last_x[ij], last_g[ij]
      last_x[ij], last_g[ij] = xj, g
    both = has_lo & has_hi
    closed = (both & (hi - lo <= tol)) | (has_hi & (hi <= xmin)) | (has_lo & (lo >= xmax))
    idx = np.nonzero(~closed)[0]
    if not idx.size:
      break
    x[idx], x2[idx], two[idx] = _propose(idx, lo, glo, has_lo, hi, ghi, has_hi,
                                         (old_x, old_g, prev_x, prev_g, last_x, last_g),
                                         width, run, slope0, xmin, xmax, tol)
    width[0, idx], width[1, idx] = width[1, idx], np.where(both[idx], hi[idx] - lo[idx], np.inf)
  return Boundary(hi, has_hi, lo, has_lo, eps_hi, eps_lo, rounds)


def _iqi(x0, g0, x1, g1, x2, g2):
  """The root of the quadratic x(g) through three evaluations (inverse
  quadratic interpolation; NaN where two g's coincide)."""
  x0, g0, x1, g1, x2, g2 = (np.asarray(a, np.float64) for a in (x0, g0, x1, g1, x2, g2))
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    r = (x0 * g1 * g2 / ((g0 - g1) * (g0 - g2)) + x1 * g0 * g2 / ((g1 - g0) * (g1 - g2))
         + x2 * g0 * g1 / ((g2 - g0) * (g2 - g1)))
  return np.where((g0 == g1) | (g1 == g2) | (g0 == g2), np.nan, r)


def _propose(i, lo, glo, has_lo, hi, ghi, has_hi, history, width, run, slope0, xmin, xmax, tol):
  """Next probes of the open problems ``i`` (see the module docstring)."""
  old_x, old_g, prev_x, prev_g, last_x, last_g = (a[i] for a in history)
  lo, glo, hi, ghi = lo[i], glo[i], hi[i], ghi[i]
  has_lo, has_hi = has_lo[i], has_hi[i]
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    dx = last_x - prev_x
    sec = (last_g - prev_g) / dx
    ok_sec = np.isfinite(sec) & (sec < 0) & (dx != 0)
    slope = np.where(ok_sec, sec, slope0[i])
    grow = np.exp2(np.clip(run[i] - np.where(ok_sec, _GROW_SEC, 2), 0, 30).astype(np.float64))
    # The predicted root: the secant's through the two latest evaluations, or
    # with three, inverse quadratic interpolation where it stays within half
    # the secant's step of the secant root (log ε is curved: from starts on
    # one side the secant alone creeps in).
    r_sec = last_x - last_g / sec
    r_q = _iqi(old_x, old_g, prev_x, prev_g, last_x, last_g)
    r_sec = np.where(ok_sec & np.isfinite(r_q)
                     & (np.abs(r_q - r_sec) <= 0.5 * np.abs(r_sec - last_x)), r_q, r_sec)
    # One end known: a step to the predicted root (the secant's, else a
    # Newton step with slope0), half a tolerance past it.
    use = ok_sec & np.isfinite(r_sec)
    d_dn = np.where(use & (r_sec < hi), hi - r_sec,
                    np.where(np.isfinite(ghi), ghi / slope, 1.0))   # >= 0: root below hi
    d_up = np.where(use & (r_sec > lo), r_sec - lo,
                    np.where(np.isfinite(glo), glo / -slope, 1.0))  # >= 0: root above lo
    p_dn = hi - np.minimum(np.maximum(d_dn + 0.5 * tol, 0.95 * tol) * grow, 8.0 * grow)
    p_up = lo + np.minimum(np.maximum(d_up + 0.5 * tol, 0.95 * tol) * grow, 8.0 * grow)
    # Both ends: the predicted root where inside, else regula falsi, else the
    # midpoint.
    w = hi - lo
    mid = lo + 0.5 * w
    rf = lo + w * glo / (glo - ghi)
    r = np.where(ok_sec & (r_sec > lo) & (r_sec < hi), r_sec,
                 np.where(np.isfinite(rf) & (rf > lo) & (rf < hi), rf, mid))
    both = has_lo & has_hi
    r = np.where(both, r, np.where(has_hi, hi - d_dn, lo + d_up))
    # The secant's next error is ~ (its last step) x (the step before) in
    # these units (log ε against log σ or log q: curvature O(1)). Where that
    # is far below tol, probe both sides of the root at once (a closing pair).
    step = np.abs(r - last_x)
    sure = ok_sec & np.isfinite(r) & (step * np.maximum(np.abs(r - prev_x), step)
                                      <= _SURE * tol)
    # Bisection where the bracket did not halve in two rounds, unless the
    # secant steps shrink fourfold (one-sided convergence of a wide bracket).
    stalled = (w > 0.5 * width[0, i]) & ~(ok_sec & (step <= 0.25 * np.abs(dx)))
    p_both = np.where(r - lo <= 0.9 * tol, lo + 0.95 * tol,
                      np.where(hi - r <= 0.9 * tol, hi - 0.95 * tol,
                               np.maximum(r - 0.5 * tol, lo + 0.5 * tol)))
    p_both = np.where(stalled & ~sure, mid, p_both)
    # A pair only where one probe cannot close: not with an end within tol.
    inside = (~has_lo | (r - 0.45 * tol > lo + 0.05 * tol)) & \
             (~has_hi | (r + 0.45 * tol < hi - 0.05 * tol))
    two = sure & inside & ~(both & ((r - lo <= 0.9 * tol) | (hi - r <= 0.9 * tol)))
    p = np.where(two, r - 0.45 * tol,
                 np.where(both, p_both, np.where(has_hi, p_dn, p_up)))
    p2 = np.where(two, r + 0.45 * tol, p)
  p = np.where(np.isfinite(p), p, np.where(has_hi, xmin, xmax))
  p2 = np.where(np.isfinite(p2), p2, p)
  return np.clip(p, xmin, xmax), np.clip(p2, xmin, xmax), two
