"""Concentrated differential privacy: Dwork–Rothblum (μ, τ)-CDP and zCDP.

Two notions live here.

* (μ, τ)-CDP (Dwork & Rothblum 2016, "Concentrated Differential Privacy"): the
  privacy loss has mean at most μ and, centred, is τ-subgaussian.
  :func:`gaussian` (Thm 3.2, Cor 3.3), :func:`from_pure_dp` (Thm 3.5),
  :func:`compose` (Thm 3.4), :func:`to_epsilon` / :func:`to_delta` (Cor 3.1).
* ρ-zCDP (Bun & Steinke 2016, "Concentrated Differential Privacy:
  Simplifications, Extensions, and Lower Bounds"): D_α(M(x)‖M(x')) <= ρα for
  every α > 1. :func:`rho_gaussian`, :func:`rho_from_pure_dp`,
  :func:`rho_to_epsilon`, :func:`rho_to_delta`, :func:`rho_for_epsilon`,
  :func:`rho_from_rdp`, :func:`rdp_from_rho`.

Every function broadcasts its array arguments together (like
``jax.scipy.special``). Called with concrete values it validates them (a
``ValueError`` names the argument and value), computes in float64 and returns
NumPy float64; called with traced values (inside ``jit``/``vmap``/``grad``) it
is a pure JAX kernel in the ambient dtype.

All conversions to (ε, δ) round toward more privacy loss: any α used in an
optimisation is a valid certificate, so an approximate optimiser only loosens
(never breaks) the bound.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.kernels.cdp_common import dual_mode, common_float, golden_min
from jaxdp._src.core import persist

__all__ = [
    "gaussian",
    "group_gaussian",
    "from_pure_dp",
    "compose",
    "to_epsilon",
    "to_delta",
    "rho_gaussian",
    "rho_from_pure_dp",
    "rho_to_epsilon",
    "rho_to_delta",
    "rho_for_epsilon",
    "rho_from_rdp",
    "rdp_from_rho",
]


# --------------------------------------------------------------------------
# Dwork–Rothblum (μ, τ)-CDP
# --------------------------------------------------------------------------


@dual_mode
def gaussian(sigma, sensitivity=1.0):
  """(μ, τ)-CDP of the Gaussian mechanism N(f(x), σ²).

  τ = Δ/σ and μ = τ²/2 (Dwork–Rothblum 2016, Thm 3.2; the privacy loss is
  exactly N(τ²/2, τ²)).

  Args:
    sigma: noise standard deviation, > 0.
    sensitivity: L2 sensitivity Δ of the query, >= 0.

  Returns:
    ``(mu, tau)``, broadcast over the arguments.

  Raises:
    ValueError: for concrete σ <= 0 or Δ < 0, NaN or infinite values.
  """
  _numerics.check_array("sigma", sigma, low=0.0, low_open=True)
  _numerics.check_array("sensitivity", sensitivity, low=0.0)
  sigma, sensitivity = common_float(sigma, sensitivity)
  tau = sensitivity / sigma
  # Rounded up (a float32 μ was 1.4 ulp low): τ one rounding, μ three.
  return _numerics.round_up(0.5 * tau * tau, 4), _numerics.round_up(tau, 2)


@dual_mode
def group_gaussian(sigma, group_size, sensitivity=1.0):
  """Group (μ, τ)-CDP of the Gaussian mechanism for groups of ``group_size``.

  A group of s individuals has sensitivity at most sΔ, so the mechanism is
  ((sΔ/σ)²/2, sΔ/σ)-CDP (Dwork–Rothblum 2016, Cor 3.3; the paper's statement
  prints τ = sΔ, a typo for sΔ/σ that its proof via Thm 3.2 makes plain).

  Args:
    sigma: noise standard deviation, > 0.
    group_size: s >= 1 (whole number).
    sensitivity: per-individual L2 sensitivity Δ, >= 0.

  Returns:
    ``(mu, tau)``.

  Raises:
    ValueError: for concrete out-of-range arguments.
  """
  _numerics.check_array("sigma", sigma, low=0.0, low_open=True)
  _numerics.check_array("group_size", group_size, low=1.0, integer=True)
  _numerics.check_array("sensitivity", sensitivity, low=0.0)
  sigma, group_size, sensitivity = common_float(sigma, group_size, sensitivity)
  tau = group_size * sensitivity / sigma
  return _numerics.round_up(0.5 * tau * tau, 6), _numerics.round_up(tau, 4)


@dual_mode
def from_pure_dp(epsilon):
  """(μ, τ)-CDP implied by ε-DP: (ε(e^ε − 1)/2, ε).

  Dwork–Rothblum 2016, Thm 3.5 (expected loss from Lemma 3.8, subgaussianity
  from Hoeffding's lemma).

  Args:
    epsilon: ε >= 0.

  Returns:
    ``(mu, tau)``.
  """
  _numerics.check_array("epsilon", epsilon, low=0.0)
  (epsilon,) = common_float(epsilon)
  # expm1 and two products, rounded up (float32 μ was 2.8 ulp low).
  return _numerics.round_up(0.5 * epsilon * jnp.expm1(epsilon), 8), epsilon


@dual_mode
def compose(mu, tau, axis=-1):
  """Adaptive composition of (μ_i, τ_i)-CDP mechanisms along ``axis``.

  (Σ μ_i, (Σ τ_i²)^{1/2}) (Dwork–Rothblum 2016, Thm 3.4).

  Args:
    mu: expected losses μ_i >= 0.
    tau: subgaussian parameters τ_i >= 0, broadcasting with ``mu``.
    axis: the axis (or tuple of axes) that indexes the composed mechanisms.

  Returns:
    ``(mu_total, tau_total)`` with ``axis`` reduced.
  """
  _numerics.check_array("mu", mu, low=0.0)
  _numerics.check_array("tau", tau, low=0.0)
  _numerics.check_same_shape(mu=mu, tau=tau)
  mu, tau = common_float(mu, tau)
  mu, tau = jnp.broadcast_arrays(mu, tau)
  mu_total, tau_sq = jnp.sum(mu, axis=axis), jnp.sum(tau * tau, axis=axis)
  # A sum of n non-negative terms, in any order, is within (n - 1) half-ulps
  # relative of its exact value (float32 μ was 2 ulp low): rounded up by that.
  n = max(mu.size // max(mu_total.size, 1), 1)
  return (_numerics.round_up(mu_total, 0.5 * n + 1),
          _numerics.round_up(jnp.sqrt(tau_sq), 0.5 * n + 2))


@dual_mode
def to_epsilon(mu, tau, delta):
  """(ε, δ)-DP from (μ, τ)-CDP: ε = μ + τ·√(2 ln(1/δ)).

  Cor 3.1 of Dwork–Rothblum 2016 gives Pr[L >= μ + tτ] <= exp(−t²/2); taking
  t = √(2 ln 1/δ) bounds the probability that the loss exceeds ε by δ, which
  implies (ε, δ)-DP.

  Args:
    mu: expected loss μ >= 0.
    tau: subgaussian parameter τ >= 0.
    delta: δ in (0, 1].

  Returns:
    ε, broadcast over the arguments.
  """
  _numerics.check_array("mu", mu, low=0.0)
  _numerics.check_array("tau", tau, low=0.0)
  _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
  _numerics.check_same_shape(mu=mu, tau=tau, delta=delta)
  mu, tau, delta = common_float(mu, tau, delta)
  log_inv_delta = jnp.maximum(-jnp.log(delta), 0.0)
  # log, sqrt, a product and a sum of non-negative terms, rounded up.
  return _numerics.round_up(mu + tau * jnp.sqrt(2.0 * log_inv_delta), 8)


@dual_mode
def to_delta(mu, tau, epsilon):
  """δ(ε) from (μ, τ)-CDP: exp(−(ε − μ)²/(2τ²)) for ε > μ, else 1.

  The inverse of :func:`to_epsilon` (Dwork–Rothblum 2016, Cor 3.1).

  Args:
    mu: expected loss μ >= 0.
    tau: subgaussian parameter τ >= 0.
    epsilon: ε >= 0.

  Returns:
    δ in [0, 1].
  """
  _numerics.check_array("mu", mu, low=0.0)
  _numerics.check_array("tau", tau, low=0.0)
  _numerics.check_array("epsilon", epsilon, low=0.0, allow_inf=True)
  _numerics.check_same_shape(mu=mu, tau=tau, epsilon=epsilon)
  mu, tau, epsilon = common_float(mu, tau, epsilon)
  gap = epsilon - mu
  above = gap > 0
  pos_tau = tau > 0
  safe_tau = jnp.where(pos_tau, tau, 1.0)
  safe_gap = jnp.where(above, gap, 0.0)
  # The exponent's relative rounding (a few half-ulps) is multiplied by the
  # exponent itself in δ (143 float32 ulps low at exponent 72): shrink it by
  # 8 ulps, and round exp's own result up.
  expo = 0.5 * jnp.square(safe_gap / safe_tau)
  expo = expo * (1.0 - 8.0 * jnp.finfo(expo.dtype).eps)
  d = _numerics.round_up(jnp.exp(-expo), 4)
  d = jnp.where(pos_tau, jnp.minimum(d, 1.0), 0.0)
  return jnp.where(above, d, 1.0)


# --------------------------------------------------------------------------
# ρ-zCDP (Bun–Steinke 2016) and its conversions
# --------------------------------------------------------------------------


@dual_mode
def rho_gaussian(sigma, sensitivity=1.0):
  """ρ-zCDP of the Gaussian mechanism: ρ = Δ²/(2σ²) (Bun–Steinke 2016, Prop 1.6).

  Also a valid ρ for the Poisson-subsampled Gaussian with the same σ (Rényi
  divergence is jointly quasi-convex, so mixing with the unchanged
  distribution never increases D_α); zCDP gives no amplification by sampling.
  """
  _numerics.check_array("sigma", sigma, low=0.0, low_open=True)
  _numerics.check_array("sensitivity", sensitivity, low=0.0)
  sigma, sensitivity = common_float(sigma, sensitivity)
  return _numerics.round_up(0.5 * jnp.square(sensitivity / sigma), 4)


@dual_mode
def rho_from_pure_dp(epsilon):
  """ρ = ε²/2: every ε-DP mechanism is (ε²/2)-zCDP (Bun–Steinke 2016, Prop 1.4)."""
  _numerics.check_array("epsilon", epsilon, low=0.0)
  (epsilon,) = common_float(epsilon)
  return _numerics.round_up(0.5 * epsilon * epsilon, 2)


def _check_method(method: str) -> None:
  if method not in ("improved", "bun_steinke"):
    raise ValueError(
        f"method must be 'improved' or 'bun_steinke'; found {method!r}.")


def _epsilon_at_order(rho, log_inv_delta, alpha_m1):
  """ε certified by D_α <= ρα at α = 1 + alpha_m1 (Canonne–Kamath–Steinke).

  ε = αρ + (ln(1/δ) − ln α)/(α − 1) + ln(1 − 1/α)
  (Canonne–Kamath–Steinke 2020, Prop 12 / Cor 13; equals dp_accounting's
  improved RDP conversion with RDP αρ).

  The parts (~αρ ~ √(ρ ln(1/δ))) cancel down to a far smaller ε at small ρ,
  so the value carries their rounding allowance (float32 gave 0 for 7.5e-7
  at ρ = 1.6e-8, δ = 1.1e-4, with ln(1 − 1/α) as a difference of logs).
  """
  log_alpha = jnp.log1p(alpha_m1)
  parts = ((1.0 + alpha_m1) * rho, (log_inv_delta - log_alpha) / alpha_m1,
           -jnp.log1p(1.0 / alpha_m1))
  value = parts[0] + parts[1] + parts[2]
  scale = parts[0] + (log_inv_delta + log_alpha) / alpha_m1 - parts[2]
  return value + _numerics.rounding_allowance(scale, value)


@functools.partial(persist.jit, static_argnames="method")
def _rho_to_epsilon_kernel(rho, delta, method="improved"):
  rho, delta = common_float(rho, delta)
  rho, delta = jnp.broadcast_arrays(rho, delta)
  log_inv_delta = jnp.maximum(-jnp.log(delta), 0.0)
  bs = _numerics.round_up(rho + 2.0 * jnp.sqrt(rho * log_inv_delta), 4)
  if method == "bun_steinke":
    return bs
  pos = rho > 0
  safe_rho = jnp.where(pos, rho, 1.0)
  # Bun–Steinke optimum α − 1 = √(L/ρ); search log(α − 1) within e^±12 of it.
  u0 = 0.5 * (jnp.log(jnp.maximum(log_inv_delta, 1e-3)) - jnp.log(safe_rho))
  f = lambda u: _epsilon_at_order(safe_rho, log_inv_delta, jnp.exp(u))
  best = golden_min(f, u0 - 12.0, u0 + 12.0)
  improved = jnp.minimum(best, f(u0))
  improved = jnp.where(pos, improved, bs)
  return jnp.clip(jnp.minimum(improved, bs), 0.0, None)


@dual_mode
def rho_to_epsilon(rho, delta, method="improved"):
  """ε such that ρ-zCDP implies (ε, δ)-DP.

  ``method="bun_steinke"``: ε = ρ + 2√(ρ ln(1/δ)) (Bun–Steinke 2016, Prop 1.3).
  ``method="improved"`` (default): ε = inf_{α>1} αρ + (ln(1/δ) − ln α)/(α − 1)
  + ln(1 − 1/α) (Canonne–Kamath–Steinke 2020, Cor 13), minimised by a golden
  section search over ln(α − 1) around the Bun–Steinke optimum α = 1 +
  √(ln(1/δ)/ρ); never larger than the Bun–Steinke value.

  Args:
    rho: ρ >= 0.
    delta: δ in (0, 1].
    method: ``"improved"`` or ``"bun_steinke"``.

  Returns:
    ε >= 0.
  """
  _check_method(method)
  _numerics.check_array("rho", rho, low=0.0)
  _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
  _numerics.check_same_shape(rho=rho, delta=delta)
  return _rho_to_epsilon_kernel(rho, delta, method)


def _log_delta_at_order(rho, epsilon, alpha_m1):
  """ln δ certified by D_α <= ρα at α = 1 + alpha_m1 (CKS 2020, Prop 12).

  δ = exp((α − 1)(αρ − ε)) / α · (1 − 1/α)^{α−1}.
  """
  alpha = 1.0 + alpha_m1
  parts = (alpha_m1 * alpha * rho, -alpha_m1 * epsilon,
           -alpha_m1 * jnp.log1p(1.0 / alpha_m1), -jnp.log1p(alpha_m1))
  value = parts[0] + parts[1] + parts[2] + parts[3]
  return value + _numerics.rounding_allowance(sum(jnp.abs(p) for p in parts), value)


@functools.partial(persist.jit, static_argnames="method")
def _rho_to_delta_kernel(rho, epsilon, method="improved"):
  rho, epsilon = common_float(rho, epsilon)
  rho, epsilon = jnp.broadcast_arrays(rho, epsilon)
  pos = rho > 0
  safe_rho = jnp.where(pos, rho, 1.0)
  gap = epsilon - rho
  above = gap > 0
  safe_gap = jnp.where(above, gap, 0.0)
  eps = float(jnp.finfo(rho.dtype).eps)
  # Rounded up: the exponent's magnitude shrunk by 4 ulps.
  bs = jnp.where(above, jnp.exp(-jnp.square(safe_gap) / (4.0 * safe_rho) * (1.0 - 4.0 * eps)),
                 1.0)
  if method == "improved":
    finite_eps = jnp.isfinite(epsilon)
    safe_eps = jnp.where(finite_eps, epsilon, 1.0)
    # Stationary point of α²ρ − αε − ln α, α = (ε + √(ε² + 8ρ))/(4ρ); search
    # ln(α − 1) within e^±12 of it.
    alpha0 = (safe_eps + jnp.sqrt(safe_eps * safe_eps + 8.0 * safe_rho)) / (
        4.0 * safe_rho)
    u0 = jnp.log(jnp.maximum(alpha0 - 1.0, 1e-3))
    f = lambda u: _log_delta_at_order(safe_rho, safe_eps, jnp.exp(u))
    best = jnp.exp(jnp.minimum(golden_min(f, u0 - 12.0, u0 + 12.0), 0.0))
    best = jnp.where(finite_eps, best, 0.0)
    bs = jnp.minimum(bs, best)
  d = jnp.where(pos, _numerics.round_up(bs, 4), jnp.where(epsilon >= 0, 0.0, 1.0))   # exp rounded up
  return jnp.clip(d, 0.0, 1.0)


@dual_mode
def rho_to_delta(rho, epsilon, method="improved"):
  """δ(ε) such that ρ-zCDP implies (ε, δ)-DP.

  ``method="bun_steinke"``: δ = exp(−(ε − ρ)²/(4ρ)) for ε > ρ (Bun–Steinke
  2016, Prop 1.3 inverted). ``method="improved"``: δ = inf_{α>1}
  exp((α − 1)(αρ − ε))/α · (1 − 1/α)^{α−1} (Canonne–Kamath–Steinke 2020,
  Cor 13), golden-section search over ln(α − 1).

  Args:
    rho: ρ >= 0.
    epsilon: ε >= 0 (may be +inf).
    method: ``"improved"`` or ``"bun_steinke"``.

  Returns:
    δ in [0, 1].
  """
  _check_method(method)
  _numerics.check_array("rho", rho, low=0.0)
  _numerics.check_array("epsilon", epsilon, low=0.0, allow_inf=True)
  _numerics.check_same_shape(rho=rho, epsilon=epsilon)
  return _rho_to_delta_kernel(rho, epsilon, method)


@dual_mode
def rho_for_epsilon(epsilon, delta, method="improved"):
  """The largest ρ whose zCDP guarantee implies (ε, δ)-DP.

  Bun–Steinke: solving ρ + 2√(ρL) = ε (L = ln 1/δ) gives
  ρ = (√(L + ε) − √L)². Improved: bisection on ρ over
  [ρ_BS, ρ_BS + ε] against :func:`rho_to_epsilon`, returning the feasible end
  (so ``rho_to_epsilon(result, delta) <= epsilon``).

  Args:
    epsilon: ε >= 0.
    delta: δ in (0, 1].
    method: ``"improved"`` or ``"bun_steinke"``.

  Returns:
    ρ >= 0.
  """
  _check_method(method)
  _numerics.check_array("epsilon", epsilon, low=0.0)
  _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
  _numerics.check_same_shape(epsilon=epsilon, delta=delta)
  return _rho_for_epsilon_kernel(epsilon, delta, method)


@functools.partial(persist.jit, static_argnames="method")
def _rho_for_epsilon_kernel(epsilon, delta, method):
  epsilon, delta = common_float(epsilon, delta)
  epsilon, delta = jnp.broadcast_arrays(epsilon, delta)
  log_inv_delta = jnp.maximum(-jnp.log(delta), 0.0)
  rho_bs = jnp.square(epsilon / (jnp.sqrt(log_inv_delta + epsilon)
                                 + jnp.sqrt(log_inv_delta)))
  # Rounded down, by enough that the rounded-up Bun–Steinke ε of the result
  # stays within ε (the improved search starts from it as its feasible end).
  rho_bs = jnp.where(epsilon > 0, rho_bs, 0.0) * (1.0 - 16.0 * float(jnp.finfo(epsilon.dtype).eps))
  if method == "bun_steinke":
    return rho_bs

  def body(_, carry):
    lo, hi = carry
    mid = 0.5 * (lo + hi)
    ok = _rho_to_epsilon_kernel(mid, delta) <= epsilon
    return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

  lo, _ = jax.lax.fori_loop(0, 64, body, (rho_bs, rho_bs + epsilon))
  return lo


@dual_mode
def rho_from_rdp(rdp, orders, axis=-1):
  """The smallest ρ with rdp(α) <= ρα at every listed order: max_α rdp(α)/α.

  This certifies ρ-zCDP only if the mechanism's RDP curve satisfies
  ε(α) <= ρα at *all* α > 1, e.g. Gaussian-type curves (linear in α) or curves
  whose ε(α)/α is non-decreasing and the grid reaches far enough; for a
  Poisson-sampled Gaussian ε(α)/α keeps growing towards 1/(2σ²), so use
  :func:`rho_gaussian` there.

  Args:
    rdp: RDP values ε(α) >= 0 with the orders on ``axis``.
    orders: α > 1, broadcasting with ``rdp``.
    axis: the orders axis.

  Returns:
    ρ, with ``axis`` reduced.
  """
  _numerics.check_array("rdp", rdp, low=0.0, allow_inf=True)
  _numerics.check_array("orders", orders, low=1.0, low_open=True)
  rdp, orders = common_float(rdp, orders)
  return jnp.max(rdp / orders, axis=axis)


@dual_mode
def rdp_from_rho(rho, orders):
  """RDP curve ε(α) = ρα of a ρ-zCDP mechanism (Bun–Steinke 2016, Def 1.1)."""
  _numerics.check_array("rho", rho, low=0.0)
  _numerics.check_array("orders", orders, low=1.0, low_open=True)
  rho, orders = common_float(rho, orders)
  return rho * orders
