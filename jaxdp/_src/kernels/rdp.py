"""Rényi differential privacy of Gaussian mechanisms and RDP → (ε, δ) conversions.

Kernels here are pure, jittable and broadcast their array arguments together
like ``jax.scipy.special``. They compute in the dtype of their inputs: float64
when called from the host-level entry points (``jaxdp.epsilon`` & co. scope
``jax_enable_x64``), float32 inside a user's jit with x64 off. Values are
inflated by a relative 256 ulps, and every log-term of the sampled-Gaussian
sums carries a rounding allowance proportional to its parts' magnitudes
(:func:`jaxdp._src.core.numerics.rounding_allowance`): where α(α-1)/(2σ²) and α·log q cancel (large α,
small q) float32 rounding reaches ~1e-3 relative, so there the float32 value
is up to ~1% looser (α ≳ 1000) but stays an upper bound. Float32 quadrature
(traced or fractional orders) instead adds a proven a-priori bound on its
round-off per node, weight and sum (``_f32_node_bound``; proof in
docs/mathematics.md, "Float32 quadrature round-off"), which assumes only
correctly rounded arithmetic and XLA's float32 exp/log/log1p/expm1 within the
tested ``_F32_TAU`` units of roundoff.

Mathematics: Mironov, Talwar & Zhang, "Rényi Differential Privacy of the
Sampled Gaussian Mechanism" (2019), §3. For Poisson sampling with rate q and
noise multiplier σ (add/remove neighbours, L2 sensitivity 1) the RDP at order
α is ε(α) = log(A_α)/(α-1) with

    A_α = E_{z~N(0,σ²)} [(1 - q + q·exp((2z-1)/(2σ²)))^α]          (Thm 4/5, eq. 11)

(Theorem 5 shows A_α ≥ B_α, so A_α is the binding direction).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxdp._src.core import numerics as nx

__all__ = [
    "DEFAULT_ORDERS",
    "sampled_gaussian",
    "gaussian",
    "sampled_gaussian_bound",
    "to_epsilon",
    "to_delta",
    "to_epsilon_refined",
    "to_delta_refined",
    "dpsgd_rdp",
    "dpsgd_epsilon",
    "dpsgd_delta",
]

# Orders serving both tiny and large ε: dense near 1 (large ε / few steps),
# every 0.1 up to 11 and all integers to 64 (a superset of dp_accounting's
# default RDP orders, so the grid minimum is never above its), then a
# geometric tail up to 4096 (tiny ε, huge T). The in-jit read-out
# (:func:`to_epsilon_refined`) also bounds every order between two grid
# orders by the chord of (α-1)·ε(α).
DEFAULT_ORDERS = np.unique(np.concatenate([
    1.0 + np.array([0.01, 0.02, 0.05]),
    np.round(1.0 + np.arange(1, 100) / 10.0, 12),
    np.array([1.75, 2.25, 2.75]),
    np.arange(11.0, 65.0),
    np.array([80.0, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
              1024, 1536, 2048, 3072, 4096]),
]))
DEFAULT_ORDERS.setflags(write=False)

# Integer orders up to this use the exact binomial sum; beyond, quadrature.
_MAX_BINOMIAL_ORDER = 4096
# Quadrature nodes per window (two windows per evaluation).
_NODES_PER_WINDOW = 64
# Enough when every σ ≥ 0.5 (error ≤ 1e-12 there; chosen only for concrete σ).
_NODES_WIDE = 40
# Log-integrand drop that defines a quadrature window's edges.
_WINDOW_DROP = 64.0
# Relative safety factor (in units of the dtype's epsilon) applied to every
# RDP value so that rounding and quadrature error cannot under-report.
_SAFETY_ULPS = 256.0


def _safety(dtype) -> float:
  # float64: 4e-12 covers the quadrature error (≤ 1e-12 relative, tested).
  return 1.0 + max(_SAFETY_ULPS * float(jnp.finfo(dtype).eps), 4e-12)


def _float_dtype(*xs):
  dt = jnp.result_type(*xs)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.result_type(float)


# --------------------------------------------------------------------------
# Exact binomial sum for integer orders (MTZ §3.3, Case I)
# --------------------------------------------------------------------------


def _log_a_minus_1_binomial(log_q, log_1mq, sigma, orders, xp=jnp):
  """log(A_α - 1) for a bucket of integer orders α ≥ 2 by the exact binomial sum.

  A_α - 1 = Σ_{k=2}^{α} C(α,k) (1-q)^{α-k} q^k (exp((k²-k)/(2σ²)) - 1):
  subtracting Σ_k C(α,k)(1-q)^{α-k}q^k = 1 removes k = 0, 1 exactly and leaves
  only non-negative terms, so tiny q (A_α - 1 ≈ 1e-20) keeps full relative
  precision (MTZ §3.3, Case I; E[(μ1/μ0)^k] = exp((k²-k)/(2σ²))).

  Args:
    log_q, log_1mq, sigma: shape (E,).
    orders: static NumPy integer orders, shape (m,); terms are padded to the
      largest and masked.

  Returns:
    Shape (E, m).
  """
  coef, rest, coef_err = _binomial_tables(orders)
  dtype = log_q.dtype
  return _binomial_lse(log_q[:, None, None], log_1mq[:, None, None], sigma[:, None, None],
                       xp.asarray(coef, dtype), xp.asarray(rest, dtype), xp,
                       xp.asarray(coef_err, dtype))


def _binomial_tables(orders):
  """Static log C(α, k) and α - k for k = 2..max(orders), -inf / 0 past each α.

  Returns:
    ``(coef, rest, coef_err)``, NumPy float64 arrays of shape
    (len(orders), max(orders) - 1); ``coef_err`` bounds the float64 error of
    ``coef`` (a difference of log-factorials up to ~3·10⁴, see
    :func:`_log_binomial_error`), 0 past each α.
  """
  kmax = int(orders.max())
  k_np = np.arange(2, kmax + 1, dtype=np.float64)
  a_np = np.asarray(orders, np.float64)[:, None]
  valid = k_np[None, :] <= a_np
  # log n! for n = 0..kmax by math.lgamma (the same values elementwise, once each).
  log_fact = np.array([math.lgamma(n + 1.0) for n in range(kmax + 1)])
  a_int = a_np.astype(np.int64)
  k_int = k_np.astype(np.int64)[None, :]
  rest_int = np.maximum(a_int - k_int, 0)
  coef = np.where(valid, log_fact[a_int] - log_fact[k_int] - log_fact[rest_int], -np.inf)
  err = _log_binomial_error(log_fact[a_int] + log_fact[k_int] + log_fact[rest_int],
                            np.finfo(np.float64).eps)
  return coef, np.where(valid, a_np - k_np, 0.0), np.where(valid, err, 0.0)


def _log_binomial(n, k):
  """log C(n, k) by log-gammas in the caller's dtype, and its error bound.

  Returns:
    ``(coef, err)``, broadcast; C(n, k) with k > n is taken as C(n, k)
    with n - k clipped to 0 (callers mask those terms).
  """
  parts = (gammaln(n + 1.0), gammaln(k + 1.0), gammaln(jnp.maximum(n - k, 0.0) + 1.0))
  coef = parts[0] - parts[1] - parts[2]
  eps = float(jnp.finfo(coef.dtype).eps)
  return coef, _log_binomial_error(sum(jnp.abs(g) for g in parts), eps)


def _log_binomial_error(log_gammas, eps):
  """Error bound of log C(α, k) computed as a difference of log-gammas.

  ``log_gammas`` is the sum of the three magnitudes; each is within 4 eps
  relative (``jax.scipy.special.gammaln`` measured ≤ 4.0 eps in float32,
  2.9 in float64; ``math.lgamma`` 1.6), plus two subtractions.
  """
  return 6.0 * eps * log_gammas


def _binomial_lse(log_q, log_1mq, sigma, coef, rest, xp=jnp, coef_err=0.0):
  """log Σ_k exp(coef_k + rest_k·log(1-q) + k·log q + log(exp((k²-k)/(2σ²)) - 1)).

  ``coef``, ``rest`` and ``coef_err`` (the tables of :func:`_binomial_tables`)
  carry k = 2, 3, … on their last axis; the other arguments broadcast
  against them.
  """
  dtype = log_q.dtype
  k = xp.arange(2, coef.shape[-1] + 2, dtype=dtype)
  terms = _binomial_terms(log_q, log_1mq, sigma, coef, rest, k, xp, coef_err)
  return _logsumexp(terms, axis=-1, xp=xp)


def _binomial_terms(log_q, log_1mq, sigma, coef, rest, k, xp=jnp, coef_err=0.0):
  """Log-terms of the binomial sum, each rounded up by its rounding allowance.

  With y = (k²-k)/(2σ²), log(e^y - 1) = y + log(1 - e^{-y}), so the term's
  large parts k·log q and y (each ~10⁴ at k ~ 700 when y ≈ k·|log q|) enter
  as one product k·(log q + (k-1)/(2σ²)) whose factor cancels first. The
  result still carries the rounding of log q and (k-1)/(2σ²), amplified
  k-fold; :func:`jaxdp._src.core.numerics.rounding_allowance` bounds it (and the rest) by the sum of
  the magnitudes of the parts; ``coef_err`` bounds the error ``coef`` had
  before it was rounded to the dtype.
  """
  # (α-k)·log(1-q) with 0·(-inf) := 0 at k = α (q = 1).
  pow_1mq = xp.where(rest > 0, rest * xp.where(rest > 0, log_1mq, 0.0), 0.0)
  inv_2s2 = 0.5 / (sigma * sigma)
  y = (k * k - k) * inv_2s2
  tail = nx.log1mexp(y, xp)
  terms = coef + pow_1mq + k * (log_q + (k - 1.0) * inv_2s2) + tail
  scale = xp.abs(coef) + xp.abs(pow_1mq) + k * xp.abs(log_q) + y + xp.abs(tail)
  return terms + nx.rounding_allowance(scale, terms, xp) + coef_err


# Float32 quadrature: a proven a-priori round-off bound (docs/mathematics.md,
# "Float32 quadrature round-off") replaces the flat, measured 2e-3 it used to
# add. Model: + - * / correctly rounded (unit roundoff _F32_U = 2^-24, normal
# range); XLA's float32 exp, log, log1p and expm1 primitives within
# _F32_TAU[f]·u relative (the float32 nodes use no compensated formula, see
# _log1p). Measured on CPU (jax 0.10.2, dense
# sweeps over the arguments the quadrature uses,
# tests/test_rdp_float32_margin.py): exp 1.4u, log 2.0u, log1p 3.4u, expm1
# 6.4u; CUDA's libdevice documents expf 2 ulps (≤ 4u), logf/log1pf/expm1f
# 1 ulp (≤ 2u). The assumed bounds keep ≥ 2.35× over the worst measured (and
# ≥ 1.5× over libdevice). Each formula's bound counts every rounding of every
# part by magnitude, so reassociation, distribution or reciprocal rewrites by
# the compiler (which create no new cancelling intermediates) stay covered.
_F32_U = 2.0 ** -24
_F32_TAU = {"exp": 6.0, "log": 6.0, "log1p": 8.0, "expm1": 16.0}


def _log1p(x, xp=jnp):
  """log(1 + x): XLA's ``log1p`` primitive in float32 under jit, else the
  faster compensated :func:`jaxdp._src.core.numerics.log1p`.

  The compensated form log(v) - ((v - 1) - x)/v, v = fl(1 + x), relies on
  (v - 1) - x being evaluated as written; a compiled float32 program that
  simplifies it loses the correction (error up to u/|x| relative, which the
  proven bound of :func:`_f32_node_bound` does not allow). The primitive has
  no such internal structure for the compiler to rewrite.
  """
  x = xp.asarray(x)
  if xp is jnp and jnp.finfo(x.dtype).eps > 1e-10:
    return jnp.log1p(x)
  return nx.log1p(x, xp)


def _f32_node_bound(p, o: _Order, s2, log_q, log_1mq, log_norm, z, xp=jnp):
  """Proven bound on the float32 round-off of one node's log-integrand.

  First-order error analysis of :func:`_log_integrand_f` (branches (a), (b),
  (c)) under the model of ``_F32_TAU``, plus its square for the second-order
  terms (the bound is ≪ 1 wherever a node matters). Proof in
  docs/mathematics.md ("Float32 quadrature round-off").

  Args:
    p: the node's intermediate values (dict; names as in _log_integrand_f).
    o, s2, log_q, log_1mq, log_norm, z: as in :func:`_log_integrand_f`.

  Returns:
    Absolute bound on |computed - exact| of the node's log value (≥ 0).
  """
  U = _F32_U
  t_exp, t_log, t_l1p, t_em1 = (_F32_TAU[k] for k in ("exp", "log", "log1p", "expm1"))
  a = lambda v: xp.abs(xp.where(xp.isfinite(v), v, 0.0))
  alpha, beta = o.alpha, o.beta
  d_lq = t_log * U * a(log_q)
  rel_e = t_em1 * U + 4.0 * U * (1.0 + a(p["x"]))             # e = expm1(x), x 3-4 roundings
  rho = t_exp * U + d_lq + rel_e + U                           # u = exp(log q)·e, relative
  d_norm = (t_log + 2.0) * U * (a(log_norm) + 2.0)
  gauss = p["gauss"]
  d_gauss = 4.0 * U * gauss
  lg = p["lg"]
  d_lg_fn = t_log * U * a(lg)
  d_logu = d_lq + rel_e + t_log * U * a(p["log_abs_e"]) + U * (a(log_q) + a(p["log_abs_e"]))
  # (a) log C(α,2) + 2 log|u| + log(bracket) - z²/(2σ²) - log_norm.
  log_c2 = o.log_c2
  b_a = ((3.0 * U + t_log * U * a(log_c2)) + 2.0 * d_logu + d_lg_fn + (40.0 * U + rho / 9.0) / 0.9
         + d_gauss + d_norm
         + 4.0 * U * (a(log_c2) + 2.0 * a(p["log_abs_u"]) + a(lg) + gauss + a(log_norm)))
  # (b) log β + l + log(E - w) - z²/(2σ²) - log_norm; S = |d log f / d log u|
  # ≤ max(α + 2, 2/β) carries u's error.
  l, bl, emw = p["l"], p["bl"], p["e_minus_w"]
  sens = xp.maximum(alpha + 2.0, 2.0 * o.inv_beta)
  d_l = xp.where(p["huge"], d_logu, t_l1p * U * a(l))
  d_bl = beta * d_l + 2.0 * U * a(bl)
  abs_bl = xp.maximum(a(bl), 1e-30)
  rel_big_e = (t_em1 + 2.0) * U + d_bl * (1.0 + 1.0 / abs_bl)
  big_e = emw + p["w"]
  d_emw = a(big_e) * rel_big_e + 2.0 * U * a(p["w"]) + U * a(emw)
  d_lg_b = d_lg_fn + d_emw / xp.maximum(a(emw), 1e-30)
  b_b = (sens * rho + t_log * U * a(o.log_beta) + U + d_l + d_lg_b + d_gauss + d_norm
         + 4.0 * U * (a(o.log_beta) + a(l) + a(lg) + gauss + a(log_norm)))
  # (c) K - (z-α)²/(2σ²) + α·softplus(-t) - log_norm (recentred).
  sp = p["sp"]
  half_b = beta / (2.0 * s2)
  k_const = alpha * (log_q + half_b)
  dz = z - alpha
  shift = dz * dz / (2.0 * s2)
  c = log_q - log_1mq
  d_c = d_lq + t_l1p * U * a(log_1mq) + U * a(c)
  rel_y = t_exp * U + d_c + rel_e + 3.0 * U
  b_c = ((t_log + 2.0) * U * alpha * a(log_q) + 5.0 * U * alpha * half_b + U * a(k_const)
         + 5.0 * U * shift + alpha * sp * (t_l1p * U + rel_y + U) + d_norm
         + 3.0 * U * (a(k_const) + shift + alpha * sp + a(log_norm)))
  bound = xp.where(p["use_plain"], xp.where(p["small"], b_a, b_b), b_c)
  bound = xp.minimum(xp.where(xp.isnan(bound), xp.inf, bound), 1e15)   # finite, ≥ the bound
  return bound + bound * bound


def _logsumexp(x, axis, xp=jnp):
  m = xp.max(x, axis=axis, keepdims=True)
  m_safe = xp.where(xp.isfinite(m), m, 0.0)
  s = xp.sum(xp.exp(x - m_safe), axis=axis, keepdims=True)
  out = xp.log(s) + m_safe
  out = xp.where(m == xp.inf, xp.inf, out)
  return xp.squeeze(out, axis=axis)


# --------------------------------------------------------------------------
# Quadrature for any real order (MTZ §3.3, Case II, done differently)
# --------------------------------------------------------------------------
#
# The §3.3 series for fractional α converges only polynomially (terms decay
# like k^{-α-1}), which is why dp_accounting gives up near α → 1 and small σ.
# We instead integrate A_α - 1 directly:
#
#   A_α - 1 = ∫ φ_σ(z) f(u(z)) dz,  u(z) = q (exp((2z-1)/(2σ²)) - 1),
#   f(u) = (1+u)^α - 1 - αu ≥ 0,
#
# using E[u] = 0. The integrand is non-negative, so no cancellation, and f is
# evaluated stably in log space. The log of the plain integrand
# G(z) = -z²/(2σ²) + α log(1 - q + q e^{(2z-1)/(2σ²)}) has G'(z) = h(z)/σ² with
# h(z) = α p(z) - z, p a logistic in z of scale σ², so G has at most two
# local maxima; we locate them in closed form + bisection, bracket each by the
# points where G has dropped by _WINDOW_DROP, and apply the trapezoidal rule on
# those windows (spectrally accurate for integrands that vanish smoothly at
# the window ends).


def _plain_log_integrand(z, alpha, s2, c, xp=jnp):
  """G(z) up to an additive constant."""
  return -z * z / (2.0 * s2) + alpha * nx.softplus((2.0 * z - 1.0) / (2.0 * s2) + c, xp)


def _h(z, alpha, s2, c, xp=jnp):
  t = (2.0 * z - 1.0) / (2.0 * s2) + c
  p = jax.nn.sigmoid(t) if xp is jnp else 0.5 * (1.0 + np.tanh(0.5 * t))
  return alpha * p - z


def _bisect(fn, lo, hi, steps, xp=jnp):
  """Bracket [lo, hi] of a sign change of fn, with fn(lo) > 0 ≥ fn(hi)."""

  def body(_, carry):
    lo, hi = carry
    mid = 0.5 * (lo + hi)
    pos = fn(mid) > 0
    return xp.where(pos, mid, lo), xp.where(pos, hi, mid)

  return nx.fori_loop(0, steps, body, (lo, hi), xp)


_MODE_STEPS = 32     # modes and valley: relative precision ~α·2^-32 (anchors only)
_EDGE_STEPS = 14     # window edges, rounded outward (precision is not needed)
_HORNER_TERMS = 16   # series branch, |αu| < 0.05: terms shrink by ≥ 20× each
_LOG_BIG = 60.0      # above this, log(1 + e^t) = t to 1e-26


class _Order(NamedTuple):
  """Per-element constants of the integrand, shaped (..., 1) for the nodes."""
  alpha: jax.Array
  beta: jax.Array
  log_alpha: jax.Array
  log_beta: jax.Array
  inv_beta: jax.Array
  log_c2: jax.Array        # log C(α, 2) = log(αβ/2)
  horner: tuple            # (α - j)/(j + 1), j = 2.._HORNER_TERMS


def _order_constants(alpha, xp=jnp):
  beta = alpha - 1.0
  horner = tuple((alpha - j) / (j + 1.0) for j in range(2, _HORNER_TERMS + 1))
  return _Order(alpha, beta, xp.log(alpha), xp.log(beta), 1.0 / beta,
                xp.log(alpha * beta / 2.0), horner)


def _log_integrand_f(z, o: _Order, s2, log_q, log_1mq, log_norm, xp=jnp):
  """log(φ_σ(z) f(u(z))) for the quadrature of A_α - 1, rounded up.

  u(z) = q·expm1((2z-1)/(2σ²)) and f(u) = (1+u)^α - 1 - αu ≥ 0 (u > -1),
  evaluated stably in every regime:
  (a) |αu| < 0.05: f = C(α,2) u² (1 + (α-2)/3 u (1 + (α-3)/4 u (…))) (Horner).
  (b) otherwise: f = β(1+u)(E - w) with β = α-1, l = log1p(u), E = expm1(βl)/β
      and w = u/(1+u). Since E ≥ l ≥ w, E - w has no catastrophic
      cancellation once |αu| ≥ 0.05 — for α → 1 as well as for large α.
  (c) βl > 40: log f = αl to within e^{-40} (w ≤ 1 ≪ E); in float32
      recentred: with 1 + u = (1-q)(1 + e^t), t = (2z-1)/(2σ²) + log(q/(1-q)),
        αl - z²/(2σ²) = K - (z-α)²/(2σ²) + α·softplus(-t),
        K = α·(log q + (α-1)/(2σ²)),
      so the parts ~α²/(2σ²) and α·log q, which cancel near the high mode,
      meet once per element in K instead of at every node
      (:func:`_recentred_high`).
  Each value carries :func:`jaxdp._src.core.numerics.rounding_allowance` for its parts' magnitudes.
  """
  x = (2.0 * z - 1.0) / (2.0 * s2)
  cap = math.log(float(xp.finfo(z.dtype).max)) - 2.0   # expm1 stays finite below
  e = xp.expm1(xp.minimum(x, cap))
  log_abs_e = xp.where(x > cap, x, nx.safe_log(xp.abs(e), xp))
  log_abs_u = log_q + log_abs_e
  u = xp.exp(log_q) * e
  small = log_abs_u + o.log_alpha < math.log(0.05)
  # Past the cap e (hence u) is clipped, so l = log|u| there too: float32
  # with q < 3e-12 reaches the cap (x ≈ 87) while log|u| < 60.
  huge = (log_abs_u > _LOG_BIG) | (x > cap)
  # (a)
  us = xp.where(small, u, 0.0)
  bracket = xp.ones_like(us)
  for coef in reversed(o.horner):
    bracket = 1.0 + us * coef * bracket
  # (b)
  ub = xp.where(small | huge, 1.0, u)
  l = xp.where(huge, log_abs_u, _log1p(ub, xp))
  w = xp.where(huge, 1.0, ub / (1.0 + ub))
  bl = o.beta * l
  moderate = bl <= 40.0
  e_minus_w = xp.expm1(xp.where(moderate, bl, 0.0)) * o.inv_beta - w
  lg = nx.safe_log(xp.where(small, bracket, e_minus_w), xp)
  gauss = z * z / (2.0 * s2)
  log_f = xp.where(small, o.log_c2 + 2.0 * log_abs_u + lg, o.log_beta + l + lg)
  # Magnitudes behind each branch's rounding: (a) log|u| = log q + log|e|,
  # with e's argument x rounded; (b) u relatively off by (|log q| + |x| + 3)
  # ulps, amplified ≤ (α + 2)-fold in log f, plus E - w's conditioning (≤ 40).
  mag_a = xp.abs(o.log_c2) + 2.0 * (xp.abs(log_q) + xp.abs(log_abs_e) + xp.abs(x) + 1.0)
  mag_b = (xp.abs(o.log_beta) + xp.abs(l) + (o.alpha + 2.0) * (xp.abs(log_q) + xp.abs(x) + 3.0)
           + 80.0)
  plain = -gauss + log_f
  mag_plain = gauss + xp.abs(lg) + xp.where(small, mag_a, mag_b)
  f32 = xp.finfo(z.dtype).eps > 1e-10
  if f32:
    high, mag_high, sp = _recentred_high(z, x, e, o, s2, log_q, log_1mq, xp)
  else:
    # float64: the plain form (one exp and one log fewer per node) with
    # the allowance of its parts (~1e-11 absolute at α ~ 10⁴): l is off by
    # (|log q| + |x| + 3) ulps (from u), amplified α-fold.
    high = -gauss + o.alpha * l
    mag_high = gauss + o.alpha * (xp.abs(l) + xp.abs(log_q) + xp.abs(x) + 3.0)
  use_plain = small | moderate
  value = xp.where(use_plain, plain, high) - log_norm
  if f32:
    # Proven (first-order, see _F32_TAU) instead of the measured allowance.
    parts = dict(x=x, e=e, log_abs_e=log_abs_e, log_abs_u=log_abs_u, l=l, w=w, bl=bl,
                 e_minus_w=e_minus_w, lg=lg, gauss=gauss, sp=sp, small=small, huge=huge,
                 use_plain=use_plain)
    bound = _f32_node_bound(parts, o, s2, log_q, log_1mq, log_norm, z, xp)
    value = xp.where(value == -xp.inf, -xp.inf, value + bound)
  else:
    mag = xp.where(use_plain, mag_plain, mag_high) + xp.abs(log_norm)
    value = value + nx.rounding_allowance(mag, value, xp)
  return xp.where(log_abs_u == -xp.inf, -xp.inf, value)


def _recentred_high(z, x, e, o: _Order, s2, log_q, log_1mq, xp=jnp):
  """Branch (c) of :func:`_log_integrand_f` recentred, and its parts' magnitude.

  αl - z²/(2σ²) = K - (z-α)²/(2σ²) + α·softplus(-t), K = α·(log q + β/(2σ²)),
  with softplus(-t) = log1p(e^{-t}) and e^{-t} = ((1-q)/q)/(e + 1): there
  x > 0, so e + 1 = e^x to an ulp (clipped at the cap, sp only rounds up).
  """
  c = log_q - log_1mq
  sp = _log1p(xp.exp(-c) / (e + 1.0), xp)
  k_ab = o.alpha * xp.abs(log_q) + o.alpha * o.beta / (2.0 * s2)
  k_const = o.alpha * (log_q + o.beta / (2.0 * s2))
  dz = z - o.alpha
  shift = dz * dz / (2.0 * s2)
  # t is off by ~(|x| + |c|) ulps, moving α·softplus(-t) by α·sigmoid(-t) ≤
  # α·softplus(-t) per unit (log(1 + y) ≥ y/(1 + y)).
  abs_c = xp.where(xp.isfinite(c), xp.abs(c), 0.0)   # c = +inf at q = 1 (then sp = 0)
  return (k_const - shift + o.alpha * sp, k_ab + shift + o.alpha * sp * (xp.abs(x) + abs_c + 3.0),
          sp)


@functools.partial(jax.jit, static_argnames=("nodes",))
def _log_a_minus_1_quadrature(log_q, log_1mq, sigma, alpha, nodes=_NODES_PER_WINDOW):
  """Jitted :func:`_log_a_minus_1_quadrature_impl` (``jnp``)."""
  return _log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes)


def _log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes=_NODES_PER_WINDOW,
                                   xp=jnp):
  """log(A_α - 1) for any real α > 1 by windowed trapezoidal quadrature.

  All arguments broadcast together; see the module comment for the method.
  Relative error below 1e-12 over q ∈ [1e-8, 1], α ∈ (1, 10⁴] with 64 nodes
  per window for σ ≥ 0.3 and with 40 nodes for σ ≥ 0.5 (tests/test_rdp.py,
  tests/test_soundness.py against mpmath).

  Like the other private kernels of this module it takes the array
  namespace ``xp``: ``jnp`` (jittable, the default) or ``numpy`` (the
  no-compilation host path of one question, :mod:`jaxdp._src.kernels.host_rdp`; the
  same formulas, tested equal to ~1e-14 relative).
  """
  log_q, log_1mq, sigma, alpha = xp.broadcast_arrays(log_q, log_1mq, sigma, alpha)
  dtype = sigma.dtype
  s2 = sigma * sigma
  c = log_q - log_1mq
  alpha_b = xp.where(xp.isfinite(alpha) & (alpha > 1.0), alpha, 2.0)
  r = xp.sqrt(2.0 * _WINDOW_DROP * s2)   # G'' ≥ -1/σ²: G drops at most quadratically
  h = lambda z: _h(z, alpha_b, s2, c, xp)
  g = lambda z: _plain_log_integrand(z, alpha_b, s2, c, xp)
  zero = xp.zeros_like(alpha_b)
  mid = lambda b: 0.5 * (b[0] + b[1])
  z1 = 0.5 - s2 * c
  # Inflection points of h exist iff α > 4σ²: z_a (local min), z_m (local max).
  disc2 = xp.clip(1.0 - 4.0 * s2 / alpha_b, 0.0, 1.0)
  disc = xp.where(disc2 > 0, xp.sqrt(xp.where(disc2 > 0, disc2, 1.0)), 0.0)
  p_minus = xp.clip(0.5 * (1.0 - disc), xp.finfo(dtype).tiny, 0.5)
  logit_pm = xp.log(p_minus) - nx.log1p(-p_minus, xp)
  z_a = z1 + s2 * logit_pm
  z_m = z1 - s2 * logit_pm
  has_infl = 4.0 * s2 < alpha_b
  h_a = h(z_a)
  h_m = h(z_m)
  bimodal = has_infl & (h_a < 0) & (h_m > 0)
  # Modes of G = roots of h where it crosses downward; h(0) > 0 > h(α).
  lo_end = xp.where(has_infl & (h_a < 0), xp.maximum(z_a, zero), alpha_b)
  hi_start = xp.where(has_infl & (h_m > 0), xp.minimum(z_m, alpha_b), zero)
  # One stacked bisection for the low mode, the high mode and the valley
  # (root of -h in [z_a, z_m], meaningful only when bimodal).
  sign3 = xp.array([1.0, 1.0, -1.0], dtype).reshape((3,) + (1,) * alpha_b.ndim)
  v_lo = xp.where(bimodal, z_a, zero)
  v_hi = xp.where(bimodal, z_m, zero)
  roots = mid(_bisect(lambda z: sign3 * _h(z, alpha_b, s2, c, xp),
                      xp.stack([zero, hi_start, v_lo]), xp.stack([lo_end, alpha_b, v_hi]),
                      _MODE_STEPS, xp))
  m_lo, m_hi, valley = roots[0], roots[1], roots[2]
  m_single = xp.where(has_infl & (h_a >= 0), m_hi, m_lo)
  m_lo = xp.where(bimodal, m_lo, m_single)
  m_hi = xp.where(bimodal, m_hi, m_single)
  valley = xp.where(bimodal, valley, m_lo)
  g_lo = g(m_lo) - _WINDOW_DROP
  g_hi = g(m_hi) - _WINDOW_DROP
  # Window edges where G has dropped by _WINDOW_DROP (G is monotone on each
  # bracket), one stacked bisection, each rounded outward.
  sign4 = xp.array([-1.0, 1.0, 1.0, -1.0], dtype).reshape((4,) + (1,) * alpha_b.ndim)
  target = xp.stack([g_lo, g_hi, g_lo, g_hi])
  e_lo, e_hi = _bisect(lambda z: sign4 * (_plain_log_integrand(z, alpha_b, s2, c, xp) - target),
                       xp.stack([xp.minimum(m_lo, 0.0) - r, m_hi, m_lo, valley]),
                       xp.stack([m_lo, xp.maximum(m_hi, alpha_b) + r, valley, m_hi]),
                       _EDGE_STEPS, xp)
  left, right, in_lo, in_hi = e_lo[0], e_hi[1], e_hi[2], e_lo[3]
  # The f-integrand (A_α - 1) also has mass near z ∈ [0, 2] (the u² term)
  # that can sit below the plain integrand's threshold when A_α ≈ 1: cover
  # [-r, 2 + r] whenever the low window reaches that region (when the mass
  # sits far to the right, A_α ≫ 1 and the region is negligible).
  near = left <= 2.0 + r
  left = xp.where(near, xp.minimum(left, -r), left)
  in_lo = xp.where(near, xp.maximum(in_lo, 2.0 + r), in_lo)
  separate = bimodal & (in_lo < in_hi)
  right = xp.where(separate | ~near, right, xp.maximum(right, 2.0 + r))
  # Window A = [left, a_end], window B = [b_start, right]; merged, they form
  # one uniform grid of 2n nodes.
  n = nodes
  step_merged = (right - left) / (2 * n - 1)
  a_end = xp.where(separate, in_lo, left + (n - 1) * step_merged)
  b_start = xp.where(separate, in_hi, left + n * step_merged)
  right = xp.maximum(right, b_start)
  t = xp.linspace(0.0, 1.0, n, dtype=dtype)
  ex = lambda x: x[..., None]
  za = ex(left) + ex(a_end - left) * t
  zb = ex(b_start) + ex(right - b_start) * t
  log_ha = xp.log((a_end - left) / (n - 1))
  log_hb = xp.log((right - b_start) / (n - 1))
  o = _order_constants(ex(alpha_b), xp)
  log_norm = ex(xp.log(sigma) + 0.5 * math.log(2.0 * math.pi))
  both = _log_integrand_f(xp.concatenate([za, zb], axis=-1), o, ex(s2), ex(log_q), ex(log_1mq),
                          log_norm, xp)
  la = both[..., :n] + ex(log_ha)
  lb = both[..., n:] + ex(log_hb)
  # Trapezoid: half weight at the outer ends, and at the inner ends when the
  # windows are separate (the integrand is negligible there anyway).
  half = math.log(0.5)
  idx = xp.arange(n)
  inner_a = xp.where(ex(separate) & (idx == n - 1), half, 0.0)
  inner_b = xp.where(ex(separate) & (idx == 0), half, 0.0)
  la = la + xp.where(idx == 0, half, 0.0) + inner_a
  lb = lb + xp.where(idx == n - 1, half, 0.0) + inner_b
  # The nodes themselves are rounded (by ≲ eps·|z|): the rule then integrates
  # at shifted points, off by at most TV(integrand)·max|δz| ≤ 2·peak·eps·|z|
  # per mode, each mode carrying ≥ peak·σ·√(2π) (G'' ≥ -1/σ²).
  z_max = xp.maximum(xp.abs(left), xp.abs(right))
  shifted = nx.rounding_allowance(z_max / sigma, zero, xp)
  if xp.finfo(dtype).eps <= 1e-10:
    return _logsumexp(xp.concatenate([la, lb], axis=-1), axis=-1, xp=xp) + shifted
  # Float32: proven bounds on the weights' and the sum's round-off.
  la = la + _f32_weight_bound(la, log_ha, xp)
  lb = lb + _f32_weight_bound(lb, log_hb, xp)
  out = _logsumexp(xp.concatenate([la, lb], axis=-1), axis=-1, xp=xp)
  return out + _f32_sum_bound(out, 2 * n, xp) + shifted


def _f32_weight_bound(node, log_h, xp=jnp):
  """Float32 round-off of log h = log((b - a)/(n - 1)) and the adds of log h
  and log(1/2) to a node's value (three subtractions/divisions, one log, two
  adds)."""
  U, T = _F32_U, _F32_TAU["log"]
  lh = xp.abs(log_h)[..., None]
  fin = xp.where(xp.isfinite(node), xp.abs(node), 0.0)
  return (T + 4.0) * U * (lh + 2.0) + 2.0 * U * (fin + lh + 1.0)


def _f32_sum_bound(out, n_terms, xp=jnp):
  """Float32 round-off of the log-sum-exp of ``n_terms`` node values.

  With m the largest value and s = Σ exp(x_i - m) ≥ 1: the subtractions move
  each term by ≤ u|x_i - m| relatively (Σ_i w_i|x_i - m| ≤ N/e since
  y·e^{-y} ≤ 1/e and s ≥ 1), exp by τu, the sum of N non-negative terms in
  any order by (N - 1)u (Higham 2002, §4.2), log s by τu·log N, the final
  add by u|out| (doubled for the first-order slack).
  """
  U = _F32_U
  const = _F32_TAU["exp"] + _F32_TAU["log"] * math.log(n_terms) + n_terms + n_terms / math.e + 2.0
  return xp.where(xp.isfinite(out), U * (const + 2.0 * xp.abs(out)), 0.0)


# --------------------------------------------------------------------------
# Public kernels
# --------------------------------------------------------------------------


def _quadrature_safety(sigma, exact, dtype, nodes, xp=jnp):
  """Relative inflation covering the quadrature error (measured against a
  600-node reference over q ∈ [1e-8, 1], α ∈ (1, 10⁴], with a 10× margin).
  64 nodes/window: ≤ 1e-12 for σ ≥ 0.3, ≤ 2e-8 for σ ∈ [0.2, 0.3), ≤ 5e-7
  below. 40 nodes/window (used only when every σ ≥ 0.5): ≤ 1e-12 for
  σ ≥ 0.5 (a blunt 1e-3 allowance guards any other use). Integer orders
  (exact sums) only get the rounding factor."""
  base = _safety(dtype)
  if nodes >= _NODES_PER_WINDOW:
    extra = xp.where(sigma >= 0.3, 0.0, xp.where(sigma >= 0.2, 2e-7, 5e-6))
  else:
    extra = xp.where(sigma >= 0.5, 0.0, 1e-3)
  return xp.where(exact, base, base + extra)


def _exact_orders(alpha_np):
  """Mask of concrete orders computed by the exact binomial sum."""
  return np.isfinite(alpha_np) & (alpha_np == np.floor(alpha_np)) & (alpha_np >= 2) & (
      alpha_np <= _MAX_BINOMIAL_ORDER)


def _finish(log_am1, q, sigma, alpha, exact=False, nodes=_NODES_PER_WINDOW, xp=jnp):
  """RDP from log(A_α - 1), with the exact special cases and safety factor."""
  dtype = log_am1.dtype
  beta = alpha - 1.0
  rdp = nx.softplus(log_am1, xp) / xp.where(beta > 0, beta, 1.0)
  safety = _quadrature_safety(sigma, exact, dtype, nodes, xp)
  rdp = xp.maximum(rdp, 0.0) * safety
  # q = 1 is exact, but gets the same inflation so ε stays monotone as q → 1.
  rdp = xp.where(q == 1.0, alpha / (2.0 * sigma * sigma) * safety, rdp)
  rdp = xp.where(q == 0.0, 0.0, rdp)
  rdp = xp.where(alpha == xp.inf, xp.where(q == 0.0, 0.0, xp.inf), rdp)
  rdp = xp.where(beta > 0, rdp, xp.nan)
  return rdp.astype(dtype)


def _prep(q, sigma, xp=jnp):
  q = xp.asarray(q)
  sigma = xp.asarray(sigma)
  dtype = _float_dtype(q, sigma) if xp is jnp else np.result_type(q, sigma, np.float64)
  q = q.astype(dtype)
  sigma = sigma.astype(dtype)
  qs = xp.clip(q, 0.0, 1.0)
  log_q = nx.safe_log(qs, xp)
  log_1mq = nx.safe_log(1.0 - qs, xp)
  log_1mq = xp.where(qs < 0.5, _log1p(-xp.minimum(qs, 0.5), xp), log_1mq)
  return q, sigma, log_q, log_1mq, dtype


def sampled_gaussian(q, sigma, alpha, *, _nodes=None):
  """RDP ε(α) of one step of the Poisson-sampled Gaussian mechanism.

  ε(α) = log(A_α)/(α-1) with A_α as in the module docstring (Mironov, Talwar
  & Zhang 2019, §3). Integer orders α ≤ 4096 given as concrete values use the
  exact binomial sum (§3.3, Case I) over only the non-negative terms of
  A_α - 1; every other order (fractional, larger, or traced α) uses a windowed
  trapezoidal quadrature of A_α - 1 = E[(1+u)^α - 1 - αu] that converges for
  every (q, σ, α), including α → 1 and small σ where the §3.3 series stalls.
  Both paths agree with an mpmath reference to ~1e-12 relative in float64.

  Special values: q = 0 → 0; q = 1 → α/(2σ²); α = ∞ → ∞ (0 if q = 0);
  α ≤ 1 → NaN (undefined). Values are inflated by a relative
  max(256·eps(dtype), 4e-12) — plus a measured quadrature allowance for
  σ < 0.3 on the quadrature path (2e-7, 5e-6 below σ = 0.2) — so they are
  upper bounds despite rounding and quadrature error. Near the high mode
  the log-terms' parts α(α-1)/(2σ²) and α·log q reach ~10⁴ and cancel, so
  one ulp of log q is amplified α-fold (float32: ~1e-3 relative); each
  log-term is raised by a rounding allowance for its parts' magnitudes,
  which keeps float32 values upper bounds at the price of up to ~1% extra
  looseness there (α ≳ 1000, ``tests/test_soundness.py``); float64 gives
  up ~1e-11 at most. Float32 quadrature adds a proven bound on its
  round-off to log(A_α - 1) (``_f32_node_bound``: ≲ 2e-4 relative in RDP
  for α ≤ 100, up to ~1.6% at α ~ 4000), in place of the flat measured 2e-3
  it used to add.
  Quadrature uses 64 nodes per window, 40 when every concrete σ ≥ 0.5.

  Args:
    q: sampling rate(s) in [0, 1].
    sigma: noise multiplier(s) > 0 (noise std / L2 sensitivity).
    alpha: Rényi order(s) > 1. Concrete (NumPy/Python) orders take the fast
      exact path for integers; traced orders are supported (quadrature).

  Returns:
    Array of RDP values, the broadcast shape of ``(q, sigma, alpha)``.
  """
  if nx.is_concrete(alpha):
    alpha_np = np.asarray(alpha, np.float64)
    nodes = _nodes or _nodes_for(sigma)
    return _static_kernel(alpha_np.shape, tuple(alpha_np.ravel().tolist()), nodes)(q, sigma)
  return _traced_kernel(q, sigma, alpha, _nodes or _nodes_for(sigma))


def _nodes_for(sigma) -> int:
  """Quadrature nodes per window: fewer when every (concrete) σ ≥ 0.5."""
  if nx.is_concrete(sigma):
    s = np.asarray(sigma)
    if s.size and np.all(s >= 0.5):
      return _NODES_WIDE
  return _NODES_PER_WINDOW


@functools.lru_cache(maxsize=128)
def _static_kernel(shape, values, nodes):
  """Jitted program for one concrete order array (compiled once per shape)."""
  alpha_np = np.asarray(values, np.float64).reshape(shape)

  def run(q, sigma):
    q, sigma, log_q, log_1mq, dtype = _prep(q, sigma)
    return _sampled_gaussian_static(q, sigma, log_q, log_1mq, alpha_np, dtype, nodes)

  return jax.jit(run)


@functools.partial(jax.jit, static_argnames=("nodes",))
def _traced_kernel(q, sigma, alpha, nodes):
  return quadrature_rdp(q, sigma, alpha, nodes)


def quadrature_rdp(q, sigma, alpha, nodes, xp=jnp):
  """Per-step RDP at any real orders by quadrature (the path of traced orders).

  Args:
    q, sigma, alpha: broadcastable arrays (α > 1 real).
    nodes: quadrature nodes per window.
    xp: ``jnp`` (jittable) or ``numpy`` (host, no compilation).

  Returns:
    Rounded-up RDP values, the broadcast shape.
  """
  q, sigma, log_q, log_1mq, dtype = _prep(q, sigma, xp)
  alpha = xp.asarray(alpha).astype(dtype)
  log_am1 = _log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes, xp)
  return _finish(log_am1, q, sigma, alpha, nodes=nodes, xp=xp)


def _outer_layout(q_shape, s_shape, a_shape):
  """True when α varies only along axes where q and σ are constant."""
  k = len(a_shape)
  for shp in (q_shape, s_shape):
    tail = shp[max(len(shp) - k, 0):]
    if any(d != 1 for d in tail):
      return False
  return True


def _sampled_gaussian_static(q, sigma, log_q, log_1mq, alpha_np, dtype, nodes):
  """Concrete orders: exact sums for integer orders, bucketed by size."""
  if _outer_layout(q.shape, sigma.shape, alpha_np.shape):
    k = alpha_np.ndim
    base_shape = np.broadcast_shapes(q.shape, sigma.shape)
    lead = base_shape[:max(len(base_shape) - k, 0)]
    flat = lambda x: jnp.broadcast_to(x, base_shape).reshape(-1)
    uniq, inverse = np.unique(alpha_np.reshape(-1), return_inverse=True)
    table = _log_a_minus_1_orders(flat(log_q), flat(log_1mq), flat(sigma), uniq, nodes)
    log_am1 = table[:, inverse].reshape(lead + alpha_np.shape)
    out_shape = np.broadcast_shapes(base_shape, alpha_np.shape)
    q_b = jnp.broadcast_to(q, out_shape)
    s_b = jnp.broadcast_to(sigma, out_shape)
    alpha_b = np.broadcast_to(alpha_np, out_shape)
    return _finish(log_am1.reshape(out_shape), q_b, s_b, jnp.asarray(alpha_b, dtype),
                   _exact_orders(alpha_b), nodes)
  # General broadcasting: every element may carry its own order. Integer
  # orders are summed exactly per element (masked to α), bucketed by size;
  # all other orders share one elementwise quadrature.
  shape = np.broadcast_shapes(q.shape, sigma.shape, alpha_np.shape)
  alpha_full = np.broadcast_to(alpha_np, shape).reshape(-1)
  b = lambda x: jnp.broadcast_to(x, shape).reshape(-1)
  qf, sf, lqf, l1f = b(q), b(sigma), b(log_q), b(log_1mq)
  exact = _exact_orders(alpha_full)
  pieces, positions = [], []
  for pos in _integer_buckets(alpha_full):
    a = jnp.asarray(alpha_full[pos], dtype)
    kmax = int(alpha_full[pos].max())
    per = max(1, _CHUNK_TERMS // kmax)
    fn = lambda x, kmax=kmax: _log_a_minus_1_binomial_elementwise(*x, kmax)
    pieces.append(_map_rows(fn, (lqf[pos], l1f[pos], sf[pos], a), pos.size, per))
    positions.append(pos)
  pos = np.nonzero(~exact)[0]
  if pos.size:
    a = jnp.asarray(np.where(np.isfinite(alpha_full[pos]) & (alpha_full[pos] > 1), alpha_full[pos], 2.0), dtype)
    per = max(1, _CHUNK_TERMS // (2 * nodes))
    pieces.append(_map_rows(lambda x: _log_a_minus_1_quadrature(*x, nodes=nodes), (lqf[pos], l1f[pos], sf[pos], a),
                            pos.size, per))
    positions.append(pos)
  perm = np.empty(alpha_full.size, dtype=np.int64)
  perm[np.concatenate(positions)] = np.arange(alpha_full.size)
  log_am1 = jnp.concatenate(pieces)[perm] if pieces else jnp.zeros((0,), dtype)
  out = _finish(log_am1, qf, sf, jnp.asarray(alpha_full, dtype), exact, nodes)
  return out.reshape(shape)


def _integer_buckets(orders):
  """Index arrays of the exactly summed orders, one per non-empty size bucket."""
  exact = _exact_orders(orders)
  lo = 1
  for hi in _BUCKETS:
    sel = np.nonzero(exact & (orders > lo) & (orders <= hi))[0]
    lo = hi
    if sel.size:
      yield sel


def _log_a_minus_1_binomial_elementwise(log_q, log_1mq, sigma, alpha, kmax: int):
  """As :func:`_log_a_minus_1_binomial` with one integer order per element.

  Args:
    log_q, log_1mq, sigma, alpha: shape (E,).
    kmax: static bound on the orders (terms are masked beyond each α).
  """
  dtype = log_q.dtype
  k = jnp.arange(2, kmax + 1, dtype=dtype)[None, :]
  a = alpha[:, None]
  valid = k <= a
  rest = jnp.where(valid, a - k, 0.0)
  coef, coef_err = _log_binomial(a, k)
  terms = _binomial_terms(log_q[:, None], log_1mq[:, None], sigma[:, None], coef, rest, k,
                          coef_err=coef_err)
  return _logsumexp(jnp.where(valid, terms, -jnp.inf), axis=-1)


# Upper ends of the integer-order buckets (few buckets: each costs compile time).
_BUCKETS = (16, 64, 256, 1024, 4096)
# Work elements per chunk (≈ 32 MiB of float64 terms).
_CHUNK_TERMS = 1 << 22
# Binomial sums run fastest in cache-sized chunks (≈ 2 MiB of terms).
_CHUNK_TERMS_BINOMIAL = 1 << 18


def _map_rows(fn, xs, n, per):
  """fn over rows of xs, in chunks of ``per`` rows when n is large."""
  if n <= per:
    return fn(xs)
  return jax.lax.map(lambda row: fn(tuple(v[None] for v in row))[0], xs, batch_size=per)


def _log_a_minus_1_orders(lq, l1, s, orders, nodes):
  """log(A_α - 1) of shape (E, len(orders)) for unique concrete orders."""
  return _orders_kernel(tuple(float(o) for o in orders), nodes)(lq, l1, s)


@functools.lru_cache(maxsize=64)
def _orders_kernel(orders: tuple, nodes: int):
  """One jitted program per order set (compiled once, cached)."""
  orders = np.asarray(orders)
  return jax.jit(lambda lq, l1, s: _orders_impl(lq, l1, s, orders, nodes))


def _orders_impl(lq, l1, s, orders, nodes):
  n = lq.shape[0]
  dtype = lq.dtype
  is_int = _exact_orders(orders)
  out = [None] * len(orders)
  for sel in _integer_buckets(orders):
    bucket = orders[sel].astype(np.int64)
    per = max(1, _CHUNK_TERMS_BINOMIAL // (int(bucket.max()) * sel.size))
    fn = lambda x, bucket=bucket: _log_a_minus_1_binomial(*x, bucket)
    res = _map_rows(fn, (lq, l1, s), n, per)
    for j, i in enumerate(sel):
      out[i] = res[:, j]
  frac = np.nonzero(~is_int)[0]
  if frac.size:
    a = jnp.asarray(np.where(np.isfinite(orders[frac]), orders[frac], 2.0), dtype)
    per = max(1, _CHUNK_TERMS // (2 * nodes * frac.size))
    fn = lambda x: _log_a_minus_1_quadrature(x[0][:, None], x[1][:, None], x[2][:, None], a[None, :],
                                             nodes=nodes)
    res = _map_rows(fn, (lq, l1, s), n, per)
    for j, i in enumerate(frac):
      out[i] = res[:, j]
  return jnp.stack(out, axis=-1) if out else jnp.zeros((n, 0), dtype)


def gaussian(sigma, alpha):
  """RDP of the Gaussian mechanism: ε(α) = α/(2σ²) (Mironov 2017, Prop. 7).

  Args:
    sigma: noise multiplier(s) > 0.
    alpha: order(s) > 1.

  Returns:
    α/(2σ²), broadcast.
  """
  sigma = jnp.asarray(sigma)
  alpha = jnp.asarray(alpha)
  dtype = _float_dtype(sigma, alpha)
  return (alpha.astype(dtype) / (2.0 * sigma.astype(dtype) ** 2)) * _safety(dtype)


def sampled_gaussian_bound(q, sigma, alpha):
  """Closed-form upper bound ε(α) = 2q²α/σ² (Mironov–Talwar–Zhang, Thm 11).

  Valid when q ≤ 1/5, σ ≥ 4, α > 1 and, with L = ln(1 + 1/(q(α-1))), ::

      α ≤ σ²L/2 - 2 ln σ   and
      α ≤ (σ²L²/2 - ln 5 - 2 ln σ) / (L + ln(qα) + 1/(2σ²)).

  Returns +inf wherever these conditions fail (and 0 at q = 0).

  Args:
    q: sampling rate(s).
    sigma: noise multiplier(s).
    alpha: order(s).

  Returns:
    The bound, broadcast; ≥ ``sampled_gaussian`` wherever finite.
  """
  q, sigma, alpha = jnp.broadcast_arrays(*map(jnp.asarray, (q, sigma, alpha)))
  dtype = _float_dtype(q, sigma, alpha)
  q, sigma, alpha = (x.astype(dtype) for x in (q, sigma, alpha))
  qs = jnp.clip(q, 1e-300 if dtype == jnp.float64 else 1e-37, 1.0)
  am1 = jnp.maximum(alpha - 1.0, jnp.finfo(dtype).tiny)
  big_l = nx.log1p(1.0 / (qs * am1))
  log_s = jnp.log(sigma)
  cond1 = alpha <= 0.5 * sigma**2 * big_l - 2.0 * log_s
  denom = big_l + jnp.log(qs * alpha) + 1.0 / (2.0 * sigma**2)
  cond2 = alpha * denom <= 0.5 * sigma**2 * big_l**2 - math.log(5.0) - 2.0 * log_s
  ok = (q <= 0.2) & (sigma >= 4.0) & (alpha > 1.0) & cond1 & cond2
  val = 2.0 * q * q * alpha / (sigma * sigma)
  out = jnp.where(ok, val, jnp.inf)
  return jnp.where(q == 0.0, 0.0, out)


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------


def _conversion_inputs(rdp, orders, target, xp=jnp):
  """``rdp``, ``orders`` and the per-configuration target (δ or ε, given an
  orders axis) in the RDP values' float dtype."""
  rdp = xp.asarray(rdp)
  dtype = _float_dtype(rdp) if xp is jnp else np.float64
  return (rdp.astype(dtype), xp.asarray(orders, dtype), xp.asarray(target, dtype)[..., None],
          dtype)


