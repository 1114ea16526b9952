"""Privacy profiles δ(ε), hockey-stick divergences and amplification by subsampling.

The privacy profile of a mechanism M is δ_M(ε) = sup_{x≃x'} D_{e^ε}(M(x)‖M(x'))
with the hockey-stick (α-)divergence D_α(μ‖μ') = sup_E μ(E) - α μ'(E)
(Balle, Barthe & Gaboardi, "Privacy Amplification by Subsampling: Tight
Analyses via Couplings and Divergences", NeurIPS 2018, §2–§5). M is (ε, δ)-DP
iff δ_M(ε) ≤ δ (their Thm 1).

Every public function here is a pure kernel: jittable, vmappable, broadcasting
its array arguments together like ``jax.scipy.special`` and computing in the
dtype of its inputs (float64 under ``jax.enable_x64``, float32 otherwise).
Concrete (non-traced) arguments are validated and bad values raise
``ValueError`` naming the argument; traced arguments are not checked.

Soundness: every δ, ε' and δ' returned is rounded *up* by a small a-priori
bound on its floating-point error (a few ulps of the quantities that cancel),
and every calibrated σ is rounded up, so results are upper bounds on the exact
values, not merely close to them.

Accuracy: the Gaussian profile is evaluated in log space through the log Mills
ratio log(Φ(x)/φ(x)) (``log_ndtr`` above -5, Laplace's continued fraction
below), so the cancellation between the two Φ terms of Thm 4 happens on O(1)
numbers instead of on log Φ ≈ -10⁴; relative accuracy is ~1e-13 in the body
and log δ stays accurate far below the float64 underflow (δ ≪ 1e-300).

Hockey-stick divergences of explicit distributions, amplification by
subsampling and the randomized-response / randomized-membership profiles are
in :mod:`jaxdp._src.kernels.profiles_amplify` (also in ``jaxdp.profiles``).
"""

from __future__ import annotations

import importlib  # scipy.special (~0.3 s): imported where the host branch runs
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import persist

__all__ = ["gaussian", "gaussian_log_delta", "gaussian_epsilon", "gaussian_group", "laplace",
           "laplace_log_delta", "laplace_group", "sampled_gaussian", "sampled_gaussian_log_delta",
           "analytic_gaussian_sigma"]

# Below this argument the log Mills ratio uses the continued fraction.
_CF_SWITCH = 5.0
# Continued-fraction depth: full float64 precision for x <= -5 (checked
# against mpmath in tests/kernels/test_profiles.py).
_CF_TERMS = 32
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# A-priori error allowance, in ulps of the magnitudes involved.
_ERR_ULPS = 16.0
# Fixed iteration count of the safeguarded Newton solvers (jit-friendly).
_SOLVER_STEPS = 48

_DIRECTIONS = ("max", "remove", "add")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _float_dtype_lists_as_arrays(*xs):
  """:func:`jaxdp._src.kernels.rdp_common.result_float_dtype`, with Python
  lists and tuples read as arrays (to the user they are; result_type rejects them)."""
  xs = [np.asarray(x) if isinstance(x, (list, tuple)) else x for x in xs]
  dt = jnp.result_type(*xs)
  return dt if jnp.issubdtype(dt, jnp.floating) else jnp.result_type(float)


def _as_float(*xs):
  dtype = _float_dtype_lists_as_arrays(*xs)
  return tuple(jnp.asarray(x).astype(dtype) for x in xs) + (dtype,)


def _ulp(dtype) -> float:
  return float(jnp.finfo(dtype).eps)


def _up(x, dtype, ulps=4.0):
  """Rounds a non-negative quantity up by ``ulps`` relative ulps."""
  return x * (1.0 + ulps * _ulp(dtype))


def _check_epsilon(epsilon, name="epsilon"):
  nx.check_array(name, epsilon, low=0.0, allow_inf=True)


def _check_target_delta(delta, name="delta"):
  nx.check_array(name, delta, low=0.0, high=1.0, low_open=True, high_open=True)


def _check_positive(name, value):
  nx.check_array(name, value, low=0.0, low_open=True)


