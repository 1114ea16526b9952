"""Windowed trapezoidal quadrature of A_α - 1 for any real order, with its
proven float32 round-off bounds (MTZ §3.3, Case II, done differently).

See the section comment below for the method and docs/mathematics.md
("Float32 quadrature round-off") for the proof of :func:`_f32_node_bound`,
:func:`_f32_weight_bound` and :func:`_f32_sum_bound`. Used by
:func:`jaxdp._src.kernels.rdp.sampled_gaussian` (fractional, large or traced
orders); split out of :mod:`jaxdp._src.kernels.rdp` (moves only).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.rdp_common import log_sum_exp
from jaxdp._src.core import persist


# Quadrature nodes per window (two windows per evaluation).
NODES_PER_WINDOW = 64


# Log-integrand drop that defines a quadrature window's edges.
_WINDOW_DROP = 64.0


# Float32 quadrature: a proven a-priori round-off bound (docs/mathematics.md,
# "Float32 quadrature round-off") replaces the flat, measured 2e-3 it used to
# add. Model: + - * / correctly rounded (unit roundoff _F32_U = 2^-24, normal
# range); XLA's float32 exp, log, log1p and expm1 primitives within
# _F32_TAU[f]·u relative (the float32 nodes use no compensated formula, see
# quadrature_log1p). Measured on CPU (jax 0.10.2, dense
# sweeps over the arguments the quadrature uses,
# tests/kernels/test_rdp_float32_margin.py): exp 1.4u, log 2.0u, log1p 3.4u, expm1
# 6.4u; CUDA's libdevice documents expf 2 ulps (≤ 4u), logf/log1pf/expm1f
# 1 ulp (≤ 2u). The assumed bounds keep ≥ 2.35× over the worst measured (and
# ≥ 1.5× over libdevice). Each formula's bound counts every rounding of every
# part by magnitude, so reassociation, distribution or reciprocal rewrites by
# the compiler (which create no new cancelling intermediates) stay covered.
_F32_U = 2.0 ** -24
_F32_TAU = {"exp": 6.0, "log": 6.0, "log1p": 8.0, "expm1": 16.0}


def quadrature_log1p(x, xp=jnp):
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


def bisect_bracket(fn, lo, hi, steps, xp=jnp):
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
  l = xp.where(huge, log_abs_u, quadrature_log1p(ub, xp))
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
  sp = quadrature_log1p(xp.exp(-c) / (e + 1.0), xp)
  k_ab = o.alpha * xp.abs(log_q) + o.alpha * o.beta / (2.0 * s2)
  k_const = o.alpha * (log_q + o.beta / (2.0 * s2))
  dz = z - o.alpha
  shift = dz * dz / (2.0 * s2)
  # t is off by ~(|x| + |c|) ulps, moving α·softplus(-t) by α·sigmoid(-t) ≤
  # α·softplus(-t) per unit (log(1 + y) ≥ y/(1 + y)).
  abs_c = xp.where(xp.isfinite(c), xp.abs(c), 0.0)   # c = +inf at q = 1 (then sp = 0)
  return (k_const - shift + o.alpha * sp, k_ab + shift + o.alpha * sp * (xp.abs(x) + abs_c + 3.0),
          sp)


@functools.partial(persist.jit, static_argnames=("nodes",))
def log_a_minus_1_quadrature(log_q, log_1mq, sigma, alpha, nodes=NODES_PER_WINDOW):
  """Jitted :func:`log_a_minus_1_quadrature_impl` (``jnp``)."""
  return log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes)


def log_a_minus_1_quadrature_impl(log_q, log_1mq, sigma, alpha, nodes=NODES_PER_WINDOW,
                                   xp=jnp):
  """log(A_α - 1) for any real α > 1 by windowed trapezoidal quadrature.

  All arguments broadcast together; see the module comment for the method.
  Relative error below 1e-12 over q ∈ [1e-8, 1], α ∈ (1, 10⁴] with 64 nodes
  per window for σ ≥ 0.3 and with 40 nodes for σ ≥ 0.5 (tests/kernels/test_rdp.py,
  tests/package/test_soundness.py against mpmath).

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
  zero = xp.zeros_like(alpha_b)
  m_lo, m_hi, valley, bimodal = _modes(alpha_b, s2, c, zero, dtype, xp)
  left, right, in_lo, in_hi, separate = _window_edges(m_lo, m_hi, valley, bimodal, alpha_b, s2,
                                                      c, r, dtype, xp)
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
  la, lb = _trapezoid_logs(both, log_ha, log_hb, separate, n, xp)
  # The nodes themselves are rounded (by ≲ eps·|z|): the rule then integrates
  # at shifted points, off by at most TV(integrand)·max|δz| ≤ 2·peak·eps·|z|
  # per mode, each mode carrying ≥ peak·σ·√(2π) (G'' ≥ -1/σ²).
  z_max = xp.maximum(xp.abs(left), xp.abs(right))
  shifted = nx.rounding_allowance(z_max / sigma, zero, xp)
  if xp.finfo(dtype).eps <= 1e-10:
    return log_sum_exp(xp.concatenate([la, lb], axis=-1), axis=-1, xp=xp) + shifted
  # Float32: proven bounds on the weights' and the sum's round-off.
  la = la + _f32_weight_bound(la, log_ha, xp)
  lb = lb + _f32_weight_bound(lb, log_hb, xp)
  out = log_sum_exp(xp.concatenate([la, lb], axis=-1), axis=-1, xp=xp)
  return out + _f32_sum_bound(out, 2 * n, xp) + shifted