def _epsilon_per_order(rdp, orders, delta, method, xp=jnp):
  """ε(α) of :func:`to_epsilon` before the minimum (non-decreasing in ``rdp``)."""
  rdp, orders, delta, dtype = _conversion_inputs(rdp, orders, delta, xp)
  am1 = orders - 1.0
  log_delta = xp.log(delta)
  if method == "classic":
    eps = rdp - log_delta / am1
  elif method == "improved":
    # ε(α) + log(1 - 1/α) - log(α)/(α-1) - log(δ)/(α-1); the order-only
    # terms are formed once per order.
    log_orders = xp.log(orders)
    log_1m = nx.log1p(-1.0 / orders, xp)
    const, const_mag = log_1m - log_orders / am1, xp.abs(log_1m) + log_orders / am1
    tail = -log_delta / am1                                   # >= 0 for δ <= 1
    eps = rdp + const + tail
    # Its terms cancel where ε is small (O(1) terms, ε ~ 1e-7: -24% in
    # float32 under the relative safety factor alone): each order's value
    # carries the terms' rounding (_numerics.rounding_allowance's constant;
    # inf stays inf, NaN becomes inf below).
    ulp = nx._ROUNDING_ULPS * float(xp.finfo(dtype).eps)
    eps = eps + ulp * (xp.abs(rdp) + const_mag + xp.abs(tail) + xp.abs(eps))
    # KL clause δ >= √(1 - e^{-ε(α)}), taken only where it holds beyond the
    # rounding of its two cancelling terms (it decides ε = 0; in float32 its
    # sign near the boundary depended on whether XLA fused δ² into the sum:
    # ε = 0 against an exact 19.14 in batches of 128): δ² + expm1(-ε(α)) >
    # 2·ulp·(δ² + |expm1(-ε(α))|), with expm1(-ε(α)) <= 0.
    sq = delta * delta
    kl_ok = sq * (1.0 - 2.0 * ulp) + xp.expm1(-rdp) * (1.0 + 2.0 * ulp) > 0
    eps = xp.where(kl_ok, 0.0, eps)
  else:
    raise ValueError(f"method must be 'improved' or 'classic'; found {method!r}.")
  return xp.where(xp.isnan(eps), xp.inf, eps), orders, dtype


