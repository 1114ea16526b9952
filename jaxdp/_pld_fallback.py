"""Finite ε where the batched PLD kernel can only certify +∞.

At extreme but legal inputs (σ ≈ 0.05, or 10⁶ steps at q = 1e-3, with
δ = 1e-12) the batched kernel (:mod:`jaxdp.pld`) bounds its FFT round-off by
an empirical allowance that exceeds δ, and its sound upper ε is +∞. The
general engine (:mod:`jaxdp.pld_general`) bounds round-off per convolution
with exponential tilting towards the query and answers those finitely (e.g.
[11.49, 26.02] where the kernel said [11.68, ∞]). Both intervals are
certified, so their intersection is too.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["finite_epsilon"]

# At most this many configurations per call go to the general engine (each
# takes up to ~10 s at these extremes); beyond, +∞ stays (still sound).
MAX_CONFIGURATIONS = 4


def finite_epsilon(q, sigma, steps, delta, lo, up, rtol):
  """Replaces +∞ upper bounds by the general engine's where it is finite.

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
  need = np.isinf(up) & (q > 0) & (np.round(steps) >= 1)
  if not np.any(need):
    return lo.reshape(shape), up.reshape(shape)
  keys = np.stack([q[need], sigma[need], np.round(steps[need])], axis=1)
  configs, inverse = np.unique(keys, axis=0, return_inverse=True)
  where = np.flatnonzero(need)
  for c, (qc, sc, tc) in enumerate(configs[:MAX_CONFIGURATIONS]):
    idx = where[inverse.reshape(-1) == c]
    g_lo, g_up = _general(float(qc), float(sc), float(tc), tuple(delta[idx].tolist()), rtol)
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