def _log_mills_cf(x, xp=jnp):
  """log R(x) = log(Φ(x)/φ(x)) for x ≤ -5 by Laplace's continued fraction.

  Φ(-y)/φ(y) = 1/(y + 1/(y + 2/(y + 3/(y + …)))) for y > 0, evaluated
  backwards (stable for positive partial numerators).
  """
  y = -x
  t = y
  for k in range(_CF_TERMS, 0, -1):
    t = y + k / t
  return -xp.log(t)


_LOG_MILLS_AT_SWITCH = float(_log_mills_cf(np.float64(-_CF_SWITCH), np))


def _log_mills_cf_host(x):
  """:func:`_log_mills_cf` in NumPy, evaluated only where x < -_CF_SWITCH
  (elsewhere the callers read nothing of it; its value at -_CF_SWITCH)."""
  out = np.full(np.shape(x), _LOG_MILLS_AT_SWITCH)
  tail = x < -_CF_SWITCH
  if np.any(tail):
    out[tail] = _log_mills_cf(x[tail], np)
  return out


def _gaussian_parts(epsilon, theta, xp=jnp):
  """Pieces of the Gaussian profile of Thm 4 in log space.

  With a = θ/2 - ε/θ and b = -θ/2 - ε/θ, δ = Φ(a) - e^ε Φ(b) = Φ(a)(1 - e^{-d})
  where d = log R(a) - log R(b) ≥ 0 and R = Φ/φ is the Mills ratio (because
  e^ε φ(b) = φ(a) exactly).

  Returns:
    (log_delta_upper, log_phi_a, log_mills_a, d): the rounded-up log δ, log Φ(a),
    log R(a) and d (the last three without rounding, for Newton steps).
    ``xp``: ``jnp``, or ``numpy`` (SciPy's log_ndtr) for host evaluation.
  """
  dtype = epsilon.dtype
  ulp = _ulp(dtype)
  pos = theta > 0
  th = xp.where(pos, theta, 1.0)
  e = xp.where(xp.isfinite(epsilon), epsilon, 0.0)
  a = 0.5 * th - e / th
  b = -0.5 * th - e / th
  a_tail = a <= -_CF_SWITCH
  b_tail = b <= -_CF_SWITCH
  # Double-where: every branch sees a safe argument (finite gradients).
  a_cf = xp.where(a_tail, a, -_CF_SWITCH)
  b_cf = xp.where(b_tail, b, -_CF_SWITCH)
  a_nd = xp.where(a_tail, -_CF_SWITCH, a)
  b_nd = xp.where(b_tail, -_CF_SWITCH, b)
  lr_a_cf = _log_mills_cf(a_cf, xp) if xp is jnp else _log_mills_cf_host(a_cf)
  lr_b_cf = _log_mills_cf(b_cf, xp) if xp is jnp else _log_mills_cf_host(b_cf)
  lndtr = log_ndtr if xp is jnp else importlib.import_module("scipy.special").log_ndtr
  ln_a = lndtr(a_nd)
  ln_b = lndtr(b_nd)
  la = xp.where(a_tail, -0.5 * a_cf * a_cf - _LOG_SQRT_2PI + lr_a_cf, ln_a)
  lr_a = xp.where(a_tail, lr_a_cf, ln_a + 0.5 * a_nd * a_nd + _LOG_SQRT_2PI)
  d_body = ln_a - ln_b - e
  d_tail = lr_a - lr_b_cf
  d = xp.maximum(xp.where(b_tail, d_tail, d_body), 0.0)
  mag = xp.where(b_tail, xp.abs(lr_a) + xp.abs(lr_b_cf),
                  xp.abs(ln_a) + xp.abs(ln_b) + xp.abs(e))
  d_up = d + _ERR_ULPS * ulp * (1.0 + mag)
  # Rounding of a itself (relative ulp of θ/2 + ε/θ) moves log Φ(a) by |a|·Δa.
  a_neg = xp.abs(xp.minimum(a, 0.0))
  la_up = la + _ERR_ULPS * ulp * (1.0 + xp.abs(la) + a_neg * (0.5 * th + e / th))
  log_delta = xp.minimum(la_up + nx.log1mexp(d_up, xp), 0.0)
  log_delta = xp.where(pos & (epsilon < xp.inf), log_delta, -xp.inf)
  log_delta = xp.where(theta == xp.inf, 0.0, log_delta)
  return log_delta, la, lr_a, d