def _log_delta_per_order(rdp, orders, epsilon, xp=jnp):
  """log δ(α) of :func:`to_delta` before the minimum (non-decreasing in ``rdp``)."""
  rdp, orders, epsilon, dtype = _conversion_inputs(rdp, orders, epsilon, xp)
  log_kl = 0.5 * nx.log1mexp(xp.maximum(rdp, 0.0), xp)
  log_rdp = (orders - 1.0) * (rdp - epsilon + nx.log1p(-1.0 / orders, xp)) - xp.log(orders)
  log_d = xp.minimum(log_kl, log_rdp)
  return xp.where(xp.isnan(log_d), xp.inf, log_d), dtype


def to_epsilon(rdp, orders, delta, method: str = "improved") -> Tuple[jax.Array, jax.Array]:
  """Smallest ε over orders (last axis) such that the mechanism is (ε, δ)-DP.

  ``"classic"`` (Mironov 2017, Prop. 3): ε = ε(α) + log(1/δ)/(α-1).
  ``"improved"`` (Balle et al. 2020, arXiv:2004.00010 Prop. 12; also
  Canonne–Kamath–Steinke 2020 eq. 20)::

      ε = ε(α) + log((α-1)/α) - (log δ + log α)/(α-1),

  both floored at 0; the improved one also returns 0 where the KL bound
  δ ≥ √(1 - e^{-ε(α)}) already holds (Pinsker-type bound, any α ≥ 1).

  Args:
    rdp: RDP values, orders on the last axis.
    orders: the orders, shape (n,) or broadcastable to ``rdp``.
    delta: target δ in (0, 1), broadcast against ``rdp[..., 0]``.
    method: "improved" (default) or "classic".

  Returns:
    ``(epsilon, best_order)`` with the shape of ``rdp[..., 0]``.
  """
  return _to_epsilon(rdp, orders, delta, method)


