"""Finite, tight ε where the batched PLD kernel's certified interval is +∞ or wide.

At extreme but legal inputs (σ ≈ 0.05, or 10⁵-10⁶ steps with δ <= 1e-10)
the batched kernel (:mod:`jaxdp.pld`) bounds its FFT round-off by an
empirical allowance per node that is comparable to δ: its sound upper ε is
+∞, or finite but far above the lower end (q = 1.8e-3, σ = 3.65, T = 10⁵,
δ = 1e-12: [0.956, 1.508]). The general engine (:mod:`jaxdp.pld_general`)
bounds round-off per convolution with exponential tilting towards the query
and answers those finitely and tightly there ([1.0467, 1.0468] in 0.6 s; at
σ ≈ 0.05, [11.49, 26.02] where the kernel said [11.68, ∞]). Both intervals
are certified, so their intersection is too.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["finite_epsilon"]

# At most this many configurations per call go to the general engine (each
# takes up to ~10 s at these extremes); beyond, the kernel's interval stays
# (still sound).
MAX_CONFIGURATIONS = 4
# An interval is wide when its width exceeds this fraction of its upper end,
# or of 0.1 for smaller ε (the kernel's intervals are ~1e-3 wide at the
# default rtol; 2-10% where its optimistic construction falls back to
# rounding down; up to 6% at ε ~ 1e-4, i.e. 1e-5 absolute).
WIDE = 0.1


def finite_epsilon(q, sigma, steps, delta, lo, up, rtol):
  """Intersects +∞ or wide intervals with the general engine's.

  Args:
    q, sigma, steps, delta: float64 arrays of one shape (validated).
    lo, up: the kernel's certified interval, same shape.
    rtol: the PLD grid's target relative accuracy.

  Returns:
    ``(lo, up)``: the intersection of the two engines' intervals where the
    general engine ran, the kernel's elsewhere.
  """
  shape = np.shape(up)
  q, sigma, steps, delta, lo, up = (np.array(a, np.float64).reshape(-1)
                                    for a in (q, sigma, steps, delta, lo, up))
  with np.errstate(invalid="ignore"):
    wide = np.isfinite(up) & (up - np.maximum(lo, 0.0) > WIDE * np.maximum(up, 0.1))
  need = (np.isinf(up) | wide) & (q > 0) & (np.round(steps) >= 1)
  if not np.any(need):
    return lo.reshape(shape), up.reshape(shape)
  keys = np.stack([q[need], sigma[need], np.round(steps[need])], axis=1)
  configs, inverse = np.unique(keys, axis=0, return_inverse=True)
  where = np.flatnonzero(need)
  for c, (qc, sc, tc) in enumerate(configs[:MAX_CONFIGURATIONS]):
    idx = where[inverse.reshape(-1) == c]
    from jaxdp import pld_general  # pylint: disable=g-import-not-at-top
    try:
      g_lo, g_up = _general(float(qc), float(sc), float(tc), tuple(delta[idx].tolist()), rtol)
    except pld_general.GridTooLarge:   # that engine cannot answer: the kernel's interval stays
      continue
    lo[idx] = np.maximum(lo[idx], g_lo)
    up[idx] = np.minimum(up[idx], g_up)
  return lo.reshape(shape), up.reshape(shape)


@functools.lru_cache(maxsize=64)
def _general(q, sigma, steps, deltas, rtol):
  """The general engine's interval (cached: these inputs take seconds, and
  ``jaxdp.epsilon`` with ``pld.epsilon`` on the same question repeat them)."""
  from jaxdp import pld_general  # pylint: disable=g-import-not-at-top
  from jaxdp._tight_calibrate import poisson_phases  # pylint: disable=g-import-not-at-top
  phases = poisson_phases(q, sigma, steps)
  lo, up = pld_general.epsilon(phases, np.asarray(deltas), rtol=rtol, return_bounds=True)
  out = tuple(np.array(a, np.float64).reshape(-1) for a in (lo, up))
  for a in out:
    a.setflags(write=False)   # shared by the cache
  return out