def _modes(alpha_b, s2, c, zero, dtype, xp=jnp):
  """The low and high modes of G and the valley between them.

  Args:
    alpha_b: orders (invalid ones replaced by 2); s2 = σ²; c = log(q/(1-q));
    zero: zeros of ``alpha_b``'s shape; dtype: the float dtype.

  Returns:
    ``(m_lo, m_hi, valley, bimodal)``: both modes equal (and the valley at
    them) where G has one mode.
  """
  h = lambda z: _h(z, alpha_b, s2, c, xp)
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
  roots = mid(bisect_bracket(lambda z: sign3 * _h(z, alpha_b, s2, c, xp),
                      xp.stack([zero, hi_start, v_lo]), xp.stack([lo_end, alpha_b, v_hi]),
                      _MODE_STEPS, xp))
  m_lo, m_hi, valley = roots[0], roots[1], roots[2]
  m_single = xp.where(has_infl & (h_a >= 0), m_hi, m_lo)
  m_lo = xp.where(bimodal, m_lo, m_single)
  m_hi = xp.where(bimodal, m_hi, m_single)
  valley = xp.where(bimodal, valley, m_lo)
  return m_lo, m_hi, valley, bimodal


def _window_edges(m_lo, m_hi, valley, bimodal, alpha_b, s2, c, r, dtype, xp=jnp):
  """Edges of the two quadrature windows, where G has dropped by
  ``_WINDOW_DROP`` from its modes (rounded outward), widened to cover the
  f-integrand's mass near z ∈ [0, 2].

  Args:
    m_lo, m_hi, valley, bimodal: from :func:`_modes`.
    alpha_b, s2, c, dtype: as in :func:`_modes`; r = √(2·_WINDOW_DROP·σ²).

  Returns:
    ``(left, right, in_lo, in_hi, separate)``: window A ends at ``in_lo`` and
    window B starts at ``in_hi`` where ``separate``.
  """
  g = lambda z: _plain_log_integrand(z, alpha_b, s2, c, xp)
  g_lo = g(m_lo) - _WINDOW_DROP
  g_hi = g(m_hi) - _WINDOW_DROP
  # Window edges where G has dropped by _WINDOW_DROP (G is monotone on each
  # bracket), one stacked bisection, each rounded outward.
  sign4 = xp.array([-1.0, 1.0, 1.0, -1.0], dtype).reshape((4,) + (1,) * alpha_b.ndim)
  target = xp.stack([g_lo, g_hi, g_lo, g_hi])
  e_lo, e_hi = bisect_bracket(lambda z: sign4 * (_plain_log_integrand(z, alpha_b, s2, c, xp) - target),
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
  return left, right, in_lo, in_hi, separate


def _trapezoid_logs(both, log_ha, log_hb, separate, n, xp=jnp):
  """Log trapezoid terms of the two windows' ``2n`` node values ``both``.

  Half weight at the outer ends, and at the inner ends when the windows are
  separate (the integrand is negligible there anyway).

  Returns:
    ``(la, lb)``, each of shape (..., n).
  """
  ex = lambda x: x[..., None]
  la = both[..., :n] + ex(log_ha)
  lb = both[..., n:] + ex(log_hb)
  half = math.log(0.5)
  idx = xp.arange(n)
  inner_a = xp.where(ex(separate) & (idx == n - 1), half, 0.0)
  inner_b = xp.where(ex(separate) & (idx == 0), half, 0.0)
  la = la + xp.where(idx == 0, half, 0.0) + inner_a
  lb = lb + xp.where(idx == n - 1, half, 0.0) + inner_b
  return la, lb


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