def _to_epsilon(rdp, orders, delta, method, xp=jnp):
  """:func:`to_epsilon` on either array namespace (``jnp`` or ``numpy``)."""
  eps, orders, dtype = _epsilon_per_order(rdp, orders, delta, method, xp)
  idx = xp.argmin(eps, axis=-1)
  best = xp.take_along_axis(eps, idx[..., None], axis=-1)[..., 0]
  best_order = xp.broadcast_to(orders, eps.shape)
  best_order = xp.take_along_axis(best_order, idx[..., None], axis=-1)[..., 0]
  # Round up: one ulp-scale margin so the conversion's own rounding is safe.
  best = xp.maximum(best, 0.0) * _safety(dtype)
  return best, best_order


def to_delta(rdp, orders, epsilon) -> jax.Array:
  """Smallest δ over orders (last axis) such that the mechanism is (ε, δ)-DP.

  ::

    δ = min_α min( √(1 - e^{-ε(α)}),
                   exp((α-1)(ε(α) - ε + log(1 - 1/α)) - log α) )

  (Balle et al. 2020, arXiv:2004.00010 Prop. 12, with the KL/Pinsker bound),
  capped at 1.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: the orders.
    epsilon: ε ≥ 0, broadcast against ``rdp[..., 0]``.

  Returns:
    δ with the shape of ``rdp[..., 0]``.
  """
  return _to_delta(rdp, orders, epsilon)


