"""Boundary of a monotone feasibility set by rounds of probes.

For a few configurations (one question from the command line), calibration
by a jitted root-finder costs more in tracing and compilation than in
arithmetic. Probing ``points`` values per configuration and round through
the public ε function instead reuses the programs that ``jaxdp.epsilon``
already compiled (and that the persistent cache keeps), and every answer is
an x whose ε that very function evaluated to <= the target (the contract of
the one root finder, :mod:`jaxdp._src.core.roots`, ``certified="upper"``).

Equally spaced probes shrink the bracket by a factor points + 1 per round
(7 rounds from the 23 log-units of σ ∈ [1e-3, 1e7] to 5e-7 with 16
points); probes concentrated around an interpolated root shrink it much
faster where ε is smooth (5 rounds; :func:`boundary`).
"""

from __future__ import annotations

import numpy as np


def boundary(eps_at, target, xmin, xmax, tol, points=16):
  """Smallest probed x with ε(x) <= target, for ε non-increasing in x.

  Rounds of ``points`` probes per configuration. The first spans
  [xmin, xmax]; later ones are equally spaced across the bracket
  [infeasible, feasible], or, where ε at the two ends gives a root estimate
  (interpolated in log ε, or in ε where it is not positive), concentrated
  around it: ±1/4 of the bracket while it is wider than 0.1, ±1/32 after.
  A round that brackets the root there shrinks the bracket ~(points - 1)·2
  to 16 times more than equal spacing (5 rounds instead of 7 for σ from
  [1e-3, 1e7] to 5e-7 with 16 points); after a round that misses it, that
  configuration goes on with equal spacing (at most one round lost).

  Args:
    eps_at: ``eps_at(idx, x)`` -> ε at the (m, P) values x for the
      configurations ``idx`` (m,) (host NumPy, any vectorised evaluation).
    target: (n,) ε targets.
    xmin, xmax: the search interval (scalars).
    tol: stop when the bracket [infeasible, feasible] is at most this wide.
    points: probes per configuration and round.

  Returns:
    (x, eps, feasible): (n,) the smallest feasible x found (``xmin`` when
    feasible everywhere; ``xmax`` where nothing is feasible), ε there, and
    whether any probe was feasible. Where feasible and x > xmin, some
    probe in [x - tol, x) was infeasible.
  """
  target = np.asarray(target, np.float64)
  n = target.shape[0]
  idx = np.arange(n)
  x0 = np.broadcast_to(np.linspace(xmin, xmax, points), (n, points))
  lo, hi, e_lo, e_hi, has, _ = _update(x0, eps_at(idx, x0), target, np.full(n, xmin),
                                       np.full(n, xmax), np.full(n, np.inf), np.full(n, np.inf),
                                       np.zeros(n, bool), first=True)
  missed = np.zeros(n, bool)
  for _ in range(200):
    active = np.nonzero(has & (hi > xmin) & (hi - lo > tol))[0]
    if active.size == 0:
      break
    l, h = lo[active], hi[active]
    w = h - l
    frac = np.arange(1, points + 1) / (points + 1.0)
    x = l[:, None] + w[:, None] * frac[None, :]
    r = _root_estimate(l, h, e_lo[active], e_hi[active], target[active])
    focus = np.isfinite(r) & ~missed[active]
    half = np.where(w > 0.1, 0.25, 1.0 / 32.0) * w
    inner = r[:, None] + half[:, None] * np.linspace(-1.0, 1.0, points)[None, :]
    inner = np.clip(inner, (l + 1e-3 * w)[:, None], (h - 1e-3 * w)[:, None])
    x = np.where(focus[:, None], inner, x)
    lo[active], hi[active], e_lo[active], e_hi[active], has[active], miss = _update(
        x, eps_at(active, x), target[active], l, h, e_lo[active], e_hi[active], has[active],
        first=False)
    missed[active] |= miss & focus   # one miss: equal spacing from then on
  return hi, e_hi, has


def _root_estimate(lo, hi, e_lo, e_hi, target):
  """Where ε crosses the target, interpolated between the bracket's ends (NaN
  when their ε does not allow it): in log ε where both ends and the target
  are positive and finite, else in ε."""
  with np.errstate(all="ignore"):
    logs = (e_lo > 0) & (e_hi > 0) & (target > 0) & np.isfinite(e_lo) & np.isfinite(e_hi)
    a = np.where(logs, np.log(e_lo) - np.log(target), e_lo - target)
    b = np.where(logs, np.log(e_hi) - np.log(target), e_hi - target)
    r = lo + (hi - lo) * a / (a - b)
  return np.where(np.isfinite(r) & (a > 0) & (b <= 0) & (r > lo) & (r < hi), r, np.nan)


def _update(x, eps, target, lo, hi, e_lo, e_hi, has, first):
  """New brackets from one round: the first feasible probe and the one before.

  Returns (lo, hi, e_lo, e_hi, has, missed), ``missed`` where the probes did
  not straddle the boundary (all feasible, or none)."""
  eps = np.asarray(eps, np.float64).reshape(x.shape)
  feas = eps <= target[:, None]
  any_f = feas.any(axis=1)
  k = np.argmax(feas, axis=1)
  rows = np.arange(x.shape[0])
  new_hi = np.where(any_f, x[rows, k], hi)
  new_e = np.where(any_f, eps[rows, k], e_hi)
  before = x[rows, np.maximum(k - 1, 0)]
  e_before = eps[rows, np.maximum(k - 1, 0)]
  if first:   # the probes include both ends: k = 0 means feasible at xmin
    new_lo = np.where(any_f & (k > 0), before, np.where(any_f, new_hi, x[:, -1]))
    new_elo = np.where(any_f & (k > 0), e_before, np.where(any_f, new_e, eps[:, -1]))
  else:       # interior probes: k = 0 keeps the old infeasible end
    new_lo = np.where(any_f, np.where(k > 0, before, lo), x[:, -1])
    new_elo = np.where(any_f, np.where(k > 0, e_before, e_lo), eps[:, -1])
  missed = ~any_f | (k == 0)
  return new_lo, new_hi, new_elo, new_e, has | any_f, missed