def _gaussian_log_delta(epsilon, theta, xp=jnp):
  return _gaussian_parts(epsilon, theta, xp)[0]


_gaussian_log_delta_jit = persist.jit(_gaussian_log_delta)


# --------------------------------------------------------------------------
# Gaussian mechanism (Thm 4)
# --------------------------------------------------------------------------


def gaussian_log_delta(epsilon, sigma, sensitivity=1.0):
  """log δ(ε) of the Gaussian mechanism, accurate far below underflow.

  See :func:`gaussian`. Returns -inf where δ = 0 (ε = ∞).
  """
  _check_epsilon(epsilon)
  _check_positive("sigma", sigma)
  _check_positive("sensitivity", sensitivity)
  nx.check_same_shape(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity)
  epsilon, sigma, sensitivity, _ = _as_float(epsilon, sigma, sensitivity)
  return _gaussian_log_delta_jit(epsilon, sensitivity / sigma)


def gaussian(epsilon, sigma, sensitivity=1.0):
  """Privacy profile δ(ε) of the Gaussian mechanism f(x) + N(0, σ² I).

  δ(ε) = Φ(θ/2 - ε/θ) - e^ε Φ(-θ/2 - ε/θ),  θ = Δ/σ
  (Balle & Wang 2018; Thm 4 of Balle, Barthe & Gaboardi 2018). Computed in
  log space (see the module docstring) and rounded up.

  Args:
    epsilon: ε ≥ 0 (∞ allowed, giving 0).
    sigma: noise standard deviation σ > 0.
    sensitivity: L2 sensitivity Δ > 0.

  Returns:
    δ(ε), broadcast shape of the arguments.

  Raises:
    ValueError: for ε < 0, σ ≤ 0 or Δ ≤ 0 (concrete arguments only).
  """
  return jnp.exp(gaussian_log_delta(epsilon, sigma, sensitivity))


def gaussian_group(epsilon, sigma, k, sensitivity=1.0):
  """White-box k-th group-privacy profile δ_{M,k}(ε) of the Gaussian mechanism.

  Changing k records moves f by at most kΔ (triangle inequality), so
  δ_{M,k}(ε) = δ_Gauss(ε; σ, kΔ) (Balle, Barthe & Gaboardi 2018, §3,
  "Group-privacy profiles"); feeds :func:`amplify_with_replacement`.

  Args:
    epsilon: ε ≥ 0.
    sigma: σ > 0.
    k: group size(s), whole numbers ≥ 1.
    sensitivity: Δ > 0 for one record.
  """
  nx.check_array("k", k, low=1.0, integer=True)
  _check_positive("sensitivity", sensitivity)
  k_, s_, _ = _as_float(k, sensitivity)
  return gaussian(epsilon, sigma, k_ * s_)


def gaussian_epsilon(delta, sigma, sensitivity=1.0):
  """Smallest ε with δ_Gauss(ε) ≤ δ: the inverse of :func:`gaussian`.

  Safeguarded Newton on f(ε) = log δ(ε) - log δ_target (f' = -1/expm1(d)),
  started at the tail bound ε₀ = θ²/2 + θ√(2 log(1/δ)) (where
  δ(ε₀) ≤ Φ(-√(2 log 1/δ)) ≤ δ/2), bracketed, with a fixed iteration count.
  The answer is the best point found with computed δ(ε) ≤ target, so the
  result is conservative: δ(ε) ≤ target holds for the returned ε.

  Args:
    delta: target δ in (0, 1).
    sigma: σ > 0.
    sensitivity: Δ > 0.

  Returns:
    ε ≥ 0 (0 where δ(0) ≤ target already).
  """
  _check_target_delta(delta)
  _check_positive("sigma", sigma)
  _check_positive("sensitivity", sensitivity)
  nx.check_same_shape(delta=delta, sigma=sigma, sensitivity=sensitivity)
  return _gaussian_epsilon_core(*_as_float(delta, sigma, sensitivity)[:3])