def _to_delta(rdp, orders, epsilon, xp=jnp):
  """:func:`to_delta` on either array namespace (``jnp`` or ``numpy``)."""
  log_d, dtype = _log_delta_per_order(rdp, orders, epsilon, xp)
  best = xp.min(log_d, axis=-1)
  return xp.minimum(xp.exp(best) * _safety(dtype), 1.0)


# --------------------------------------------------------------------------
# Conversions refined between grid orders (chord of log A_α)
# --------------------------------------------------------------------------
#
# f(α) = (α-1)·D_α = log A_α is convex in α (van Erven & Harremoës 2014,
# Cor. 2), so between two orders a < b with RDP bounds R_a, R_b the chord
#   F(α) = F_a + m·(α - a),  F_a = (a-1)R_a, F_b = (b-1)R_b, m = (F_b-F_a)/(b-a)
# bounds f from above: R(α) = F(α)/(α-1) is a valid RDP bound at every α in
# [a, b]. Written with x = α - 1, R(α) = w_a·R_a + w_b·R_b with weights
#   w_a = x_a(x_b - x)/((x_b - x_a)x),  w_b = x_b(x - x_a)/((x_b - x_a)x),
# non-negative and summing to 1 (no cancellation). The conversions along the
# chord are minimised in closed form:
# * improved ε (Balle et al. 2020, Prop. 12):
#     ε(x) = m + C/x + log x - (1 + 1/x)·log(1 + x),  C = F_a - m·x_a - log δ,
#   ε'(x) = (log(1 + x) - C)/x², so the minimiser is α* = e^C (clipped);
# * log δ(x) = F(x) - x·ε + x·log(x/(1+x)) - log(1+x) is convex with
#   derivative m - ε + log(x/(1+x)): x* = 1/expm1(m - ε) where m > ε, else b.
# α* only picks the order: any α in [a, b] gives a valid bound, evaluated by
# the ordinary per-order conversion of the chord's RDP bound there (with its
# rounding allowance), so rounding in α* cannot cost soundness.

