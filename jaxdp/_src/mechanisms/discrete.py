"""Discrete mechanisms: RDP curves and dominating pairs on a finite support.

Helpers of :mod:`jaxdp.mechanisms` (which dispatches on the event type) for the
events whose outputs live on a countable set: :class:`~jaxdp.events.RandomizedResponse`,
:class:`~jaxdp.events.DiscreteLaplace`, :class:`~jaxdp.events.DiscreteGaussian`,
:class:`~jaxdp.events.EpsilonDelta` / :class:`~jaxdp.events.PureDP` and
:class:`~jaxdp.events.PMFPair`.

Conventions. A pair (P, Q) is one direction of a neighbouring relation with P
the output on the larger dataset; its hockey-stick divergence is
δ(ε) = Σₓ (P(x) − e^ε Q(x))₊, and its Rényi divergence of order α > 1 is
D_α(P‖Q) = log Σₓ P(x)^α Q(x)^{1−α} / (α − 1) = log Σₓ P(x) e^{(α−1)ℓ(x)} / (α − 1)
with the privacy loss ℓ = log(P/Q). Every number returned is an upper bound
on the exact one: probabilities of P are rounded up and those of Q down (so
losses round up), mass that is not represented goes to ``p_inf`` (loss +∞),
and RDP values carry an explicit allowance for the rounding of their inputs.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms.discrete_pairs import (discrete_gaussian_pairs, discrete_laplace_pairs,
                                                  epsilon_delta_pairs, randomized_response_pairs)
from jaxdp._src.mechanisms.entry import Entry, column, field, scalars

__all__ = [
    "pure_dp_rdp",
    "randomized_response_rdp",
    "discrete_laplace_rdp",
    "discrete_gaussian_rdp",
    "epsilon_delta_rdp",
]

def _float_dtype(*xs):
  return jnp.result_type(float, *[jnp.asarray(x).dtype for x in xs])


def _finish(rdp, dtype):
  """Final upward nudge (a few ulps) of an RDP value."""
  return rdp * (1.0 + 8.0 * jnp.finfo(dtype).eps)


# --------------------------------------------------------------------------
# RDP curves (pure, jittable, broadcasting)
# --------------------------------------------------------------------------


def pure_dp_rdp(epsilon, alpha):
  """RDP bound of any ε-DP mechanism at order α.

  Every ε-DP pair is a post-processing of binary randomized response with
  loss ±ε (Kairouz, Oh & Viswanath 2015, Thm 2.1), so D_α ≤ D_α(RR_ε) =
  [lc((α − ½)ε) − lc(ε/2)]/(α − 1) with lc = log cosh; also capped by ε and
  by αε²/2 (Bun & Steinke 2016, Prop 1.4). ε = ∞ gives ∞.

  Args:
    epsilon: ε >= 0 (may be ∞).
    alpha: orders > 1.

  Returns:
    The bound, broadcast.
  """
  dtype = _float_dtype(epsilon, alpha)
  epsilon = jnp.asarray(epsilon, dtype)
  alpha = jnp.asarray(alpha, dtype)
  finite = jnp.isfinite(epsilon)
  eps = jnp.where(finite, epsilon, 1.0)

  def log_cosh(x):
    x = jnp.abs(x)
    small = x < 1.0
    xs = jnp.where(small, x, 0.0)
    xl = jnp.where(small, 1.0, x)
    return jnp.where(small, nx.log1p(2.0 * jnp.square(jnp.sinh(0.5 * xs))),
                     xl + nx.log1p(jnp.exp(-2.0 * xl)) - jnp.log(2.0))

  am1 = alpha - 1.0
  lc_a, lc_b = log_cosh((alpha - 0.5) * eps), log_cosh(0.5 * eps)
  rr = (lc_a - lc_b) / am1
  # Each log cosh is accurate to a few ulps of itself (log1p form below 1,
  # x + log1p(e^{-2x}) - log 2 above, where it is >= 0.43x); the difference
  # may cancel, so allow 16 ulps of the two magnitudes, over α − 1.
  rr = rr + 16.0 * jnp.finfo(dtype).eps * (lc_a + lc_b) / am1
  out = jnp.minimum(jnp.minimum(rr, eps), 0.5 * alpha * eps * eps)
  return jnp.where(finite, _finish(out, dtype), jnp.inf)


def _rdp_from_log_terms(log_terms, magnitude, alpha, dtype):
  """(log Σ exp(log_terms) + allowance)/(α − 1): the Rényi divergence from its moment.

  ``log_terms`` stacks on axis 0 the logs of the positive terms of
  Σₓ P(x)^α Q(x)^{1−α}; ``magnitude`` bounds the absolute size of the numbers
  each log term was computed from, so 32·eps·(1 + magnitude) bounds the
  absolute rounding error of the log moment.
  """
  log_s = logsumexp(log_terms, axis=0)
  allowance = 32.0 * jnp.finfo(dtype).eps * (1.0 + magnitude)
  return jnp.maximum((log_s + allowance) / (alpha - 1.0), 0.0)


def randomized_response_rdp(noise_parameter, num_buckets, alpha):
  """Exact RDP of k-ary randomized response (replace-one), an upper bound in floating point.

  With A = 1 − p + p/k, B = p/k, C = (k − 2)p/k and r = log(A/B) (the pure
  ε), both directions give
  D_α = log(A e^{(α−1)r} + B e^{−(α−1)r} + C)/(α − 1) (the three outcomes:
  the true input, the neighbour's input, any other bucket; dp_accounting's
  ``_randomized_response_rdp_replace_one``). Capped by :func:`pure_dp_rdp` at
  r, which is accurate where the exact form cancels (r → 0). k = 1 or p = 1
  gives 0; p = 0 gives ∞.

  Args:
    noise_parameter: p in [0, 1].
    num_buckets: k >= 1 (whole number).
    alpha: orders > 1.

  Returns:
    RDP values, broadcast.
  """
  dtype = _float_dtype(noise_parameter, alpha)
  p = jnp.asarray(noise_parameter, dtype)
  k = jnp.asarray(num_buckets, dtype)
  alpha = jnp.asarray(alpha, dtype)
  trivial = (k <= 1.0) | (p >= 1.0)
  blatant = p <= 0.0
  ps = jnp.where(trivial | blatant, 0.5, p)
  ks = jnp.where(trivial, 2.0, k)
  # A = 1 - p(k-1)/k: log1p while p(k-1)/k is small; near 1 (p → 1, k large)
  # the subtraction would cancel (float32: -37% at p = 1 - 1.2e-7, k = 47006),
  # so A = (1 - p) + p/k there (1 - p exact for p ≥ 1/2, both parts positive).
  moved = ps * (ks - 1.0) / ks
  log_a = jnp.where(moved < 0.5, nx.log1p(-jnp.minimum(moved, 0.5)),
                    jnp.log((1.0 - ps) + ps / ks))
  log_b = jnp.log(ps) - jnp.log(ks)
  has_c = ks > 2.0
  log_c = jnp.where(has_c, jnp.log(ps) + jnp.log(jnp.where(has_c, ks - 2.0, 1.0)) - jnp.log(ks),
                    -jnp.inf)
  r = nx.log1p(ks * (1.0 - ps) / ps)
  x = (alpha - 1.0) * r
  terms = jnp.stack(jnp.broadcast_arrays(log_a + x, log_b - x, log_c + 0.0 * x))
  magnitude = alpha * (jnp.abs(log_a) + jnp.abs(log_b) + jnp.where(has_c, jnp.abs(log_c), 0.0)
                       + 2.0 * r)
  exact = _rdp_from_log_terms(terms, magnitude, alpha, dtype)
  # x <= 1: S − 1 = A·expm1(x) + B·expm1(−x) directly (C's loss is 0), which
  # keeps its relative accuracy as r → 0; the allowance covers the rounding of
  # A and B (relative ulps of each term) and of x (|dS/dx| <= M + (A − B)).
  xs = jnp.minimum(x, 1.0)
  ta, tb = jnp.exp(log_a) * jnp.expm1(xs), jnp.exp(log_b) * jnp.expm1(-xs)
  m = jnp.abs(ta) + jnp.abs(tb)
  allowance = 32.0 * jnp.finfo(dtype).eps * (1.0 + alpha) * (m + (1.0 - ps))
  near = jnp.maximum(nx.log1p(ta + tb + allowance) / (alpha - 1.0), 0.0)
  exact = jnp.where(x <= 1.0, jnp.minimum(exact, near), exact)
  out = jnp.minimum(exact, pure_dp_rdp(r * (1.0 + 4.0 * jnp.finfo(dtype).eps), alpha))
  return jnp.where(trivial, 0.0, jnp.where(blatant, jnp.inf, out))


def discrete_laplace_rdp(parameter, sensitivity, alpha):
  """Exact RDP of the discrete Laplace mechanism, an upper bound in floating point.

  P = DLap centred at Δ, Q = DLap at 0, P(z) ∝ e^{−a|z−Δ|}, normaliser
  tanh(a/2). Summing Σ_z P^α Q^{1−α} over z ≤ 0, 0 < z < Δ and z ≥ Δ
  (three geometric series) gives
  e^{−αaΔ}/(1 + e^{−a}) + e^{(α−1)aΔ}/(1 + e^{−a})
  + tanh(a/2) e^{−αaΔ} Σ_{z=1}^{Δ−1} e^{z a(2α−1)}; the reverse direction is
  its mirror image (equal). Capped by :func:`pure_dp_rdp` at aΔ.

  Args:
    parameter: a > 0.
    sensitivity: Δ >= 1 (whole number).
    alpha: orders > 1.

  Returns:
    RDP values, broadcast.
  """
  dtype = _float_dtype(parameter, sensitivity, alpha)
  a = jnp.asarray(parameter, dtype)
  d = jnp.asarray(sensitivity, dtype)
  alpha = jnp.asarray(alpha, dtype)
  log_norm = nx.softplus(-a)  # log(1 + e^{-a})
  log_c = nx.log1mexp(a) - log_norm  # log tanh(a/2)
  ad = a * d
  t1 = -alpha * ad - log_norm
  t2 = (alpha - 1.0) * ad - log_norm
  beta = a * (2.0 * alpha - 1.0)
  n = d - 1.0
  has_mid = n >= 1.0
  ns = jnp.where(has_mid, n, 1.0)
  t3 = log_c - alpha * ad + beta + nx.log_expm1(ns * beta) - nx.log_expm1(beta)
  t3 = jnp.where(has_mid, t3, -jnp.inf)
  terms = jnp.stack(jnp.broadcast_arrays(t1, t2, t3))
  magnitude = 4.0 * alpha * ad + 2.0 * log_norm + jnp.abs(log_c) + 4.0 * ns * beta + 4.0 * beta
  exact = _rdp_from_log_terms(terms, magnitude, alpha, dtype)
  return jnp.minimum(exact, pure_dp_rdp(ad * (1.0 + 4.0 * jnp.finfo(dtype).eps), alpha))


def discrete_gaussian_rdp(sigma, sensitivity, alpha):
  """RDP bound of the discrete Gaussian mechanism: αΔ²/(2σ²).

  D_α(N_ℤ(Δ, σ²)‖N_ℤ(0, σ²)) ≤ αΔ²/(2σ²) for integer Δ, the continuous
  Gaussian's value (Canonne, Kamath & Steinke 2020, Prop. 5; the mechanism is
  Δ²/(2σ²)-zCDP, their Thm 4).

  Args:
    sigma: scale σ > 0.
    sensitivity: Δ >= 1.
    alpha: orders > 1.

  Returns:
    RDP values, broadcast.
  """
  dtype = _float_dtype(sigma, sensitivity, alpha)
  s = jnp.asarray(sigma, dtype) / jnp.asarray(sensitivity, dtype)
  return _finish(jnp.asarray(alpha, dtype) / (2.0 * s * s), dtype)


def epsilon_delta_rdp(epsilon, delta, alpha):
  """RDP of an (ε, δ)-DP event: the pure-DP bound when δ = 0, else ∞.

  An (ε, δ)-DP mechanism with δ > 0 has no finite Rényi divergence bound in
  general (its worst case puts mass δ where the other output has none).

  Args:
    epsilon: ε >= 0.
    delta: δ in [0, 1]; traced values give ∞ where δ > 0.
    alpha: orders > 1.

  Returns:
    :func:`pure_dp_rdp` of ε where δ = 0, ∞ elsewhere (broadcast).

  Raises:
    ValueError: when ``delta`` is concrete and positive (use
      ``jaxdp.accountant.pld()`` for such events).
  """
  if nx.is_concrete(delta) and np.any(np.asarray(delta) > 0.0):
    bad = np.asarray(delta, np.float64)
    found = bad[()] if bad.ndim == 0 else bad[bad > 0.0][0]
    raise ValueError(
        f"EpsilonDelta.delta must be 0 for an RDP curve (an (epsilon, delta)-DP event with "
        f"delta > 0 has no finite Renyi divergence); found {found}. Compose it with "
        f"jaxdp.accountant.pld() instead.")
  dtype = _float_dtype(epsilon, alpha)
  pure = pure_dp_rdp(jnp.asarray(epsilon, dtype), jnp.asarray(alpha, dtype))
  return jnp.where(jnp.asarray(delta, dtype) == 0.0, pure, jnp.inf)


# --------------------------------------------------------------------------
# Registry entries (jaxdp._src.mechanisms.registry)
# --------------------------------------------------------------------------


def _randomized_response_event_rdp(event, orders, dtype):
  alpha = jnp.asarray(np.asarray(orders, np.float64), dtype)
  out = randomized_response_rdp(column(event.noise_parameter, dtype),
                                column(event.num_buckets, dtype), alpha)
  return jnp.asarray(out, dtype)


def _discrete_laplace_event_rdp(event, orders, dtype):
  alpha = jnp.asarray(np.asarray(orders, np.float64), dtype)
  sens = 1.0 if event.sensitivity is None else event.sensitivity
  out = discrete_laplace_rdp(column(event.parameter, dtype), column(sens, dtype), alpha)
  return jnp.asarray(out, dtype)


def _discrete_gaussian_event_rdp(event, orders, dtype):
  alpha = jnp.asarray(np.asarray(orders, np.float64), dtype)
  sens = 1.0 if event.sensitivity is None else event.sensitivity
  out = discrete_gaussian_rdp(column(event.sigma, dtype), column(sens, dtype), alpha)
  return jnp.asarray(out, dtype)


def _epsilon_delta_event_rdp(event, orders, dtype):
  alpha_np = np.asarray(orders, np.float64)
  epsilon_delta_rdp(0.0, event.delta, alpha_np[:1])  # concrete δ > 0: ValueError
  out = epsilon_delta_rdp(column(event.epsilon, dtype), column(event.delta, dtype),
                          jnp.asarray(alpha_np, dtype))
  return jnp.asarray(out, dtype)


def _pure_dp_event_rdp(event, orders, dtype):
  alpha = jnp.asarray(orders, dtype)
  return jnp.asarray(pure_dp_rdp(column(event.epsilon, dtype), alpha), dtype)


def _randomized_response_pure_epsilon(event, dtype):
  """ln(1 + k(1 − p)/p), +inf at p = 0."""
  p = field(event.noise_parameter, dtype)
  safe_p = jnp.where(p > 0, p, 1.0)
  return jnp.where(p > 0, jnp.log1p(field(event.num_buckets, dtype) * (1.0 - p) / safe_p),
                   jnp.asarray(jnp.inf, dtype))


def _pure_dp_rho(event, dtype):
  """ρ = ε²/2 (Bun–Steinke Prop 1.4; tighter than Dwork–Rothblum Thm 3.5)."""
  eps = jnp.asarray(event.epsilon, dtype)
  return 0.5 * eps * eps


def _int_pairs(fn, *names):
  def pairs(event):
    first, second = scalars(event, *names)
    return [fn(first, int(second))]
  return pairs


ENTRIES = {
    _events.RandomizedResponse: Entry(
        rdp=_randomized_response_event_rdp,
        pairs=_int_pairs(randomized_response_pairs, "noise_parameter", "num_buckets"),
        pure_epsilon=_randomized_response_pure_epsilon),
    _events.DiscreteLaplace: Entry(
        rdp=_discrete_laplace_event_rdp,
        pairs=_int_pairs(discrete_laplace_pairs, "parameter", "sensitivity"),
        pure_epsilon=lambda event, dtype: (field(event.parameter, dtype)
                                           * field(event.sensitivity, dtype))),
    _events.DiscreteGaussian: Entry(
        rdp=_discrete_gaussian_event_rdp,
        pairs=_int_pairs(discrete_gaussian_pairs, "sigma", "sensitivity")),
    _events.EpsilonDelta: Entry(
        rdp=_epsilon_delta_event_rdp,
        pairs=lambda event: [epsilon_delta_pairs(*scalars(event, "epsilon", "delta"))],
        pure_epsilon=lambda event, dtype: jnp.where(
            field(event.delta, dtype) == 0, field(event.epsilon, dtype),
            jnp.asarray(jnp.inf, dtype))),
    _events.PureDP: Entry(
        rdp=_pure_dp_event_rdp,
        pairs=lambda event: [epsilon_delta_pairs(scalars(event, "epsilon")[0], 0.0)],
        pure_epsilon=lambda event, dtype: field(event.epsilon, dtype),
        rho=_pure_dp_rho),
}
