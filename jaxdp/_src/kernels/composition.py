"""Composition theorems for (ε, δ)-DP mechanisms.

* :func:`basic` — k-fold composition adds ε and δ (Dwork et al.; Theorem 1 of
  the advanced-composition notes).
* :func:`advanced` — Dwork–Rothblum 2016, Thm 1.1 (halves the expected-loss
  term of Dwork–Rothblum–Vadhan 2010 / Theorem 2 of the notes).
* :func:`advanced_heterogeneous` — the same for a sequence of (ε_i, δ_i).
* :func:`optimal_homogeneous_delta` / :func:`optimal_homogeneous_epsilon` —
  the exact (optimal) k-fold composition of (ε, δ)-DP mechanisms
  (Kairouz–Oh–Viswanath 2015, Thm 3.3, evaluated at any ε_g).

All functions broadcast their array arguments together. On concrete inputs
they validate (``ValueError`` naming the argument and the value), compute in
float64 and return NumPy; :func:`basic`, :func:`advanced` and
:func:`advanced_heterogeneous` are also pure JAX kernels on traced inputs.
Results round toward more privacy loss; δ is capped at 1.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.kernels.cdp_common import dual_mode, common_float
from jaxdp._src.core import persist

__all__ = [
    "basic",
    "advanced",
    "advanced_heterogeneous",
    "optimal_homogeneous_delta",
    "optimal_homogeneous_epsilon",
]


def _check_eps_delta(epsilon, delta):
  _numerics.check_array("epsilon", epsilon, low=0.0)
  _numerics.check_array("delta", delta, low=0.0, high=1.0)


@dual_mode
def basic(epsilon, delta, k):
  """Basic composition: k adaptive (ε, δ)-DP mechanisms are (kε, kδ)-DP.

  Args:
    epsilon: per-mechanism ε >= 0.
    delta: per-mechanism δ in [0, 1].
    k: number of mechanisms (whole number >= 0).

  Returns:
    ``(k*epsilon, min(k*delta, 1))``.
  """
  _check_eps_delta(epsilon, delta)
  _numerics.check_array("k", k, low=0.0, integer=True)
  _numerics.check_same_shape(epsilon=epsilon, delta=delta, k=k)
  epsilon, delta, k = common_float(epsilon, delta, k)
  # One rounding each: step one ulp up so the result is never below kε, kδ.
  up = lambda x: jnp.nextafter(x, jnp.inf)
  return up(k * epsilon), jnp.minimum(up(k * delta), 1.0)


@dual_mode
def advanced(epsilon, delta, k, delta_slack):
  """Advanced composition (Dwork–Rothblum 2016, Thm 1.1).

  k adaptive (ε, δ)-DP mechanisms are (ε', kδ + δ_slack)-DP with

      ε' = √(2k ln(1/δ_slack))·ε + kε(e^ε − 1)/2.

  Args:
    epsilon: per-mechanism ε >= 0.
    delta: per-mechanism δ in [0, 1].
    k: number of mechanisms (whole number >= 0).
    delta_slack: the extra δ' in (0, 1].

  Returns:
    ``(epsilon_total, delta_total)`` (δ capped at 1).
  """
  _check_eps_delta(epsilon, delta)
  _numerics.check_array("k", k, low=0.0, integer=True)
  _numerics.check_array("delta_slack", delta_slack, low=0.0, high=1.0,
                        low_open=True)
  _numerics.check_same_shape(epsilon=epsilon, delta=delta, k=k, delta_slack=delta_slack)
  epsilon, delta, k, delta_slack = common_float(epsilon, delta, k, delta_slack)
  log_inv = jnp.maximum(-jnp.log(delta_slack), 0.0)
  eps_total = (jnp.sqrt(2.0 * k * log_inv) * epsilon
               + 0.5 * k * epsilon * jnp.expm1(epsilon))
  # A handful of roundings: rounded up by 16 ulps so the bound is never below.
  return (_numerics.round_up(eps_total, 16),
          jnp.minimum(_numerics.round_up(k * delta + delta_slack, 16), 1.0))


@dual_mode
def advanced_heterogeneous(epsilon, delta, delta_slack, axis=-1):
  """Advanced composition of a sequence of (ε_i, δ_i)-DP mechanisms.

      ε' = √(2 ln(1/δ_slack) Σ ε_i²) + Σ ε_i(e^{ε_i} − 1)/2,
      δ' = Σ δ_i + δ_slack.

  Derivation: each (ε_i, 0)-DP mechanism is (ε_i(e^{ε_i} − 1)/2, ε_i)-CDP
  (Dwork–Rothblum 2016, Thm 3.5); CDP composes by adding μ and τ²
  (Thm 3.4); Cor 3.1 bounds the loss tail by δ_slack. The δ_i are handled
  as in the proof of Thm 1.1 (condition on every mechanism's good event).
  With all ε_i equal it reduces to :func:`advanced`.

  Args:
    epsilon: ε_i >= 0, the mechanisms indexed along ``axis``.
    delta: δ_i in [0, 1], broadcasting with ``epsilon``.
    delta_slack: δ' in (0, 1], broadcasting with the reduced shape.
    axis: the axis (or axes) indexing the composed mechanisms.

  Returns:
    ``(epsilon_total, delta_total)`` with ``axis`` reduced (δ capped at 1).
  """
  _check_eps_delta(epsilon, delta)
  _numerics.check_array("delta_slack", delta_slack, low=0.0, high=1.0,
                        low_open=True)
  _numerics.check_same_shape(epsilon=epsilon, delta=delta)
  epsilon, delta, delta_slack = common_float(epsilon, delta, delta_slack)
  epsilon, delta = jnp.broadcast_arrays(epsilon, delta)
  log_inv = jnp.maximum(-jnp.log(delta_slack), 0.0)
  sq = jnp.sum(epsilon * epsilon, axis=axis)
  mean = 0.5 * jnp.sum(epsilon * jnp.expm1(epsilon), axis=axis)
  eps_total = jnp.sqrt(2.0 * log_inv * sq) + mean
  # Sums of n non-negative terms (within (n - 1) half-ulps relative in any
  # order) and a handful of roundings: rounded up (float32 was 3 ulp low).
  n = max(epsilon.size // max(eps_total.size, 1), 1)
  ulps = 0.5 * n + 16
  delta_total = _numerics.round_up(jnp.sum(delta, axis=axis) + delta_slack, ulps)
  return _numerics.round_up(eps_total, ulps), jnp.minimum(delta_total, 1.0)


# --------------------------------------------------------------------------
# Kairouz–Oh–Viswanath optimal homogeneous composition
# --------------------------------------------------------------------------


def _log_delta_pure(epsilon, k, epsilon_total, ls):
  """ln δ_k(ε_g) of k-fold randomized response RR_ε (shape (..., 1) inputs).

  δ_k(ε_g) = Σ_l C(k, l) max(0, e^{(k−l)ε} − e^{ε_g + lε}) / (1 + e^ε)^k,
  the hockey-stick divergence of the k-fold product of the dominating pair
  of ε-DP (Kairouz–Oh–Viswanath 2015, Thm 3.3 and its proof).
  """
  gap = (k - 2.0 * ls) * epsilon - epsilon_total
  valid = (ls <= k) & (gap > 0)
  safe_gap = jnp.where(valid, gap, 1.0)
  safe_l = jnp.where(ls <= k, ls, 0.0)
  terms = (_numerics.log_binom(k, safe_l) + (k - safe_l) * epsilon
           + _numerics.log1mexp(safe_gap))
  terms = jnp.where(valid, terms, -jnp.inf)
  lse = jax.scipy.special.logsumexp(terms, axis=-1)
  return lse - k[..., 0] * _numerics.softplus(epsilon[..., 0])


@persist.jit
def _delta_total(epsilon, delta, k, epsilon_total, ls):
  log_dp = _log_delta_pure(epsilon[..., None], k[..., None],
                           epsilon_total[..., None], ls)
  # 1 − (1 − δ)^k (1 − δ_k(ε_g)), computed as −expm1(k ln(1 − δ) + ln(1 − δ_k)).
  log_keep = k * jnp.log1p(-delta) + jnp.log1p(-jnp.exp(log_dp))
  return jnp.clip(-jnp.expm1(log_keep), 0.0, 1.0)


def _kov_prepare(epsilon, delta, k, extra_name, extra):
  _check_eps_delta(epsilon, delta)
  _numerics.check_array("k", k, low=0.0, integer=True)
  shape = _numerics.check_same_shape(epsilon=epsilon, delta=delta, k=k,
                                     **{extra_name: extra})
  k_max = int(np.max(np.asarray(k))) if np.size(k) else 0
  epsilon, delta, k, extra = common_float(epsilon, delta, k, extra)
  epsilon, delta, k, extra = (jnp.broadcast_to(x, shape)
                              for x in (epsilon, delta, k, extra))
  ls = jnp.arange(k_max + 1, dtype=epsilon.dtype)
  return epsilon, delta, k, extra, ls


@_numerics.host_function
def optimal_homogeneous_delta(epsilon, delta, k, epsilon_total):
  """Exact δ of the k-fold composition of (ε, δ)-DP mechanisms at ε_g.

      δ_total(ε_g) = 1 − (1 − δ)^k (1 − δ_k(ε_g)),
      δ_k(ε_g) = Σ_{l=0}^{k} C(k, l) max(0, e^{(k−l)ε} − e^{ε_g + lε}) / (1 + e^ε)^k.

  Kairouz–Oh–Viswanath 2015, Thm 3.3 (stated there at ε_g = (k − 2i)ε; the
  same dominating-pair argument gives every ε_g). Optimal: no smaller δ is
  valid for all (ε, δ)-DP mechanisms. Host-level (the sum length is the
  largest concrete ``k``).

  Args:
    epsilon: per-mechanism ε >= 0.
    delta: per-mechanism δ in [0, 1].
    k: number of mechanisms (whole number >= 0).
    epsilon_total: ε_g >= 0.

  Returns:
    δ_total in [0, 1] (NumPy float64).
  """
  _numerics.check_array("epsilon_total", epsilon_total, low=0.0)
  epsilon, delta, k, eps_g, ls = _kov_prepare(epsilon, delta, k,
                                              "epsilon_total", epsilon_total)
  return _delta_total(epsilon, delta, k, eps_g, ls)


@_numerics.host_function
def optimal_homogeneous_epsilon(epsilon, delta, k, delta_total, tol=1e-12):
  """Smallest ε_g with :func:`optimal_homogeneous_delta` <= ``delta_total``.

  Bisection on ε_g in [0, kε] (δ_total(ε_g) is non-increasing), returning the
  feasible end of the bracket, so the answer is valid and within ``tol``·kε
  of optimal. +inf where even ε_g = kε needs δ_total > 1 − (1 − δ)^k.

  Args:
    epsilon: per-mechanism ε >= 0.
    delta: per-mechanism δ in [0, 1].
    k: number of mechanisms (whole number >= 0).
    delta_total: target δ_total in [0, 1].
    tol: relative bracket width at which bisection stops.

  Returns:
    ε_g (NumPy float64).
  """
  _numerics.check_array("delta_total", delta_total, low=0.0, high=1.0)
  epsilon, delta, k, target, ls = _kov_prepare(epsilon, delta, k,
                                               "delta_total", delta_total)
  iters = int(np.ceil(np.log2(1.0 / tol))) + 1
  return _kov_epsilon_kernel(epsilon, delta, k, target, ls, iters)


@functools.partial(persist.jit, static_argnames="iters")
def _kov_epsilon_kernel(epsilon, delta, k, target, ls, iters):
  lo = jnp.zeros_like(epsilon)
  hi = k * epsilon

  def body(_, carry):
    lo, hi = carry
    mid = 0.5 * (lo + hi)
    ok = _delta_total(epsilon, delta, k, mid, ls) <= target
    return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

  ok_lo = _delta_total(epsilon, delta, k, lo, ls) <= target
  lo, hi = jax.lax.fori_loop(0, iters, body, (lo, hi))
  feasible = _delta_total(epsilon, delta, k, hi, ls) <= target
  return jnp.where(ok_lo, 0.0, jnp.where(feasible, hi, jnp.inf))