# Relative allowance (in ulps) for the chord's weights and the final min.
_CHORD_ULPS = 16.0


def _readout_margin(dtype) -> float:
  """Final upward factor of the refined read-outs: 16 ulps, and in float64
  the 4e-12 that :func:`to_epsilon` also applies (the same number where both
  pick the same order); float32 keeps 16 ulps (2e-6), not 256 (3e-5)."""
  return 1.0 + max(_CHORD_ULPS * float(jnp.finfo(dtype).eps), 4e-12)


def _chord_rdp(rdp, orders, x_star, xp=jnp):
  """The chord's RDP bound at x* = α* - 1 in each interval, rounded up.

  Args:
    rdp: RDP values, orders on the last axis (n).
    orders: the increasing orders, shape (n,).
    x_star: α* - 1 per interval, shape (..., n - 1), inside [x_a, x_b].

  Returns:
    Shape (..., n - 1).
  """
  xa, xb = orders[:-1] - 1.0, orders[1:] - 1.0
  ra, rb = rdp[..., :-1], rdp[..., 1:]
  den = (xb - xa) * x_star
  wa = xp.maximum(xa * (xb - x_star) / den, 0.0)
  wb = xp.maximum(xb * (x_star - xa) / den, 0.0)
  # 0·inf is 0 here (an infinite end contributes only where it is weighted).
  val = xp.where(wa > 0, wa * ra, 0.0) + xp.where(wb > 0, wb * rb, 0.0)
  return val * (1.0 + _CHORD_ULPS * float(xp.finfo(val.dtype).eps))


