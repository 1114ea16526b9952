"""Rényi DP of the Gaussian mechanism under the batch samplers used in practice.

Every kernel returns the RDP ε(α) of ONE step (or one epoch, where stated) and
is pure, jittable and broadcasting like ``jax.scipy.special``; it computes in
the floating dtype of its arguments (float64 under ``jax.enable_x64``).
Concrete arguments are validated eagerly (``ValueError`` naming the value);
traced ones are passed through. Values carry the same relative safety factor
as :mod:`jaxdp.rdp` so that rounding never under-reports.

Conventions
-----------
``sigma`` is always the noise standard deviation divided by the L2
sensitivity of the *batch-sum query* under the stated neighbouring relation
(this is ``GaussianDpEvent.noise_multiplier`` in dp_accounting's RDP
accountant):

* ``add_remove``: adding or removing one example changes a clipped sum by at
  most the clip norm C, so ``sigma = std / C`` (jaxdp's usual convention).
* ``replace_one``: replacing one example changes a clipped sum by up to 2C, so
  ``sigma = std / (2C)``. A DP-SGD run with noise multiplier z = std/C is
  accounted under replace-one with ``sigma = z / 2``. This is what
  dp_accounting's ``RdpAccountant(neighboring_relation=REPLACE_ONE)`` assumes
  for ``SampledWithoutReplacementDpEvent`` (its base Gaussian RDP is
  α/(2σ²), i.e. a shift of 1σ). Beware: dp_accounting's *PLD* accountant
  reads a ``GaussianDpEvent(σ)`` under REPLACE_ONE as a shift of 2 (means ∓1),
  i.e. ``σ = std / C``; the two accountants of dp_accounting disagree by a
  factor 2 in σ under REPLACE_ONE.
* ``zero_out`` (dp_accounting's REPLACE_SPECIAL): one example is replaced by a
  record whose gradient is 0; sensitivity C, ``sigma = std / C``.

Samplers (N = ``dataset_size``, B = ``batch_size``)
---------------------------------------------------
without replacement (fixed batch of B out of N)
  replace-one: Wang, Balle & Kasiviswanathan (AISTATS 2019, arXiv:1808.00087)
  Thm 27, computed exactly as dp_accounting 0.6 does
  (``_compute_rdp_sample_wor_gaussian``), with accurate forward differences
  (dp_accounting's signed log-space differences lose all digits at high
  orders once σ ≳ 10: at σ = 20 it gets log Δ^128 ≈ +57 instead of -96) and
  capped by the unamplified α/(2σ²).
  add/remove: the coupling argument of Balle, Barthe & Gaboardi (NeurIPS
  2018; maximal coupling + advanced joint convexity, Thm 2, as in the proof of
  their Thm 9), here for remove/add: a batch of the larger dataset contains
  the extra example x with probability B/N and then equals a batch of the
  smaller one with one element y replaced by x, so the one-step pair is
  N(0,σ²) vs (1-B/N) N(0,σ²) + (B/N) N(2,σ²): the Poisson-sampled Gaussian
  with rate B/N and sensitivity 2 (MTZ 2019 §3; their Thm 5 also bounds the
  reverse order). Attained with the other gradients -1 and x's +1.
truncated Poisson (rate q, at most ``capacity`` examples, uniform subset)
  A disjoint mixture, derived below (:func:`truncated_poisson_pair`).
random allocation / balls-in-bins (one epoch of k = N // B steps)
  Remove direction exact at integer orders; add direction by mean
  inequalities (Feldman & Shenfeld 2025, arXiv:2502.08202, Cor. 6.2 and the
  AM–GM bound) and, in float64, a certified quadrature
  (:mod:`jaxdp._src.kernels.bins_add`); see :func:`balls_in_bins_gaussian_epoch`.
shuffling (k = N // B fixed-size batches per epoch)
  No amplification is claimed (Chua et al., ICML 2024); a certified *lower*
  bound is in :func:`shuffle_lower_bound_epsilon`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
# The kernels live in private modules; this module is their public face.
from jaxdp._src.kernels.rdp_bins import balls_in_bins_gaussian_epoch
from jaxdp._src.kernels.rdp_truncated import TruncatedPoissonPair, truncated_poisson_gaussian, truncated_poisson_pair
from jaxdp._src.kernels.rdp_wor import _check_common, without_replacement_gaussian

__all__ = [
    "without_replacement_gaussian",
    "truncated_poisson_gaussian",
    "truncated_poisson_pair",
    "TruncatedPoissonPair",
    "balls_in_bins_gaussian_epoch",
    "shuffle_gaussian_epoch",
    "shuffle_lower_bound_epsilon",
]


# --------------------------------------------------------------------------
# Shuffling
# --------------------------------------------------------------------------

_SHUFFLE_RELATIONS = ("add_remove", "zero_out", "replace_one")


def shuffle_gaussian_epoch(sigma, alpha, relation="add_remove"):
  """RDP of ONE epoch of shuffled fixed-size batches, without amplification.

  Each epoch uses k = N // B disjoint batches of exactly B examples (a fresh
  uniform permutation; the last N - kB examples sit out). An example is used
  in at most one step per epoch, so by parallel composition the epoch costs
  one unamplified Gaussian step whose sensitivity depends on the relation:

  * ``"zero_out"`` (one example replaced by a zero-gradient record) and
    ``"replace_one"`` (``sigma`` = std/(2C), dp_accounting's convention): one
    batch sum changes by at most the query's sensitivity: ε(α) = α/(2σ²),
    i.e. ``rdp.gaussian(sigma, alpha)``.
  * ``"add_remove"`` (default; ``sigma`` = std/C): the dataset with the extra
    example x still fills exactly k·B slots, so x *displaces* another example
    y (couple the permutations by putting x at a uniform position and moving
    its occupant to the end): one batch sum changes by x - y, norm ≤ 2C.
    Hence ε(α) = 4α/(2σ²) = ``rdp.gaussian(sigma / 2, alpha)``, which is
    attained up to the dilution kB/(N+1) (others' gradients -1, x's +1; see
    :func:`shuffle_lower_bound_epsilon`). ``rdp.gaussian(sigma, alpha)`` is
    NOT an upper bound for this relation.

  No amplification by shuffling is claimed: Chua et al. (ICML 2024, "How
  Private are DP-SGD Implementations?") show it can be far weaker than
  Poisson subsampling's in the regimes used for training.

  Args:
    sigma: noise multiplier > 0.
    alpha: order(s) > 1.
    relation: "add_remove" (default), "zero_out" or "replace_one".

  Returns:
    RDP of one epoch, broadcast.
  """
  if relation not in _SHUFFLE_RELATIONS:
    raise ValueError(f"relation must be one of {_SHUFFLE_RELATIONS}; found {relation!r}.")
  _check_common("sigma", sigma, low=0.0, low_open=True)
  _check_common("alpha", alpha, low=1.0, low_open=True, allow_inf=True)
  sigma = jnp.asarray(sigma)
  if relation == "add_remove":
    sigma = sigma / 2.0
  return rdp.gaussian(sigma, alpha)


def _shuffle_pairs(dataset_size, batch_size, relation):
  """Per-epoch output pairs of the lower-bound constructions.

  Others' gradients are -1 (so every batch sums to -B unless the differing
  example is in it); outputs are shifted by +B in every coordinate. Returns k
  and a list of candidates (w, s_1, s_2): with probability w the differing
  example is used, in a uniform step, whose sum moves by s_1 under one dataset
  and by s_2 under the other (clip units for add_remove/zero_out; units of
  the replace-one sensitivity 2C for replace_one), otherwise all sums are -B.
  """
  n, b = int(dataset_size), int(batch_size)
  k = n // b
  if relation == "add_remove":
    # D' = D ∪ {x}, |D'| = N + 1; x (gradient +1) displaces a -1 example.
    return k, [(k * b / (n + 1), 2.0, 0.0)]
  if relation == "zero_out":
    # x (gradient +1) vs the zero record: batch sums -B + 2 vs -B + 1.
    return k, [(k * b / n, 2.0, 1.0)]
  # replace_one: x = +1 vs x' = -1 (sums -B + 2 vs -B) or vs x' = 0
  # (-B + 2 vs -B + 1); 2C is one unit.
  return k, [(k * b / n, 1.0, 0.0), (k * b / n, 1.0, 0.5)]


def shuffle_lower_bound_epsilon(dataset_size, batch_size, sigma, epochs, delta, relation="add_remove"):
  """A certified LOWER bound on ε(δ) of ``epochs`` epochs of shuffled batches.

  Construction (after Chua et al., ICML 2024): one-dimensional gradients,
  every example other than the differing one has gradient -1 and the
  differing one +1, against: the dataset without it (add_remove; it then
  displaces a -1 example), the zero record (zero_out), or a record with
  gradient -1 or 0 (replace_one, both tried); see :func:`_shuffle_pairs`.
  Every batch without the differing example sums to -B, the one holding it to
  -B + s (s the dataset's shift). An epoch outputs k = N // B noisy sums; we
  post-process each epoch to the indicator [max_i Y_i > τ] and the run to the
  number X of epochs whose indicator fires. Per epoch,

      P(max > τ) = 1 - (1-w) Φ(τ/σ)^k - w Φ((τ-s)/σ) Φ(τ/σ)^{k-1}

  (w: probability that the differing example is used in the epoch at all,
  kB/N, or kB/(N+1) for the larger dataset under add_remove), and X is
  binomial under both datasets. Post-processing cannot increase the
  hockey-stick divergence, so any ε with H_{e^ε}(X_D ‖ X_D') > δ (either
  order) is a certified lower bound on the smallest ε for which the mechanism
  is (ε, δ)-DP. τ is optimised on a grid in float64; the final ε is
  re-verified in 50-digit arithmetic (mpmath) and only a verified value is
  returned.

  Args:
    dataset_size: N ≥ 1.
    batch_size: B in [1, N].
    sigma: noise multiplier (meaning per ``relation`` as in
      :func:`shuffle_gaussian_epoch`).
    epochs: number of epochs E ≥ 1.
    delta: target δ in (0, 1).
    relation: "add_remove" (default), "zero_out" or "replace_one".

  Returns:
    A Python float ε_lower ≥ 0 (0 when no violation was certified).
  """
  from scipy import special as sps

  _check_shuffle_lower_bound_args(dataset_size, batch_size, sigma, epochs, delta, relation)
  k, candidates = _shuffle_pairs(dataset_size, batch_size, relation)
  sigma = float(sigma)
  epochs = int(epochs)
  n_used = k * int(batch_size)
  n_pool = int(dataset_size) + (1 if relation == "add_remove" else 0)
  xs = np.arange(epochs + 1)

  # Thresholds: quantiles of the null max over a wide range of tail masses.
  taus = [sigma * float(sps.ndtri(math.exp(math.log1p(-s) / k)))
          for s in np.exp(np.linspace(math.log(0.5), math.log(1e-12), 40))]
  best = (0.0, None)
  for w, s_1, s_2 in candidates:
    for tau in taus:
      l1, l2 = _log_exceed(tau, s_1, w, k, sigma), _log_exceed(tau, s_2, w, k, sigma)
      for a, b, order in ((l1, l2, 0), (l2, l1, 1)):
        e = _binomial_eps_for(a, b, delta, epochs, xs)
        if e > best[0]:
          best = (e, (tau, order, s_1, s_2))
  eps, arg = best
  if arg is None:
    return 0.0
  tau, order, s_1, s_2 = arg
  p_1 = _exceed_mp(tau, s_1, k, sigma, n_used, n_pool)
  p_2 = _exceed_mp(tau, s_2, k, sigma, n_used, n_pool)
  p1, p2 = (p_1, p_2) if order == 0 else (p_2, p_1)
  # Certify in 50-digit arithmetic, backing off until the violation is verified.
  cand = eps
  for _ in range(60):
    if _binomial_hockey_mp(p1, p2, cand, epochs) > delta:
      return float(cand)
    cand = cand * (1.0 - 1e-6) - 1e-12 if cand > 1e-9 else 0.0
    if cand == 0.0:
      return 0.0
  return 0.0


def _check_shuffle_lower_bound_args(dataset_size, batch_size, sigma, epochs, delta, relation):
  """Raises ValueError naming the first bad argument of
  :func:`shuffle_lower_bound_epsilon`."""
  if relation not in _SHUFFLE_RELATIONS:
    raise ValueError(f"relation must be one of {_SHUFFLE_RELATIONS}; found {relation!r}.")
  for name, v, kw in (("dataset_size", dataset_size, dict(low=1.0, integer=True)),
                      ("batch_size", batch_size, dict(low=1.0, integer=True)),
                      ("sigma", sigma, dict(low=0.0, low_open=True)),
                      ("epochs", epochs, dict(low=1.0, integer=True)),
                      ("delta", delta, dict(low=0.0, high=1.0, low_open=True, high_open=True))):
    nx.check_array(name, v, **kw)
  if batch_size > dataset_size:
    raise ValueError(f"batch_size must be <= dataset_size; found {batch_size} > {dataset_size}.")


def _log_exceed(tau, shift, w, k, sigma):
  """log P(max > τ) for one epoch of k noisy batch sums (float64, log_ndtr):
  1 - (1-w) Φ(τ/σ)^k - w Φ((τ-s)/σ) Φ(τ/σ)^{k-1}."""
  from scipy import special as sps
  base = (k - 1) * sps.log_ndtr(tau / sigma)
  log_f_used = sps.log_ndtr((tau - shift) / sigma) + base
  log_f_unused = sps.log_ndtr(tau / sigma) + base
  f_mix = np.logaddexp(np.log1p(-w) + log_f_unused, np.log(w) + log_f_used) if w < 1 else log_f_used
  return np.log(-np.expm1(f_mix))


def _exceed_mp(tau, shift, k, sigma, n_used, n_pool):
  """P(max > τ) for one epoch in 50-digit arithmetic (w = n_used / n_pool)."""
  import mpmath as mp
  with mp.workdps(50):
    t, sg, sh = mp.mpf(tau), mp.mpf(sigma), mp.mpf(shift)
    ww = mp.mpf(n_used) / n_pool
    base = mp.ncdf(t / sg) ** (k - 1)
    f = (1 - ww) * mp.ncdf(t / sg) * base + ww * mp.ncdf((t - sh) / sg) * base
    return 1 - f


def _binomial_hockey(lp, lq, eps, epochs, xs):
  """H_{e^ε}(Bin(E, e^lp) ‖ Bin(E, e^lq)) in float64 (``xs`` = 0..E)."""
  from scipy import stats
  a = stats.binom.logpmf(xs, epochs, math.exp(lp))
  b = stats.binom.logpmf(xs, epochs, math.exp(lq))
  d = np.exp(a) - np.exp(eps + b)
  return float(np.sum(np.where(d > 0, d, 0.0)))


def _binomial_hockey_mp(p1, p2, eps, epochs):
  """H_{e^ε}(Bin(E, p1) ‖ Bin(E, p2)) in 50-digit arithmetic."""
  import mpmath as mp
  with mp.workdps(50):
    tot = mp.mpf(0)
    e = mp.e ** mp.mpf(eps)
    for x in range(epochs + 1):
      c = mp.binomial(epochs, x)
      d = c * p1 ** x * (1 - p1) ** (epochs - x) - e * c * p2 ** x * (1 - p2) ** (epochs - x)
      if d > 0:
        tot += d
    return tot


def _binomial_eps_for(lp, lq, delta, epochs, xs):
  """Largest ε (bisection, float64) with H_{e^ε} > δ between the two
  binomials of :func:`_binomial_hockey`; 0 when H_1 ≤ δ already."""
  if _binomial_hockey(lp, lq, 0.0, epochs, xs) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while _binomial_hockey(lp, lq, hi, epochs, xs) > delta and hi < 1e4:
    lo, hi = hi, 2.0 * hi
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    if _binomial_hockey(lp, lq, mid, epochs, xs) > delta:
      lo = mid
    else:
      hi = mid
  return lo
