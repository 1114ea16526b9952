"""An explicit pair of probability vectors (``PMFPair``): RDP, pairs, pure ε.

The mechanism whose output distributions on a pair of neighbouring datasets
are given as PMFs P and Q (normalised here): its exact RDP curve (max over
both directions, capped by pure DP), its dominating pairs (exact, rounded
toward more privacy loss) and its pure-DP ε, max |log(p_i/q_i)|.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms.discrete import pure_dp_rdp
from jaxdp._src.mechanisms.discrete_pairs import _mechanism, discrete_pair
from jaxdp._src.mechanisms.entry import Entry

__all__ = ["pmf_pair_rdp", "pmf_pair_pairs"]


def _normalised(v) -> np.ndarray:
  v = np.asarray(v, np.float64)
  return v / math.fsum(v.tolist())


def _renyi_np(log_p, log_q, alpha):
  """Exact D_α(P‖Q) of finite PMFs in float64 with a rounding allowance (NumPy)."""
  pos = np.isfinite(log_p)
  if np.any(pos & ~np.isfinite(log_q)):
    return np.full(alpha.shape, np.inf)
  lp, lq = log_p[pos], log_q[pos]
  a = alpha[:, None]
  t = a * lp + (1.0 - a) * lq
  m = np.max(t, axis=1, keepdims=True)
  log_s = m[:, 0] + np.log(np.sum(np.exp(t - m), axis=1))
  magnitude = np.max(np.abs(a * lp) + np.abs((a - 1.0) * lq), axis=1) + np.log(lp.size)
  allowance = 32.0 * np.finfo(np.float64).eps * (1.0 + magnitude)
  return np.maximum((log_s + allowance) / (alpha - 1.0), 0.0)


def pmf_pair_rdp(p, q, alpha):
  """Exact RDP of a pair of PMFs: max(D_α(p‖q), D_α(q‖p)) (host-side, NumPy).

  Both PMFs are normalised to sum 1 first. ∞ where one puts mass where the
  other has none. Capped by :func:`pure_dp_rdp` at the largest |log(p/q)|.

  Args:
    p, q: PMFs on a common finite support (concrete 1-D sequences).
    alpha: concrete orders > 1 (1-D).

  Returns:
    float64 NumPy array of shape ``alpha.shape``.
  """
  alpha = np.asarray(alpha, np.float64)
  with np.errstate(divide="ignore"):
    lp = np.log(_normalised(p))
    lq = np.log(_normalised(q))
  exact = np.maximum(_renyi_np(lp, lq, alpha), _renyi_np(lq, lp, alpha))
  both = np.isfinite(lp) & np.isfinite(lq)
  if np.array_equal(np.isfinite(lp), np.isfinite(lq)) and both.any():
    eps0 = float(np.max(np.abs(lp[both] - lq[both]))) * (1.0 + 1e-15)
    with nx.x64():
      cap = np.asarray(pure_dp_rdp(np.float64(eps0), alpha), np.float64)
    exact = np.minimum(exact, cap)
  return exact


def pmf_pair_pairs(p, q):
  """Both directions of a user-supplied PMF pair: remove (p, q), add (q, p), normalised.

  Args:
    p, q: PMFs on a common finite support.

  Returns:
    ``Mechanism(remove, add)``.
  """
  p, q = _normalised(p), _normalised(q)
  return _mechanism(discrete_pair(p, q), discrete_pair(q, p))


def _pmf_pair_pure_epsilon(event) -> float:
  """max_i |log(p_i/q_i)| of a ``PMFPair`` (normalised as the accountants
  do), +inf where one PMF has mass the other lacks; float64 on the host
  (the PMFs are static), rounded up by a relative 1e-12."""
  p = np.asarray(event.p, np.float64)
  q = np.asarray(event.q, np.float64)
  p, q = p / p.sum(), q / q.sum()
  both = (p > 0) & (q > 0)
  if np.any((p > 0) != (q > 0)):
    return float("inf")
  loss = np.abs(np.log(p[both]) - np.log(q[both]))
  return float(np.max(loss, initial=0.0) * (1.0 + 1e-12))


def _pmf_pair_event_rdp(event, orders, dtype):
  val = pmf_pair_rdp(event.p, event.q, np.asarray(orders, np.float64))
  return jnp.asarray(jnp.asarray(nx.round_to_dtype_up(val, dtype)), dtype)


ENTRIES = {
    _events.PMFPair: Entry(
        rdp=_pmf_pair_event_rdp,
        pairs=lambda event: [pmf_pair_pairs(event.p, event.q)],
        pure_epsilon=lambda event, dtype: jnp.asarray(_pmf_pair_pure_epsilon(event), dtype)),
}