def _chord_ends(rdp, orders):
  xa, xb = orders[:-1] - 1.0, orders[1:] - 1.0
  fa, fb = xa * rdp[..., :-1], xb * rdp[..., 1:]
  return xa, xb, fa, (fb - fa) / (xb - xa)


def to_epsilon_refined(rdp, orders, delta, xp=jnp):
  """Improved-conversion ε minimised over every real order in [min, max] of
  ``orders``: the grid values and, between neighbours, the chord bound
  (see above). Never above :func:`to_epsilon`'s grid minimum (up to its
  rounding margin); a valid (ε, δ) bound.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: 1-D increasing concrete orders > 1.
    delta: δ in (0, 1), broadcast against ``rdp[..., 0]``.
    xp: ``jnp`` (jittable) or ``numpy``.

  Returns:
    ε with the shape of ``rdp[..., 0]``, rounded up.
  """
  grid, o, dtype = _epsilon_per_order(rdp, orders, delta, "improved", xp)
  r = xp.asarray(rdp).astype(dtype)
  xa, xb, fa, m = _chord_ends(r, o)
  log_d = xp.log(xp.asarray(delta, dtype))[..., None]
  c = fa - m * xa - log_d
  x_star = xp.clip(xp.expm1(xp.minimum(c, 700.0)), xa, xb)
  x_star = xp.where(xp.isfinite(x_star), x_star, xb)
  chord = _chord_rdp(r, o, x_star, xp)
  eps_chord = _epsilon_per_order(chord, x_star + 1.0, xp.asarray(delta, dtype), "improved", xp)[0]
  best = xp.minimum(xp.min(grid, axis=-1), xp.min(eps_chord, axis=-1))
  return xp.maximum(best, 0.0) * _readout_margin(dtype)