@persist.jit
def _gaussian_epsilon_core(delta, sigma, sensitivity):
  dtype = delta.dtype
  delta, sigma, sensitivity = jnp.broadcast_arrays(delta, sigma, sensitivity)
  theta = sensitivity / sigma
  log_target = jnp.log(delta)

  def f(e):
    ld, _, _, d = _gaussian_parts(e, theta)
    return ld - log_target, d

  zero = jnp.zeros_like(theta)
  f0, _ = f(zero)
  s = jnp.sqrt(-2.0 * log_target)
  hi = theta * (0.5 * theta + s)
  lo = zero

  def body(_, state):
    x, lo, hi = state
    fx, d = f(x)
    feas = fx <= 0
    hi = jnp.where(feas, jnp.minimum(hi, x), hi)
    lo = jnp.where(feas, lo, jnp.maximum(lo, x))
    x_new = x + fx * jnp.expm1(d)
    ok = (x_new > lo) & (x_new < hi) & jnp.isfinite(x_new)
    x_new = jnp.where(ok, x_new, 0.5 * (lo + hi))
    return x_new, lo, hi

  x, lo, hi = jax.lax.fori_loop(0, _SOLVER_STEPS, body, (hi, lo, hi))
  fx, _ = f(x)
  hi = jnp.where(fx <= 0, jnp.minimum(hi, x), hi)
  return jnp.where(f0 <= 0, 0.0, hi).astype(dtype)


