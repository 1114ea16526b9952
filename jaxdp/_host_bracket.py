"""A batched bracketing root finder on the host, for expensive ε evaluations.

Finds, for each of n problems, the boundary of {x : ε(x) <= target} for an ε
non-increasing in x, to an absolute tolerance ``tol`` in x: it returns the
smallest x evaluated feasible (``hi``) and the largest evaluated infeasible
(``lo``) with ``hi - lo <= tol``. Only the problems still open are evaluated
each round, through a caller's ``eps_of(x, idx)``, so each round costs what is
left. Knows nothing of privacy accounting; NumPy throughout (no compilation).

It suits evaluations that cost far more than the solver (the batched PLD,
:func:`jaxdp._calibrate_boundary._pld_boundary`): it spends rounds, not
arithmetic. On g(x) = log(ε(x) / target), smooth and decreasing:

* one end known (a start, or steps that have not yet crossed): a Newton
  step to the predicted root with the latest secant slope (or the caller's
  slope at the start), overshot by half a tolerance so that it usually lands
  just across the root, doubling after repeated moves of the same end;
* both ends known: the secant root through the two latest evaluations (regula
  falsi on the ends where that leaves the bracket); once the root is
  predicted within 0.9·tol of an end, the probe sits 0.95·tol from that end,
  so that either outcome leaves a bracket narrower than tol when the
  prediction holds; otherwise half a tolerance to its infeasible side, so the
  next probe can close. Bisection where the bracket did not halve in two
  rounds.

Near the root this is a secant method (order ~1.6), which from a start within
a few percent of the root closes a 1e-6 bracket in about five rounds.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

_MAX_ROUNDS = 60


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
          tol, slope0=-1.0, max_rounds=_MAX_ROUNDS) -> Boundary:
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
  last_x, last_g = np.full(n, np.nan), np.full(n, np.nan)     # the latest one
  width = np.full((2, n), np.inf)                              # bracket widths, 2 rounds back
  run = np.zeros(n, np.int64)                                  # same-end moves in a row
  last_side = np.zeros(n, np.int64)
  slope0 = np.broadcast_to(np.asarray(slope0, np.float64), (n,))
  idx = np.arange(n)
  rounds = 0
  for rounds in range(1, max_rounds + 1):
    e = np.asarray(eps_of(x[idx], idx), np.float64).reshape(-1)
    g = _g(e, target[idx])
    feas = e <= target[idx]
    side = np.where(feas, 2, 1)
    run[idx] = np.where(side == last_side[idx], run[idx] + 1, 1)
    last_side[idx] = side
    up_hi, up_lo = idx[feas], idx[~feas]
    hi[up_hi], ghi[up_hi], eps_hi[up_hi], has_hi[up_hi] = x[up_hi], g[feas], e[feas], True
    lo[up_lo], glo[up_lo], eps_lo[up_lo], has_lo[up_lo] = x[up_lo], g[~feas], e[~feas], True
    prev_x[idx], prev_g[idx] = last_x[idx], last_g[idx]
    last_x[idx], last_g[idx] = x[idx], g
    both = has_lo & has_hi
    closed = (both & (hi - lo <= tol)) | (has_hi & (hi <= xmin)) | (has_lo & (lo >= xmax))
    idx = np.nonzero(~closed)[0]
    if not idx.size:
      break
    x[idx] = _propose(idx, lo, glo, has_lo, hi, ghi, has_hi, prev_x, prev_g, last_x, last_g,
                      width, run, slope0, xmin, xmax, tol)
    width[0, idx], width[1, idx] = width[1, idx], np.where(both[idx], hi[idx] - lo[idx], np.inf)
  return Boundary(hi, has_hi, lo, has_lo, eps_hi, eps_lo, rounds)


def _propose(i, lo, glo, has_lo, hi, ghi, has_hi, prev_x, prev_g, last_x, last_g, width, run,
             slope0, xmin, xmax, tol):
  """Next probes of the open problems ``i`` (see the module docstring)."""
  lo, glo, hi, ghi = lo[i], glo[i], hi[i], ghi[i]
  has_lo, has_hi = has_lo[i], has_hi[i]
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    dx = last_x[i] - prev_x[i]
    sec = (last_g[i] - prev_g[i]) / dx
    ok_sec = np.isfinite(sec) & (sec < 0) & (dx != 0)
    slope = np.where(ok_sec, sec, slope0[i])
    grow = np.exp2(np.clip(run[i] - 2, 0, 30).astype(np.float64))
    # One end known: Newton step to the predicted root, half a tolerance past it.
    d_dn = np.where(np.isfinite(ghi), ghi / slope, 1.0)          # >= 0: root below hi
    d_up = np.where(np.isfinite(glo), glo / -slope, 1.0)         # >= 0: root above lo
    p_dn = hi - np.minimum(np.maximum(d_dn + 0.5 * tol, 0.95 * tol) * grow, 8.0 * grow)
    p_up = lo + np.minimum(np.maximum(d_up + 0.5 * tol, 0.95 * tol) * grow, 8.0 * grow)
    # Both ends: secant root, else regula falsi, else the midpoint.
    w = hi - lo
    mid = lo + 0.5 * w
    r_sec = last_x[i] - last_g[i] / sec
    rf = lo + w * glo / (glo - ghi)
    r = np.where(ok_sec & (r_sec > lo) & (r_sec < hi), r_sec,
                 np.where(np.isfinite(rf) & (rf > lo) & (rf < hi), rf, mid))
    stalled = w > 0.5 * width[0, i]
    p_both = np.where(r - lo <= 0.9 * tol, lo + 0.95 * tol,
                      np.where(hi - r <= 0.9 * tol, hi - 0.95 * tol,
                               np.maximum(r - 0.5 * tol, lo + 0.5 * tol)))
    p_both = np.where(stalled, mid, p_both)
  p = np.where(has_lo & has_hi, p_both, np.where(has_hi, p_dn, p_up))
  p = np.where(np.isfinite(p), p, np.where(has_hi, xmin, xmax))
  return np.clip(p, xmin, xmax)