def to_delta_refined(rdp, orders, epsilon, xp=jnp):
  """δ of :func:`to_delta` minimised over every real order in [min, max] of
  ``orders`` (grid values and the chord bound between neighbours), capped at 1.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: 1-D increasing concrete orders > 1.
    epsilon: ε ≥ 0, broadcast against ``rdp[..., 0]``.
    xp: ``jnp`` (jittable) or ``numpy``.

  Returns:
    δ with the shape of ``rdp[..., 0]``.
  """
  grid, dtype = _log_delta_per_order(rdp, orders, epsilon, xp)
  r = xp.asarray(rdp).astype(dtype)
  o = xp.asarray(orders, dtype)
  xa, xb, _, m = _chord_ends(r, o)
  e = xp.asarray(epsilon, dtype)[..., None]
  gap = m - e
  x_star = xp.where(gap > 0, 1.0 / xp.expm1(xp.clip(gap, 1e-300, 700.0)), xb)
  x_star = xp.clip(x_star, xa, xb)
  x_star = xp.where(xp.isfinite(x_star), x_star, xb)
  chord = _chord_rdp(r, o, x_star, xp)
  log_chord = _log_delta_per_order(chord, x_star + 1.0, xp.asarray(epsilon, dtype), xp)[0]
  best = xp.minimum(xp.min(grid, axis=-1), xp.min(log_chord, axis=-1))
  return xp.minimum(xp.exp(best) * _readout_margin(dtype), 1.0)


# --------------------------------------------------------------------------
# DP-SGD: T compositions of the sampled Gaussian
# --------------------------------------------------------------------------


def dpsgd_rdp(q, sigma, steps, orders=None, *, _nodes=None):
  """RDP curve of ``steps`` compositions of the sampled Gaussian.

  ε_T(α) = T·ε(α) (RDP composes additively, Mironov 2017 Prop. 1).

  Args:
    q, sigma, steps: broadcast together (shape S).
    orders: 1-D orders (default ``DEFAULT_ORDERS``).

  Returns:
    Array of shape S + (len(orders),).
  """
  orders = DEFAULT_ORDERS if orders is None else orders
  q = jnp.asarray(q)
  sigma = jnp.asarray(sigma)
  steps = jnp.asarray(steps)
  dtype = _float_dtype(q, sigma)
  per_step = sampled_gaussian(q[..., None], sigma[..., None], orders, _nodes=_nodes)
  return steps.astype(dtype)[..., None] * per_step


def dpsgd_epsilon(q, sigma, steps, delta, orders=None, method="improved", *, _nodes=None):
  """ε of DP-SGD (``steps`` sampled-Gaussian steps) at ``delta`` via RDP.

  Pure and jittable (``orders`` must be concrete); broadcasts q, sigma, steps,
  delta. See :func:`to_epsilon` for the conversion.
  """
  orders = DEFAULT_ORDERS if orders is None else orders
  curve = dpsgd_rdp(q, sigma, steps, orders, _nodes=_nodes)
  return to_epsilon(curve, orders, delta, method)[0]


def dpsgd_delta(q, sigma, steps, epsilon, orders=None, *, _nodes=None):
  """δ of DP-SGD at ``epsilon`` via RDP (pure, jittable, broadcasting)."""
  orders = DEFAULT_ORDERS if orders is None else orders
  curve = dpsgd_rdp(q, sigma, steps, orders, _nodes=_nodes)
  return to_delta(curve, orders, epsilon)
