"""Boundary of a monotone feasibility set by rounds of equally spaced probes.

For a few configurations (one question from the command line), calibration
by a jitted root-finder costs more in tracing and compilation than in
arithmetic. Probing ``points`` values per configuration and round through
the public ε function instead reuses the programs that ``jaxdp.epsilon``
already compiled (and that the persistent cache keeps), and every answer is
an x whose ε that very function evaluated to <= the target.

Each round shrinks the bracket by a factor points + 1, so a bracket of width
W reaches a tolerance t in about log(W/t)/log(points + 1) rounds (7 rounds
from the 23 log-units of σ ∈ [1e-3, 1e7] to 5e-7 with 16 points).
"""

from __future__ import annotations

import numpy as np


def boundary(eps_at, target, xmin, xmax, tol, points=16):
  """Smallest probed x with ε(x) <= target, for ε non-increasing in x.

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
  lo, hi, e_hi, has = _update(x0, eps_at(idx, x0), target, np.full(n, xmin), np.full(n, xmax),
                              np.full(n, np.inf), np.zeros(n, bool), first=True)
  for _ in range(200):
    active = np.nonzero(has & (hi > xmin) & (hi - lo > tol))[0]
    if active.size == 0:
      break
    frac = np.arange(1, points + 1) / (points + 1.0)
    x = lo[active, None] + (hi - lo)[active, None] * frac[None, :]
    lo[active], hi[active], e_hi[active], has[active] = _update(
        x, eps_at(active, x), target[active], lo[active], hi[active], e_hi[active],
        has[active], first=False)
  return hi, e_hi, has


def _update(x, eps, target, lo, hi, e_hi, has, first):
  """New brackets from one round: the first feasible probe and the one before."""
  eps = np.asarray(eps, np.float64).reshape(x.shape)
  feas = eps <= target[:, None]
  any_f = feas.any(axis=1)
  k = np.argmax(feas, axis=1)
  rows = np.arange(x.shape[0])
  new_hi = np.where(any_f, x[rows, k], hi)
  new_e = np.where(any_f, eps[rows, k], e_hi)
  before = x[rows, np.maximum(k - 1, 0)]
  if first:   # the probes include both ends: k = 0 means feasible at xmin
    new_lo = np.where(any_f & (k > 0), before, np.where(any_f, new_hi, x[:, -1]))
  else:       # interior probes: k = 0 keeps the old infeasible end
    new_lo = np.where(any_f, np.where(k > 0, before, lo), x[:, -1])
  return new_lo, new_hi, new_e, has | any_f