def analytic_gaussian_sigma(epsilon, delta, sensitivity=1.0):
  """Analytic Gaussian mechanism: smallest σ with δ_Gauss(ε; σ, Δ) ≤ δ.

  Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy:
  Analytical Calibration and Optimal Denoising" (ICML 2018), Thm 8 / Alg. 1,
  solved directly on the exact profile (Thm 4): safeguarded Newton on
  u = log θ, θ = Δ/σ, for f(u) = log δ(ε; θ) - log δ_target, using
  ∂δ/∂θ = φ(θ/2 - ε/θ). It starts from the feasible point
  θ₀ = max(√(2 log(1/δ) + 2ε) - √(2 log(1/δ)), √(2π)·δ), keeps the largest
  feasible θ found, and returns σ = Δ/θ rounded up, so δ(ε; σ) ≤ target.

  Valid for every ε ≥ 0 (unlike the classical σ = Δ√(2 log(1.25/δ))/ε, which
  needs ε < 1 and is larger).

  Args:
    epsilon: ε ≥ 0.
    delta: target δ in (0, 1).
    sensitivity: L2 sensitivity Δ > 0.

  Returns:
    σ, broadcast shape of the arguments.
  """
  _check_epsilon(epsilon)
  _check_target_delta(delta)
  _check_positive("sensitivity", sensitivity)
  nx.check_same_shape(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
  return _analytic_gaussian_core(*_as_float(epsilon, delta, sensitivity)[:3])


@persist.jit
def _analytic_gaussian_core(epsilon, delta, sensitivity):
  dtype = epsilon.dtype
  epsilon, delta, sensitivity = jnp.broadcast_arrays(epsilon, delta, sensitivity)
  log_target = jnp.log(delta)
  s = jnp.sqrt(-2.0 * log_target)
  # Both starting points are feasible with a factor-2 margin on δ, so they
  # stay feasible after rounding: Φ(-s) ≤ δ/2, and δ(0; θ) ≤ θ/√(2π).
  th_tail = 2.0 * epsilon / (s + jnp.sqrt(s * s + 2.0 * epsilon))
  th_small = 0.5 * math.sqrt(2.0 * math.pi) * delta
  lo = jnp.log(jnp.maximum(th_tail, th_small))
  hi = jnp.full_like(lo, jnp.inf)

  def f(u):
    theta = jnp.exp(u)
    ld, la, lr_a, d = _gaussian_parts(epsilon, theta)
    slope = theta * jnp.exp(-lr_a - nx.log1mexp(jnp.maximum(d, 1e-300)))
    return ld - log_target, slope

  def body(_, state):
    x, lo, hi = state
    fx, fp = f(x)
    feas = fx <= 0
    lo = jnp.where(feas, jnp.maximum(lo, x), lo)
    hi = jnp.where(feas, hi, jnp.minimum(hi, x))
    step = -fx / jnp.where(fp > 0, fp, 1.0)
    x_new = x + jnp.clip(step, -8.0, 8.0)
    ok = (x_new > lo) & (x_new < hi) & jnp.isfinite(x_new)
    fallback = jnp.where(jnp.isfinite(hi), 0.5 * (lo + hi), lo + 1.0)
    return jnp.where(ok, x_new, fallback), lo, hi

  x, lo, hi = jax.lax.fori_loop(0, _SOLVER_STEPS, body, (lo, lo, hi))
  fx, _ = f(x)
  lo = jnp.where(fx <= 0, jnp.maximum(lo, x), lo)
  sigma = sensitivity * jnp.exp(-lo)
  return _up(sigma, dtype).astype(dtype)


# --------------------------------------------------------------------------
# Laplace mechanism (Thm 3)
# --------------------------------------------------------------------------


def laplace_log_delta(epsilon, b, sensitivity=1.0):
  """log δ(ε) of the Laplace mechanism; -inf where δ = 0. See :func:`laplace`."""
  _check_epsilon(epsilon)
  _check_positive("b", b)
  _check_positive("sensitivity", sensitivity)
  nx.check_same_shape(epsilon=epsilon, b=b, sensitivity=sensitivity)
  epsilon, b, sensitivity, dtype = _as_float(epsilon, b, sensitivity)
  ulp = _ulp(dtype)
  theta = _up(sensitivity / b, dtype)
  e = jnp.where(jnp.isfinite(epsilon), epsilon, 0.0)
  x = 0.5 * (theta - e)
  pos = (x > 0) & jnp.isfinite(epsilon)
  x_up = jnp.where(pos, x + 4.0 * ulp * (theta + e), 1.0)
  return jnp.where(pos, nx.log1mexp(x_up), -jnp.inf)


def laplace(epsilon, b, sensitivity=1.0):
  """Privacy profile of the Laplace mechanism f(x) + Lap(b).

  δ(ε) = [1 - exp((ε - θ)/2)]_+ with θ = Δ/b (Balle, Barthe & Gaboardi 2018,
  Thm 3): pure (θ, 0)-DP, and (ε, δ(ε))-DP for ε < θ.

  Args:
    epsilon: ε ≥ 0.
    b: Laplace scale b > 0.
    sensitivity: L1 sensitivity Δ > 0.
  """
  return jnp.exp(laplace_log_delta(epsilon, b, sensitivity))


def laplace_group(epsilon, b, k, sensitivity=1.0):
  """White-box k-th group-privacy profile of the Laplace mechanism (sensitivity kΔ)."""
  nx.check_array("k", k, low=1.0, integer=True)
  _check_positive("sensitivity", sensitivity)
  k_, s_, _ = _as_float(k, sensitivity)
  return laplace(epsilon, b, k_ * s_)


# --------------------------------------------------------------------------
# Poisson-sampled Gaussian, one step
# --------------------------------------------------------------------------


def sampled_gaussian_log_delta(epsilon, q, sigma, direction="max"):
  """log δ(ε) of one Poisson-sampled Gaussian step. See :func:`sampled_gaussian`."""
  check_sampled_gaussian(epsilon, q, sigma, direction)
  return _sampled_gaussian_core(*_as_float(epsilon, q, sigma)[:3], direction=direction)


def check_sampled_gaussian(epsilon, q, sigma, direction):
  """:func:`sampled_gaussian`'s arguments: ValueError naming a bad one."""
  if direction not in _DIRECTIONS:
    raise ValueError(f"direction must be one of {_DIRECTIONS}; found {direction!r}.")
  _check_epsilon(epsilon)
  nx.check_array("q", q, low=0.0, high=1.0)
  _check_positive("sigma", sigma)
  nx.check_same_shape(epsilon=epsilon, q=q, sigma=sigma)


def _sampled_gaussian_log_delta(epsilon, q, sigma, direction, xp=jnp):
  """log δ(ε) of :func:`sampled_gaussian` on either array namespace (``jnp``
  traced, or ``numpy`` on the host: the guards of :mod:`jaxdp._src.kernels.guards`)."""
  ulp = _ulp(epsilon.dtype)
  theta = 1.0 / sigma
  qpos = q > 0
  qs = xp.where(qpos, q, 1.0)
  lq = xp.log(qs)
  e = xp.where(xp.isfinite(epsilon), epsilon, 0.0)
  finite = xp.isfinite(epsilon) & qpos
  out = []
  if direction in ("max", "remove"):
    # Remove: D(q N(1,σ²) + (1-q) N(0,σ²) ‖ N(0,σ²)) = q δ_G(t) with
    # e^t = 1 + (e^ε - 1)/q -- Thm 8 with the Gaussian profile, tight.
    t = nx.softplus(nx.log_expm1(e, xp) - lq, xp)
    t = t * (1.0 - 8.0 * ulp)
    lr = lq + _gaussian_log_delta(t, theta, xp)
    out.append(xp.where(finite, lr, -xp.inf))
  if direction in ("max", "add"):
    # Add: D(N(0,σ²) ‖ q N(1,σ²) + (1-q) N(0,σ²)) = q e^{ε-r} δ_G(r) with
    # e^{-r} = 1 - (1 - e^{-ε})/q, zero once ε ≥ -log(1-q).
    # u = q e^{-r} = e^{-ε} - (1 - q): for q ≥ 1/2, 1 - q is exact (Sterbenz);
    # for q < 1/2, q + expm1(-ε) avoids the rounding of 1 - q.
    em = xp.expm1(-e)
    big_q = qs >= 0.5
    u = xp.where(big_q, xp.exp(-e) - (1.0 - qs), qs + em)
    err_u = 2.0 * ulp * xp.where(big_q, xp.exp(-e) + xp.abs(u), qs - em)
    active = finite & (u > 0)
    us = xp.where(active, u, 1.0)
    r = xp.where(active, lq - xp.log(us), 0.0)
    r = xp.where(active & (e == 0), 0.0, r)
    dr = err_u / us + 4.0 * ulp * (1.0 + xp.abs(r) + xp.abs(lq))
    r = xp.maximum(r - dr, 0.0)
    la = lq + e - r + _gaussian_log_delta(r, theta, xp)
    out.append(xp.where(active, xp.minimum(la, 0.0), -xp.inf))
  return out[0] if len(out) == 1 else xp.maximum(out[0], out[1])


_sampled_gaussian_core = persist.jit(_sampled_gaussian_log_delta, static_argnames=("direction", "xp"))


def sampled_gaussian(epsilon, q, sigma, direction="max"):
  """Exact δ(ε) of ONE step of the Poisson-sampled Gaussian mechanism.

  Add/remove-one neighbours, L2 sensitivity 1, noise multiplier σ, sampling
  rate q. The privacy loss of each direction is monotone, so each is a closed
  form in Φ through the Gaussian profile δ_G(·; θ = 1/σ) of Thm 4:

  * remove, D(q N(1,σ²) + (1-q) N(0,σ²) ‖ N(0,σ²)) = q · δ_G(t),
    e^t = 1 + (e^ε - 1)/q (Thm 8 applied to the Gaussian, which attains it);
  * add, D(N(0,σ²) ‖ q N(1,σ²) + (1-q) N(0,σ²)) = (1 - (1-q)e^ε) · δ_G(r),
    e^{-r} = 1 - (1 - e^{-ε})/q, and 0 for ε ≥ -log(1-q).

  These are dp_accounting's ``GaussianPrivacyLoss(..., sampling_prob=q)``
  REMOVE / ADD hockey-stick divergences, evaluated in log space.

  Args:
    epsilon: ε ≥ 0.
    q: sampling rate in [0, 1].
    sigma: noise multiplier σ > 0.
    direction: "max" (default, the profile), "remove" or "add".

  Returns:
    δ(ε), rounded up; broadcast shape of (ε, q, σ).
  """
  return jnp.exp(sampled_gaussian_log_delta(epsilon, q, sigma, direction))


