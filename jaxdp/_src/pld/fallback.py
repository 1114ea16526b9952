"""The public PLD answer is the best certified one: kernel ∩ general engine ∩ RDP.

At extreme but legal inputs (σ ≈ 0.05, or 10⁵-10⁶ steps with δ <= 1e-10)
the batched kernel (:mod:`jaxdp.pld`) can carry a round-off bound
comparable to δ: its sound upper ε is +∞, or finite but far above the
lower end (measured with the kernel's earlier allowance at q = 1e-3, σ = 1,
T = 10⁶, δ = 1e-12: [8.456, 12.236], above the RDP bound 10.168). Nothing
here assumes a particular kernel width. The general engine
(:mod:`jaxdp.pld_general`) bounds round-off per convolution with exponential
tilting towards the query; where its grid fits it answers those finitely
and often tightly (q = 1.8e-3, σ = 3.65, T = 10⁵, δ = 1e-12: [1.0467,
1.0468] against the kernel's [0.956, 1.508]); where its composed window
outgrows the memory cap its grid is coarsened and its own interval is wide
(T = 10⁶ above: [6.08, 26.99]) or +∞ (q = 0.01, σ = 0.05, T = 10).

Every one of these intervals is certified, so the answer every public
surface reports (:func:`jaxdp.pld.epsilon` / :func:`jaxdp.pld.delta`,
:func:`jaxdp.epsilon` / :func:`jaxdp.delta` with ``accountant="pld"``,
``jaxdp.accountant.pld()`` and :func:`jaxdp.pld_accountant.epsilon_batch`)
is their intersection (:func:`combine`):

* upper = min(kernel upper, general upper, RDP upper),
* lower = max(kernel lower, general lower, exact one-step value),

and the upper end is never below the lower one: where the kernel's and
the general engine's intervals cross (only a bug can do that) the guards
(:func:`jaxdp._src.kernels.guards.check`) report it and return the RDP bound, and
where the RDP bound falls below a lower end that passed the guards' 1e-9
relative tolerance the upper end is raised back to it (:func:`combine`;
raising an upper bound is always sound).

Same question, same number: every surface above runs this one path
(:func:`jaxdp.pld.guarded_bounds` with ``best=True``; the accountant's
single-phase configurations through it too), so their answers are bitwise
equal for the same call (the general engine's intervals are cached per
(q, σ, T, queries, rtol)). Two documented exceptions: the RDP bound comes
from the host path for the first calls of a process and from the compiled
programs later (they agree to 2e-13 relative, tests/kernels/test_host_rdp.py), and
a call holding more than :data:`MAX_CONFIGURATIONS` wide configurations
leaves those beyond the cap with the kernel's interval capped by RDP, where
the same question asked alone gets the general engine too. The
accountant's multi-phase configurations get the same treatment
(:func:`jaxdp._src.accounting.pld_accountant._best_many`) with an RDP bound from the summed
phase curves.

Cost and cap. The general engine takes seconds per configuration at these
inputs, so it is asked (:func:`intersect_general`) only where the kernel's
interval is +∞ or wide (:data:`WIDE`), for at most
:data:`MAX_CONFIGURATIONS` distinct configurations per call, the widest
first (+∞ before finite). Beyond the cap the kernel's interval stays, and
its upper end is still capped by the RDP bound, which is always certified
and costs milliseconds: no public answer is above the RDP answer to the
same question, whatever the cap.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["combine", "finite_epsilon", "intersect_general"]

# At most this many configurations per call go to the general engine (each
# takes seconds at these extremes); beyond, the kernel's interval stays
# (still sound) and the RDP bound caps its upper end (:func:`combine`).
MAX_CONFIGURATIONS = 4
# An interval is wide when its width exceeds this fraction of its upper end,
# or of 0.1 for smaller ε (the kernel's intervals are ~1e-3 wide at the
# default rtol; 2-10% where its optimistic construction falls back to
# rounding down; up to 6% at ε ~ 1e-4, i.e. 1e-5 absolute).  For δ the
# width is relative to the upper end alone.
WIDE = 0.1
# δ intervals whose upper end is below this are not worth seconds of the
# general engine (the read-outs' δ floor is the smallest normal float).
_DELTA_FLOOR = 1e-300


def _wide(name, lo, up, value=None, threshold=None):
  """Where ``[lo, up]`` is +∞ or wide (see :data:`WIDE`); and a priority
  (relative width, +∞ first) for the cap. For δ, ``value`` (the ε queried)
  must be finite: δ(+∞) is the mass at infinite loss, whose kernel bound
  (the truncated tails, ~1e-17) is worth no general-engine run.
  ``threshold``: the relative width that counts as wide (default
  :data:`WIDE`)."""
  threshold = WIDE if threshold is None else threshold
  with np.errstate(invalid="ignore", divide="ignore"):
    if name == "epsilon":
      scale = np.maximum(up, 0.1)
      width = up - np.maximum(lo, 0.0)
      need = np.isinf(up) | (np.isfinite(up) & (width > threshold * scale))
    else:
      scale = np.maximum(up, 1e-300)
      width = up - np.maximum(lo, 0.0)
      need = (up > _DELTA_FLOOR) & (width > threshold * scale)
      if value is not None:
        need &= np.isfinite(value)
    rank = np.where(np.isinf(up), np.inf, np.nan_to_num(width / scale, nan=np.inf))
  return need, rank


def intersect_general(name, q, sigma, steps, value, lo, up, rtol):
  """Intersects +∞ or wide kernel intervals with the general engine's.

  Args:
    name: "epsilon" (``value`` is δ) or "delta" (``value`` is ε).
    q, sigma, steps, value: float64 arrays of one shape (validated).
    lo, up: the kernel's certified interval, same shape.
    rtol: the PLD grid's target relative accuracy.

  Returns:
    ``(lo, up)``: the intersection of the two engines' intervals where the
    general engine ran (at most :data:`MAX_CONFIGURATIONS` distinct
    (q, σ, T), widest first; not where it raises :class:`GridTooLarge`), the
    kernel's elsewhere. Where the two cross (only a bug can do that) they
    are left crossed for the guards (:func:`jaxdp._src.kernels.guards.check`), which
    then return the RDP bound.
  """
  shape = np.shape(up)
  q, sigma, steps, value, lo, up = (np.array(a, np.float64).reshape(-1)
                                    for a in (q, sigma, steps, value, lo, up))
  need, rank = _wide(name, lo, up, value)
  need &= (q > 0) & (np.round(steps) >= 1)
  if not np.any(need):
    return lo.reshape(shape), up.reshape(shape)
  keys = np.stack([q[need], sigma[need], np.round(steps[need])], axis=1)
  configs, inverse = np.unique(keys, axis=0, return_inverse=True)
  inverse = inverse.reshape(-1)
  where = np.flatnonzero(need)
  worst = np.full(len(configs), -1.0)
  np.maximum.at(worst, inverse, rank[need])
  order = np.argsort(-worst, kind="stable")[:MAX_CONFIGURATIONS]
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  for c in sorted(order.tolist()):
    qc, sc, tc = configs[c]
    idx = where[inverse == c]
    fn = _general if name == "epsilon" else _general_delta
    try:
      g_lo, g_up = fn(float(qc), float(sc), float(tc), tuple(value[idx].tolist()), rtol)
    except pld_general.GridTooLarge:   # that engine cannot answer: the kernel's interval stays
      continue
    lo[idx] = np.maximum(lo[idx], g_lo)   # crossings (a bug) are left to the guards
    up[idx] = np.minimum(up[idx], g_up)
  return lo.reshape(shape), up.reshape(shape)


def finite_epsilon(q, sigma, steps, delta, lo, up, rtol):
  """:func:`intersect_general` for ε (kept for its callers and tests)."""
  return intersect_general("epsilon", q, sigma, steps, delta, lo, up, rtol)


def combine(lo, up, other_lo, other_up):
  """The intersection of two certified intervals: ``(max lo, min up)``,
  with the upper end raised back to the lower end where they cross (only
  a bug can make them cross; raising an upper bound keeps it sound).

  ``other_lo`` may be None (an upper bound alone, e.g. RDP)."""
  lo = np.asarray(lo, np.float64)
  if other_lo is not None:
    lo = np.maximum(lo, np.asarray(other_lo, np.float64))
  up = np.minimum(np.asarray(up, np.float64), np.asarray(other_up, np.float64))
  return lo, np.maximum(up, lo)


@functools.lru_cache(maxsize=64)
def _general(q, sigma, steps, deltas, rtol):
  """The general engine's ε interval (cached: these inputs take seconds, and
  ``jaxdp.epsilon`` with ``pld.epsilon`` on the same question repeat them)."""
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  from jaxdp._src.mechanisms.registry import poisson_phases  # pylint: disable=g-import-not-at-top
  phases = poisson_phases(q, sigma, steps)
  lo, up = pld_general.epsilon(phases, np.asarray(deltas), rtol=rtol, return_bounds=True)
  return _frozen(lo, up)


@functools.lru_cache(maxsize=64)
def _general_delta(q, sigma, steps, epsilons, rtol):
  """The general engine's δ interval (cached as :func:`_general`)."""
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  from jaxdp._src.mechanisms.registry import poisson_phases  # pylint: disable=g-import-not-at-top
  phases = poisson_phases(q, sigma, steps)
  lo, up = pld_general.delta(phases, np.asarray(epsilons), rtol=rtol, return_bounds=True)
  return _frozen(lo, up)


def _frozen(lo, up):
  out = tuple(np.array(a, np.float64).reshape(-1) for a in (lo, up))
  for a in out:
    a.setflags(write=False)   # shared by the cache
  return out
