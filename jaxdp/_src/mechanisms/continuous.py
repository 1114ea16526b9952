"""Continuous mechanisms: RDP curves and dominating pairs on the real line.

Helpers of :mod:`jaxdp.mechanisms` (which dispatches on the event type) for
:class:`~jaxdp.events.Laplace`, :class:`~jaxdp.events.SampledLaplace` and
:class:`~jaxdp.events.MixtureOfGaussians`. Pairs are
:class:`jaxdp.pairs.MonotonePair` objects whose loss log(dP/dQ)(x) is
nondecreasing in x (the add direction is reflected, x ↦ −x, where needed),
with P's and Q's log-CDFs accurate in the tails. Every RDP value is an upper
bound: the exact value plus an explicit allowance for rounding.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from scipy.special import gammaln

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import discrete as _disc
from jaxdp._src.mechanisms.entry import Entry, column, field, scalars
from jaxdp._src.core import persist

__all__ = [
    "laplace_rdp",
    "sampled_laplace_rdp",
    "mixture_of_gaussians_rdp",
    "laplace_pairs",
    "sampled_laplace_pairs",
    "mixture_of_gaussians_pairs",
]


def _dtype(*xs):
  return jnp.result_type(float, *[jnp.asarray(x).dtype for x in xs])


# --------------------------------------------------------------------------
# RDP curves
# --------------------------------------------------------------------------


def laplace_rdp(b, alpha):
  """RDP of the Laplace mechanism (scale b, sensitivity 1) at order α.

  ε(α) = log(α/(2α−1)·e^{(α−1)/b} + (α−1)/(2α−1)·e^{−α/b})/(α − 1)
  (Mironov 2017, Prop 6), in log space with a rounding allowance, capped by
  :func:`jaxdp.mechanisms_discrete.pure_dp_rdp` at 1/b.

  Args:
    b: scale(s) > 0; alpha: orders > 1 (broadcast with b).

  Returns:
    RDP values, broadcast.
  """
  dtype = _dtype(b, alpha)
  lam = 1.0 / jnp.asarray(b, dtype)
  alpha = jnp.asarray(alpha, dtype)
  t1 = jnp.log(alpha) + (alpha - 1.0) * lam
  t2 = jnp.log(alpha - 1.0) - alpha * lam
  log_s = jnp.logaddexp(t1, t2) - jnp.log(2.0 * alpha - 1.0)
  allowance = 32.0 * jnp.finfo(dtype).eps * (1.0 + 2.0 * alpha * lam + jnp.log(2.0 * alpha))
  exact = jnp.maximum((log_s + allowance) / (alpha - 1.0), 0.0)
  return jnp.minimum(exact, _disc.pure_dp_rdp(lam * (1.0 + 4.0 * jnp.finfo(dtype).eps), alpha))


_SERIES_TERMS = 40


def _log_laplace_moment_minus_1(lam, k):
  """log(M_k − 1), M_k = E_{Lap(0,b)}[(Lap(1,b)/Lap(0,b))^k] (integer k >= 2, λ = 1/b).

  M_k = [k e^{(k−1)λ} + (k−1)e^{−kλ}]/(2k − 1) (Mironov 2017, Prop 6). For
  u = kλ < 1 the difference M_k − 1 = Σ_{n≥2} (k−1)uⁿ[(1 − 1/k)^{n−1} + (−1)ⁿ]/((2k−1) n!)
  (no cancellation; 40 terms reach 1e-50); above, log-space subtraction
  of k·expm1((k−1)λ) and (k−1)(1 − e^{−kλ}), which differ by at most ~3×.
  """
  u = k * lam
  small = u < 1.0
  us = jnp.where(small, u, 0.5)
  l1k = nx.log1p(-1.0 / k)[..., None]
  n = jnp.arange(2.0, _SERIES_TERMS + 1.0, dtype=us.dtype)
  log_fact = jnp.asarray([math.lgamma(v + 1.0) for v in range(2, _SERIES_TERMS + 1)], us.dtype)
  odd = (n % 2.0) == 1.0
  # (1 − 1/k)^{n−1} + (−1)ⁿ: for odd n as expm1 (no cancellation).
  w = jnp.where(odd, jnp.expm1((n - 1.0) * l1k), jnp.exp((n - 1.0) * l1k) + 1.0)
  total = jnp.sum((w * jnp.exp(n * jnp.log(us)[..., None] - log_fact))[..., ::-1], axis=-1)
  series = jnp.log(total) + jnp.log(k - 1.0) - jnp.log(2.0 * k - 1.0)
  ul = jnp.where(small, 1.0, u)
  lamb = jnp.where(small, 1.0 / k, lam)
  big = nx.log_sub(jnp.log(k) + nx.log_expm1((k - 1.0) * lamb),
                   jnp.log(k - 1.0) + nx.log1mexp(ul)) - jnp.log(2.0 * k - 1.0)
  return jnp.where(small, series, big)


def sampled_laplace_rdp(q, b, alpha):
  """RDP of the Poisson-subsampled Laplace mechanism (rate q, scale b).

  By Mironov, Talwar & Zhang (2019), Thm 5 (any centrally symmetric noise,
  Laplace included), the remove direction D_α((1−q)μ₀ + qμ₁‖μ₀) dominates
  the add direction. For integer n >= 2 its moment is the exact binomial sum
  A_n − 1 = Σ_{k=2}^{n} C(n,k)(1−q)^{n−k}q^k (M_k − 1) of nonnegative terms,
  M_k = E_{μ₀}[(μ₁/μ₀)^k] (:func:`_log_laplace_moment_minus_1`). Fractional
  orders interpolate K(α) = (α−1)ε(α) = log A_α linearly between the
  neighbouring integers (K is convex: the cumulant generating function of
  the privacy loss; K(1) = 0), an upper bound. Capped by the unsampled
  :func:`laplace_rdp`.

  Args:
    q: sampling rate(s) in [0, 1] (may be traced).
    b: Laplace scale(s) > 0 (may be traced).
    alpha: concrete 1-D orders > 1 (NumPy); up to a few thousand.

  Returns:
    RDP values of shape ``broadcast(q, b) + (len(alpha),)``.
  """
  dtype = _dtype(q, b)
  q, b = jnp.broadcast_arrays(jnp.asarray(q, dtype), jnp.asarray(b, dtype))
  orders = tuple(float(a) for a in np.asarray(alpha, np.float64).ravel())
  return _sampled_laplace_kernel(orders)(q, b)


@functools.lru_cache(maxsize=32)
def _sampled_laplace_kernel(orders: tuple):
  """The jitted kernel of :func:`sampled_laplace_rdp` for one tuple of orders."""
  alpha_np = np.asarray(orders, np.float64)
  lo, hi = np.floor(alpha_np), np.ceil(alpha_np)
  ints = np.unique(np.concatenate([lo, hi]))
  ints = ints[ints >= 2.0]
  kmax = int(ints.max()) if ints.size else 2
  k_np = np.arange(2, kmax + 1, dtype=np.float64)
  log_binom = np.where(k_np[None, :] <= ints[:, None],
                       gammaln(ints[:, None] + 1.0) - gammaln(k_np[None, :] + 1.0)
                       - gammaln(np.maximum(ints[:, None] - k_np[None, :], 0.0) + 1.0), -np.inf)
  nk_np = np.maximum(ints[:, None] - k_np[None, :], 0.0)

  def run(q, b):
    dtype = q.dtype
    fin = jnp.finfo(dtype)
    lam = 1.0 / b
    k = jnp.asarray(k_np, dtype)
    if ints.size:
      qx = q[..., None]
      log_q = nx.safe_log(qx)
      log_1mq = nx.safe_log(1.0 - qx)
      log_m = _log_laplace_moment_minus_1(lam[..., None], k)

      def one(row):
        lb, nkr = row
        rest = jnp.where(nkr > 0.0, nkr * jnp.where(nkr > 0.0, log_1mq, 0.0), 0.0)
        terms = lb + rest + k * log_q + log_m
        mag = jnp.abs(lb) + jnp.abs(rest) + jnp.abs(k * log_q) + jnp.abs(log_m)
        mag = jnp.max(jnp.where(jnp.isfinite(terms), mag, 0.0), axis=-1)
        log_am1 = logsumexp(terms, axis=-1)
        return log_am1 + 32.0 * fin.eps * (1.0 + mag + math.log(kmax))

      log_am1 = jax.lax.map(one, (jnp.asarray(log_binom, dtype), jnp.asarray(nk_np, dtype)))
      kvals = jnp.moveaxis(nx.softplus(log_am1), 0, -1)  # log A_n for n in ints
    else:
      kvals = jnp.zeros(jnp.shape(lam) + (0,), dtype)

    def k_at(n):
      if n < 2.0:
        return jnp.zeros(jnp.shape(lam), dtype)
      return kvals[..., int(np.searchsorted(ints, n))]

    cols = []
    for a, l_, h_ in zip(alpha_np, lo, hi):
      if l_ == h_:
        cols.append(k_at(a))
      else:  # chord of the convex K between the neighbouring integers
        cols.append((h_ - a) * k_at(l_) + (a - l_) * k_at(h_))
    alpha_j = jnp.asarray(alpha_np, dtype)
    eps = jnp.stack(cols, axis=-1) / (alpha_j - 1.0) * (1.0 + 8.0 * fin.eps)
    return jnp.minimum(eps, laplace_rdp(b[..., None], alpha_j))

  return persist.jit(run)


def _water_fill(p: np.ndarray, v: np.ndarray) -> np.ndarray:
  """Weights w >= p with Σw <= 1 (as close to 1 as bisection gets) and shape max(p, c·v)."""
  lo, hi = 0.0, 1.0
  for _ in range(80):
    mid = 0.5 * (lo + hi)
    if math.fsum(np.maximum(p, mid * v).tolist()) <= 1.0:
      lo = mid
    else:
      hi = mid
  return np.maximum(p, lo * v)


# Candidate weight shapes w ∝ p^t of the mixture decompositions (t = 1: one
# common rate; t = 0: equal weights; t < 0 favours the rare, large levels).
_SHAPE_POWERS = (1.0, 2.0 / 3.0, 1.0 / 3.0, 0.0, -0.5, -1.0, -2.0)


def _mixture_decompositions(sensitivities, probabilities):
  """Candidate decompositions of a Gaussian mixture into sampled-Gaussian components.

  Returns ``(levels, rates, weights)``: the distinct positive sensitivities
  s_j (ascending) and, for each of K candidates (rows), rates q_j in (0, 1]
  and weights w_j = p_j/q_j (rounded up) with Σ_j w_j <= 1, where p_j is the
  probability of s_j. Candidates (deduplicated): for each c = 0..m−1, rate 1
  on the c smallest levels and weights ∝ p^t (``_SHAPE_POWERS``) on the
  others, water-filled so that wⱼ >= pⱼ.
  """
  s = np.asarray(sensitivities, np.float64)
  p = np.asarray(probabilities, np.float64)
  p = p / math.fsum(p.tolist())
  pos = (s > 0.0) & (p > 0.0)
  levels = np.unique(s[pos])
  pj = np.array([math.fsum(p[pos & (s == v)].tolist()) for v in levels])
  shapes = []
  for c in range(levels.size):      # rate 1 on the c smallest levels ...
    for t in _SHAPE_POWERS:         # ... the others share weight ∝ p^t
      v = pj ** t
      v[:c] = 0.0
      shapes.append(v)
  # The weights must sum to <= 1 exactly (rational arithmetic on the floats).
  exact_sum = lambda num, den: sum(Fraction(a) / Fraction(b) for a, b in zip(num, den))
  while exact_sum(pj, np.ones_like(pj)) > 1:  # normalisation round-off
    pj = pj * (1.0 - 2.0 ** -52)
  rates, weights, seen = [], [], set()
  for v in shapes:
    w = _water_fill(pj, v / v.sum())
    q = np.minimum(1.0, pj / w)
    for _ in range(64):
      if exact_sum(pj, q) <= 1:
        break
      q = np.where(q < 1.0, np.minimum(1.0, q * (1.0 + 1e-12)), 1.0)
    else:
      continue
    if tuple(q) in seen:
      continue
    seen.add(tuple(q))
    rates.append(q)
    weights.append(np.where(q < 1.0, np.nextafter(pj / q, np.inf), pj))  # >= pⱼ/qⱼ
  if not rates:  # rate 1 everywhere (plain joint convexity) is always feasible
    rates, weights = [np.ones_like(pj)], [pj]
  return levels, np.array(rates), np.array(weights)


def mixture_of_gaussians_rdp(sigma, sensitivities, probabilities, alpha):
  """RDP bound of the mixture-of-Gaussians mechanism, valid in both directions.

  Write p₀ for the probability of sensitivity 0 and pⱼ for that of the
  positive level sⱼ. For any weights wⱼ >= pⱼ with Σⱼ wⱼ <= 1 and rates
  qⱼ = pⱼ/wⱼ, both outputs are the same mixture of pairs:
  N(0, σ²) = Σⱼ wⱼ N(0, σ²) + (1 − Σw) N(0, σ²) and
  Σᵢ pᵢ N(sᵢ, σ²) = Σⱼ wⱼ [(1−qⱼ)N(0, σ²) + qⱼN(sⱼ, σ²)] + (1 − Σw) N(0, σ²).
  The Rényi moment (P, Q) ↦ ∫P^αQ^{1−α} is jointly convex for α > 1 (the
  perspective of t^α; van Erven & Harremoës 2014, Thm 13), so in either
  direction e^{(α−1)D_α} <= 1 + Σⱼ wⱼ (e^{(α−1)ε_SG(qⱼ, σ/sⱼ, α)} − 1),
  where ε_SG is the Poisson-sampled Gaussian RDP
  (:func:`jaxdp.rdp.sampled_gaussian`), which bounds both of its own
  directions (Mironov, Talwar & Zhang 2019, Thm 5). The minimum over a few
  decompositions (``_mixture_decompositions``) is taken at each order. Exact
  with one positive sensitivity; with several it drops the cross terms
  between them: measured up to ~50% above the exact value at some orders for
  two or three levels (σ = 1, s = (0, 1, 2), p = (.81, .18, .01): +7% at
  α = 1.5, +15% at 2, +47% at 3, +1% at 32), where even the best
  decomposition of this kind is that far off; the PLD accountant is tight.
  Never above αs_max²/(2σ²).

  Args:
    sigma: σ > 0 (may be traced or batched).
    sensitivities, probabilities: concrete sequences (see the event).
    alpha: orders > 1.

  Returns:
    RDP values, ``sigma``'s shape + ``alpha``'s.
  """
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  dtype = _dtype(sigma)
  levels, rates, weights = _mixture_decompositions(sensitivities, probabilities)
  k, m = rates.shape
  sig = jnp.asarray(sigma, dtype)[..., None, None]
  # One sampled-Gaussian RDP per (candidate, level): shape (..., K·m, n). The
  # rows are padded (rate 0) to a power of two >= 16 so that mixtures of
  # different sizes share one compiled kernel.
  rows = k * m
  padded = max(16, 1 << (rows - 1).bit_length())
  q_rows = np.zeros((padded, 1))
  q_rows[:rows, 0] = rates.reshape(-1)
  s_rows = np.ones((padded, 1))
  s_rows[:rows, 0] = np.tile(levels, k)
  eps_j = _rdp.sampled_gaussian(jnp.asarray(q_rows, dtype), sig / jnp.asarray(s_rows, dtype),
                                alpha)[..., :rows, :]
  alpha_j = jnp.asarray(alpha, dtype)
  x = (alpha_j - 1.0) * eps_j
  t = jnp.asarray(np.log(weights).reshape(-1, 1), dtype) + nx.log_expm1(x)
  t = t.reshape(t.shape[:-2] + (k, m) + t.shape[-1:])
  log_moment = nx.softplus(logsumexp(t, axis=-2))  # log(1 + Σ w (A − 1)) per candidate
  fin = jnp.finfo(dtype)
  mag = jnp.max(jnp.abs(x.reshape(t.shape)), axis=-2) + 1.0
  out = (log_moment + 32.0 * fin.eps * mag) / (alpha_j - 1.0)
  return jnp.min(out, axis=-2) * (1.0 + 8.0 * fin.eps)


# --------------------------------------------------------------------------
# Dominating pairs (host-side NumPy, concrete scalar parameters)
# --------------------------------------------------------------------------

# Half-width of a Laplace pair's range in units of b: the P-mass beyond is
# ½e^{−80} < 1e-34 (the PLD engine accounts it pessimistically anyway).
_LAPLACE_RANGE = 80.0


def _laplace_log_cdf(x, centre, b):
  """log P(X <= x) for X ~ Lap(centre, b), accurate in both tails."""
  z = (np.asarray(x, np.float64) - centre) / b
  with np.errstate(over="ignore"):
    return np.where(z < 0.0, z - math.log(2.0), np.log1p(-0.5 * np.exp(-np.abs(z))))


def _laplace_log_sf(x, centre, b):
  """log P(X > x) for X ~ Lap(centre, b)."""
  return _laplace_log_cdf(2.0 * centre - np.asarray(x, np.float64), centre, b)


def _mixture_log(log_w0, f0, log_w1, f1):
  """log(w₀F₀ + w₁F₁) from log-weights and log-functions (−∞ weights allowed)."""
  def g(x):
    a, b = log_w0 + f0(x), log_w1 + f1(x)
    return np.logaddexp(a, b)
  return g


def laplace_pairs(b: float, sensitivity: float = 1.0):
  """Both directions of the Laplace mechanism (symmetric) as a monotone pair.

  P = Lap(Δ, b), Q = Lap(0, b): the loss ℓ(x) = (|x| − |x − Δ|)/b is
  nondecreasing, with plateaus at ∓Δ/b on x <= 0 and x >= Δ (their P-masses
  e^{−Δ/b}/2 and 1/2 sit on single loss values). The reverse direction is
  the mirror image (x ↦ Δ − x), so one pair serves both.

  Args:
    b: scale > 0; sensitivity: Δ > 0.

  Returns:
    ``Mechanism(pair, pair)`` (:class:`jaxdp.pairs.Mechanism`).
  """
  from jaxdp._src.mechanisms import pairs as _pairs  # pylint: disable=g-import-not-at-top
  b, d = float(b), float(sensitivity)

  def loss(x):
    x = np.asarray(x, np.float64)
    return (np.abs(x) - np.abs(x - d)) / b

  pair = _pairs.MonotonePair(
      loss=loss,
      log_p_cdf=lambda x: _laplace_log_cdf(x, d, b),
      log_p_sf=lambda x: _laplace_log_sf(x, d, b),
      x_lo=-_LAPLACE_RANGE * b, x_hi=d + _LAPLACE_RANGE * b,
      log_q_cdf=lambda x: _laplace_log_cdf(x, 0.0, b),
      log_q_sf=lambda x: _laplace_log_sf(x, 0.0, b),
      loss_inverse=lambda level: (np.asarray(level, np.float64) * b + d) / 2.0)
  return _pairs.Mechanism(pair, pair)


def sampled_laplace_pairs(q: float, b: float):
  """Both directions of the Poisson-subsampled Laplace mechanism (add/remove).

  Remove: P = (1−q)Lap(0, b) + qLap(1, b), Q = Lap(0, b), loss
  log((1−q) + q e^{ℓ₁(x)}) with ℓ₁(x) = (|x| − |x−1|)/b nondecreasing.
  Add: P = Lap(0, b), Q = (1−q)Lap(0, b) + qLap(1, b) has a nonincreasing
  loss; reflected (x ↦ −x, which leaves Lap(0, b) unchanged) it is
  P = Lap(0, b), Q = (1−q)Lap(0, b) + qLap(−1, b), loss
  −log((1−q) + q e^{(|x| − |x+1|)/b}), nondecreasing. dp_accounting's
  ``LaplacePrivacyLoss(sampling_prob=q)`` pairs, mirrored.

  Args:
    q: rate in [0, 1]; b: scale > 0.

  Returns:
    ``Mechanism(remove, add)``.
  """
  from jaxdp._src.mechanisms import pairs as _pairs  # pylint: disable=g-import-not-at-top
  q, b = float(q), float(b)
  with np.errstate(divide="ignore"):
    lq, l1q = math.log(q) if q > 0 else -math.inf, math.log1p(-q) if q < 1 else -math.inf
  lap0_cdf = lambda x: _laplace_log_cdf(x, 0.0, b)
  lap0_sf = lambda x: _laplace_log_sf(x, 0.0, b)

  def loss_remove(x):
    x = np.asarray(x, np.float64)
    return np.logaddexp(l1q, lq + (np.abs(x) - np.abs(x - 1.0)) / b)

  def loss_add(x):
    x = np.asarray(x, np.float64)
    return -np.logaddexp(l1q, lq + (np.abs(x) - np.abs(x + 1.0)) / b)

  width = _LAPLACE_RANGE * b
  remove = _pairs.MonotonePair(
      loss=loss_remove,
      log_p_cdf=_mixture_log(l1q, lap0_cdf, lq, lambda x: _laplace_log_cdf(x, 1.0, b)),
      log_p_sf=_mixture_log(l1q, lap0_sf, lq, lambda x: _laplace_log_sf(x, 1.0, b)),
      x_lo=-width, x_hi=1.0 + width, log_q_cdf=lap0_cdf, log_q_sf=lap0_sf)
  add = _pairs.MonotonePair(
      loss=loss_add, log_p_cdf=lap0_cdf, log_p_sf=lap0_sf, x_lo=-1.0 - width, x_hi=width,
      log_q_cdf=_mixture_log(l1q, lap0_cdf, lq, lambda x: _laplace_log_cdf(x, -1.0, b)),
      log_q_sf=_mixture_log(l1q, lap0_sf, lq, lambda x: _laplace_log_sf(x, -1.0, b)))
  return _pairs.Mechanism(remove, add)


def mixture_of_gaussians_pairs(sigma: float, sensitivities, probabilities):
  """Both directions of the mixture-of-Gaussians mechanism.

  Remove: P = Σᵢ pᵢ N(sᵢ, σ²) vs Q = N(0, σ²) (nondecreasing loss since every
  sᵢ >= 0); add: P = N(0, σ²) vs Q = Σᵢ pᵢ N(sᵢ, σ²), reflected to
  Q = Σᵢ pᵢ N(−sᵢ, σ²) (dp_accounting's ``MixtureGaussianPrivacyLoss``).
  Probabilities are normalised to sum 1.

  Args:
    sigma: σ > 0; sensitivities, probabilities: as in the event.

  Returns:
    ``Mechanism(remove, add)``.
  """
  from jaxdp._src.mechanisms import pairs as _pairs  # pylint: disable=g-import-not-at-top
  s = np.asarray(sensitivities, np.float64)
  p = np.asarray(probabilities, np.float64)
  keep = p > 0.0
  s, p = s[keep], p[keep] / math.fsum(p[keep].tolist())
  remove = _pairs.gaussian_mixture_pair(s, p, [0.0], [1.0], float(sigma))
  add = _pairs.gaussian_mixture_pair([0.0], [1.0], -s, p, float(sigma))
  return _pairs.Mechanism(remove, add)


# --------------------------------------------------------------------------
# Registry entries (jaxdp._src.mechanisms.registry)
# --------------------------------------------------------------------------


def _laplace_event_rdp(event, orders, dtype):
  alpha = jnp.asarray(orders, dtype)
  return jnp.asarray(laplace_rdp(column(event.b, dtype), alpha), dtype)


def _sampled_laplace_event_rdp(event, orders, dtype):
  alpha_np = np.asarray(orders, np.float64)
  out = sampled_laplace_rdp(jnp.asarray(event.q, dtype), jnp.asarray(event.b, dtype), alpha_np)
  return jnp.asarray(out, dtype)


def _mixture_event_rdp(event, orders, dtype):
  alpha_np = np.asarray(orders, np.float64)
  out = mixture_of_gaussians_rdp(jnp.asarray(event.sigma, dtype), event.sensitivities,
                                 event.probabilities, alpha_np)
  return jnp.asarray(out, dtype)


def _laplace_event_pairs(event):
  (b,) = scalars(event, "b")
  return [laplace_pairs(b)]


def _sampled_laplace_event_pairs(event):
  q, b = scalars(event, "q", "b")
  return [sampled_laplace_pairs(q, b)]


def _mixture_event_pairs(event):
  (sigma,) = scalars(event, "sigma")
  return [mixture_of_gaussians_pairs(sigma, event.sensitivities, event.probabilities)]


def _laplace_pure_epsilon(event, dtype):
  return 1.0 / field(event.b, dtype)


def _sampled_laplace_pure_epsilon(event, dtype):
  """1/b: each density ratio of the mixture lies in [e^{-1/b}, e^{1/b}]
  (not amplified); 0 where q = 0."""
  return jnp.where(field(event.q, dtype) > 0, 1.0 / field(event.b, dtype), 0.0)


def _laplace_rho(event, dtype):
  """As ``PureDP(1/b)``: ρ = ε²/2 (Bun–Steinke Prop 1.4)."""
  lam = 1.0 / jnp.asarray(event.b, dtype)
  return 0.5 * lam * lam


ENTRIES = {
    _events.Laplace: Entry(rdp=_laplace_event_rdp, pairs=_laplace_event_pairs,
                           pure_epsilon=_laplace_pure_epsilon, rho=_laplace_rho),
    _events.SampledLaplace: Entry(rdp=_sampled_laplace_event_rdp,
                                  pairs=_sampled_laplace_event_pairs,
                                  pure_epsilon=_sampled_laplace_pure_epsilon),
    _events.MixtureOfGaussians: Entry(rdp=_mixture_event_rdp, pairs=_mixture_event_pairs),
}
