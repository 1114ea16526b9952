"""Dominating pairs of one mechanism step, and their certified discretisation.

A *dominating pair* (P, Q) of a mechanism M for an ordered neighbouring
relation is a pair of distributions whose hockey-stick divergences bound those
of M for every order: H_α(M(D)‖M(D')) <= H_α(P‖Q) for all α >= 0 and all
neighbours D ≃ D' (Zhu, Dong & Wang, "Optimal accounting of differential
privacy via characteristic function", AISTATS 2022, Def. 7; their Thm 10 makes
the T-fold product of such pairs dominate the adaptive T-fold composition).
The engine of :mod:`jaxdp.pld_general` composes the *privacy loss
distribution* (PLD) of the pair: the law of L = log(dP/dQ)(X) under X ~ P.

Pair types (``p`` always means P, the output on the dataset with the
differing example under the stated relation):

* :class:`DiscretePair` — finite support;
* :class:`MonotonePair` — a law on the real line whose loss is nondecreasing;
* :class:`SymmetrizedPair` — the symmetric pair whose PLD agrees with its
  base's on losses > 0 (the tight pair of a symmetric relation, e.g.
  subsampling without replacement under replace-one, see
  :mod:`jaxdp._src.mechanisms.sampled`);
* :class:`MixturePair` — a disjoint union of pairs (the block is revealed):
  its PLD is the weighted sum of the blocks' PLDs.

Discretisation (:func:`discretize`) on the grid e_k = k·h
---------------------------------------------------------
Work in u = e^{-ℓ}: the composed δ_T(ε) = E[(1 - e^{ε} Π u_t)_+] + P(∞) is
convex and non-increasing in every u_t and non-decreasing in every mass, and
the steps are independent under P. Hence each operation below moves δ_T the
stated way for every ε and every T (Jensen per coordinate):

* pessimistic (never lowers δ_T): adding mass; raising a loss; a
  mean-preserving spread in u ("connect the dots", Doroshenko, Ghazi, Kamath,
  Kumar & Manurangsi, PETS 2022): the content of the bucket (e_{k-1}, e_k],
  with P-mass M and u-moment U = Q-mass, goes to its two end points with the
  same M and U;
* optimistic (never raises δ_T): removing mass; lowering a loss; merging
  outcomes (a post-processing: one atom with M, U at loss log(M/U)); a
  randomized post-processing that moves a fraction of one atom into another
  group.

The optimistic pass merges each centred group (e_k - h/2, e_k + h/2] into one
atom at ℓ̄_k = log(M/U); if ℓ̄_k >= e_k it is lowered to e_k, otherwise the
group borrows a = (U e^{e_k} - M)/(1 - e^{e_k - ℓ̄_{k+1}}) mass from the
merged atom of group k+1 (at ℓ̄_{k+1} > e_k + h/2) so that its merged loss is
e_k (lowered to e_{k-1} where group k+1 cannot afford it; borrowing is
computed from M before group k lends to k-1, an over-estimate, and
over-borrowing only raises the merged loss before it is lowered to e_k).
Groups with ℓ̄_k > e_k then take, bottom-up, from the atom already at e_{k-1}
the mass that brings their merged loss down to exactly e_k. Both passes are
second order in h for continuous laws; isolated atoms (sparse discrete pairs)
that have nothing to borrow from are lowered by up to h on the optimistic
side. P-masses and Q-masses of continuous cells are CDF differences between
the points where the loss crosses a fine grid (bisection); their
floating-point error is bounded from the
accuracy of the log-CDFs (``_CDF_ULPS`` ulps times ``1 + |log F|``) and the bounds
are taken on the safe side. Without Q's CDFs the u-moment is bounded from the
cell's loss range on a grid ``_SUBDIV_NO_Q`` times finer.

Losses are assumed accurate to ``tau`` (absolute): the engine raises the
pessimistic composed loss and lowers the optimistic one by Σ count·tau.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special as sps

from jaxdp._src.mechanisms.pair_types import (
    DiscretePair, Mechanism, MixturePair, MonotonePair, SymmetrizedPair, _split)
from jaxdp._src.mechanisms.discretise import LossPMF, discretize
from jaxdp._src.mechanisms.loss_levels import _bisect_x

__all__ = [
    "DiscretePair", "MonotonePair", "SymmetrizedPair", "MixturePair", "Mechanism", "LossPMF",
    "gaussian_mixture_pair", "gaussian", "discretize", "hockey_stick",
    "validate_pair",
]


# --------------------------------------------------------------------------
# Gaussian mixtures and the sampler mechanisms
# --------------------------------------------------------------------------


def _lse(terms):
  if terms.shape[-1] == 1:
    return terms[..., 0]
  if terms.shape[-1] == 2:
    return np.logaddexp(terms[..., 0], terms[..., 1])
  top = np.max(terms, axis=-1)
  safe = np.where(np.isfinite(top), top, 0.0)
  return safe + np.log(np.sum(np.exp(terms - safe[..., None]), axis=-1))


def gaussian_mixture_pair(means_p, weights_p, means_q, weights_q, sigma) -> MonotonePair:
  """P = Σ_i wp_i N(mp_i, σ²), Q = Σ_j wq_j N(mq_j, σ²) as a :class:`MonotonePair`.

  l(x) = LSE_i(log wp_i + (x mp_i - mp_i²/2)/σ²) - LSE_j(log wq_j + (x mq_j - mq_j²/2)/σ²)
  (the common -x²/2σ² cancels). The loss must be nondecreasing: the tails need
  max mp >= max mq and min mp >= min mq, and the loss is checked on a dense
  grid between. The caller reflects x -> -x (negates all means) for the other
  direction of a pair.

  Raises:
    ValueError: on bad means/weights/σ or a decreasing loss.
  """
  mp, wp, mq, wq = (np.atleast_1d(np.asarray(a, np.float64)) for a in
                    (means_p, weights_p, means_q, weights_q))
  sigma = float(sigma)
  if not (math.isfinite(sigma) and sigma > 0):
    raise ValueError(f"sigma must be finite and > 0; found {sigma}.")
  for name, m, w in (("p", mp, wp), ("q", mq, wq)):
    if m.shape != w.shape or m.ndim != 1 or m.size == 0:
      raise ValueError(f"means_{name} and weights_{name} must be non-empty 1-D of one shape; "
                       f"found {m.shape} and {w.shape}.")
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(w)) and np.all(w >= 0)):
      raise ValueError(f"means_{name} must be finite and weights_{name} >= 0; found {m}, {w}.")
    if abs(w.sum() - 1.0) > 1e-9:
      raise ValueError(f"weights_{name} must sum to 1; found sum {w.sum()!r}.")
  mp, wp = mp[wp > 0], wp[wp > 0]
  mq, wq = mq[wq > 0], wq[wq > 0]
  if mp.max() < mq.max() or mp.min() < mq.min():
    raise ValueError("the privacy loss of this mixture pair is not nondecreasing (need "
                     f"max/min of means_p >= those of means_q; found {mp}, {mq}).")
  s2 = sigma * sigma
  ap, bp = np.log(wp) - mp * mp / (2 * s2), mp / s2
  aq, bq = np.log(wq) - mq * mq / (2 * s2), mq / s2

  def loss(x):
    x = np.asarray(x, np.float64)[..., None]
    return _lse(ap + bp * x) - _lse(aq + bq * x)

  def cdf(m, w, upper):
    lw = np.log(w)

    def f(x):
      z = (np.asarray(x, np.float64)[..., None] - m) / sigma
      return _lse(lw + sps.log_ndtr(-z if upper else z))
    return f

  lo, hi = min(mp.min(), mq.min()) - 40 * sigma, max(mp.max(), mq.max()) + 40 * sigma
  grid = np.linspace(lo + 30 * sigma, hi - 30 * sigma, 4001)
  lv = loss(grid)
  if np.any(np.diff(lv) < -1e-9 * (1 + np.abs(lv[1:]))):
    raise ValueError("the privacy loss of this mixture pair is not nondecreasing.")
  return MonotonePair(loss, cdf(mp, wp, False), cdf(mp, wp, True), lo, hi,
                      cdf(mq, wq, False), cdf(mq, wq, True))


def _check_sigma(sigma):
  sigma = float(sigma)
  if not (math.isfinite(sigma) and sigma > 0):
    raise ValueError(f"sigma must be finite and > 0; found {sigma}.")
  return sigma


def gaussian(sigma, sensitivity=1.0) -> Mechanism:
  """Gaussian mechanism N(f(D), σ²), ``|f(D) - f(D')| <= sensitivity``: one symmetric pair
  (N(Δ, σ²), N(0, σ²)) (Balle & Wang 2018)."""
  sigma = _check_sigma(sigma)
  if not (math.isfinite(sensitivity) and sensitivity > 0):
    raise ValueError(f"sensitivity must be finite and > 0; found {sensitivity}.")
  pair = gaussian_mixture_pair([sensitivity], [1.0], [0.0], [1.0], sigma)
  return Mechanism(pair, pair)


def validate_pair(pair, name="pair"):
  """Checks a pair's concrete fields; raises ValueError/TypeError naming them."""
  if isinstance(pair, DiscretePair):
    p, q = np.asarray(pair.p, np.float64), np.asarray(pair.q, np.float64)
    if p.shape != q.shape or p.size == 0:
      raise ValueError(f"{name}.p and {name}.q must be non-empty of one shape; found {p.shape}, {q.shape}.")
    for n, v in (("p", p), ("q", q)):
      if not (np.all(np.isfinite(v)) and np.all(v >= 0)) or v.sum() > 1 + 1e-9:
        raise ValueError(f"{name}.{n} must be finite masses >= 0 summing to <= 1; found {v}.")
    if not 0.0 <= float(pair.p_inf) <= 1.0 or p.sum() + pair.p_inf > 1 + 1e-9:
      raise ValueError(f"{name}.p_inf must be in [0, 1 - sum(p)]; found {pair.p_inf}.")
  elif isinstance(pair, MonotonePair):
    if not (math.isfinite(pair.x_lo) and math.isfinite(pair.x_hi) and pair.x_lo < pair.x_hi):
      raise ValueError(f"{name} needs finite x_lo < x_hi; found {pair.x_lo}, {pair.x_hi}.")
  elif isinstance(pair, SymmetrizedPair):
    validate_pair(pair.base, name + ".base")
  elif isinstance(pair, MixturePair):
    w = np.asarray(pair.weights, np.float64)
    if w.ndim != 1 or w.size != len(pair.pairs) or np.any(w < 0) or not np.all(np.isfinite(w)):
      raise ValueError(f"{name}.weights must be finite >= 0, one per pair; found {pair.weights}.")
    wl = w if pair.weights_lower is None else np.asarray(pair.weights_lower, np.float64)
    if wl.shape != w.shape or np.any(wl < 0) or np.any(wl > w):
      raise ValueError(f"{name}.weights_lower must be in [0, weights]; found {pair.weights_lower}.")
    for i, sub in enumerate(pair.pairs):
      for p in _split(sub):
        validate_pair(p, f"{name}.pairs[{i}]")
  else:
    raise TypeError(f"{name} must be a DiscretePair, MonotonePair, SymmetrizedPair or "
                    f"MixturePair; found {type(pair).__name__}.")


def hockey_stick(pair, epsilon):
  """A lower bound (exact up to rounding) on H_{e^ε}(P‖Q) of one step, ε >= 0.

  H = sup_S P(S) - e^ε Q(S), so any set gives a lower bound; the set used is
  {l > ε} (a half-line for a monotone pair, found by bisection). Needs Q's
  CDFs for a :class:`MonotonePair`; returns None where they are missing.
  """
  eps = np.asarray(epsilon, np.float64)
  if isinstance(pair, DiscretePair):
    p, q = np.asarray(pair.p, np.float64).ravel(), np.asarray(pair.q, np.float64).ravel()
    # (p - e^ε q)_+ = p·(1 - e^{ε - l})_+ with l = log(p/q): no e^ε (which
    # overflowed to inf·0 = NaN at q = 0 for ε > 709); l = +inf keeps p.
    with np.errstate(divide="ignore", invalid="ignore"):
      l = np.log(p) - np.log(q)
      e = eps[..., None]
      terms = np.where(l == np.inf, p, np.where(e < l, p * -np.expm1(np.minimum(e - l, 0.0)), 0.0))
    return np.nan_to_num(terms, nan=0.0).sum(-1) * (1 - 1e-12)
  if isinstance(pair, MonotonePair):
    if pair.log_q_sf is None:
      return None
    f = lambda x: np.asarray(pair.loss(x), np.float64)
    x, _ = _bisect_x(f, eps.ravel(), pair.x_lo, pair.x_hi, inverse=pair.loss_inverse)
    lp, lq = np.asarray(pair.log_p_sf(x)), np.asarray(pair.log_q_sf(x))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
      d = np.where(eps.ravel() + lq < lp, np.exp(lp) * -np.expm1(eps.ravel() + lq - lp), 0.0)
    return (np.nan_to_num(d) * (1 - 1e-9)).reshape(eps.shape)
  if isinstance(pair, SymmetrizedPair):
    return hockey_stick(pair.base, eps)
  if isinstance(pair, MixturePair):
    w = pair.weights if pair.weights_lower is None else pair.weights_lower
    parts = [hockey_stick(_split(sub)[1], eps) for sub in pair.pairs]
    if any(v is None for v in parts):
      return None
    return sum(float(wi) * v for wi, v in zip(w, parts))
  raise TypeError(f"unknown pair type {type(pair).__name__}.")
