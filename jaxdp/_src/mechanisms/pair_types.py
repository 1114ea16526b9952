"""Pair types of :mod:`jaxdp.pairs` (all public ones re-exported there).

One direction of a dominating pair (P, Q) of a mechanism step (Zhu, Dong &
Wang, "Optimal accounting of differential privacy via characteristic
function", AISTATS 2022, Def. 7): :class:`DiscretePair`, :class:`MonotonePair`,
:class:`SymmetrizedPair` (their Prop. 30), :class:`MixturePair` (with
``_split`` for its entries), and :class:`Mechanism`, both directions of a step.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np



class DiscretePair(NamedTuple):
  """One direction of a dominating pair (P, Q) on a finite common support."""
  p: np.ndarray          # float64 masses of P at the support points
  q: np.ndarray          # float64 masses of Q at the same points
  p_inf: float = 0.0     # P-mass not represented in p: +inf (pessimistic), dropped (optimistic)


class MonotonePair(NamedTuple):
  """One direction of a continuous pair on the real line with nondecreasing loss.

  ``loss(x) = log(dP/dQ)(x)``; ``log_p_cdf``/``log_p_sf`` are log P(X <= x)
  and log P(X > x), accurate in the tails. P-mass outside [x_lo, x_hi] is
  accounted through the CDFs (pessimistic: below rounds up to loss(x_lo),
  above goes to +inf; optimistic: below is dropped, above sits at
  loss(x_hi)). Optional ``log_q_cdf``/``log_q_sf`` (Q's) make the
  discretisation second order; ``loss_tol`` is the absolute accuracy of
  ``loss`` (default 64 ulps of ``1 + max |loss|`` on the range used);
  ``loss_inverse`` (optional, vectorised) maps a loss level to an x near
  sup{x : loss(x) <= level}: a speed hint only, since every x it gives is
  checked against ``loss`` (a wrong one costs a bisection, never accuracy).
  """
  loss: Callable
  log_p_cdf: Callable
  log_p_sf: Callable
  x_lo: float
  x_hi: float
  log_q_cdf: Optional[Callable] = None
  log_q_sf: Optional[Callable] = None
  loss_tol: Optional[float] = None
  loss_inverse: Optional[Callable] = None


class SymmetrizedPair(NamedTuple):
  """Symmetric pair whose PLD equals ``base``'s on losses > 0.

  Its PLD ω puts base's mass on ℓ > 0, mass e^{-ℓ} ω(ℓ) = base's Q-mass at
  -ℓ, and the rest at 0; it is a valid PLD (both total masses 1) whenever
  P_base(L > 0) + Q_base(L > 0) <= 1, and its profile is base's for ε >= 0
  in both orders (Zhu, Dong & Wang 2022, Prop. 30 for subsampling without
  replacement under substitution).
  """
  base: object


class MixturePair(NamedTuple):
  """Disjoint union of pairs drawn with probabilities ``weights`` (upper bounds);
  ``weights_lower`` (lower bounds, default ``weights``) for the optimistic side.
  An entry of ``pairs`` may be a plain tuple ``(upper_pair, lower_pair)``."""
  weights: Sequence[float]
  pairs: Sequence[object]
  weights_lower: Optional[Sequence[float]] = None


def _split(sub):
  """A MixturePair entry: a pair, or a plain tuple (pair for the upper bound,
  pair for the lower bound; the latter dominated by the former)."""
  if isinstance(sub, tuple) and not hasattr(sub, "_fields"):
    return sub
  return sub, sub


class Mechanism(NamedTuple):
  """What one step releases: P = output on the larger dataset (add/remove)."""
  remove: object
  add: object
