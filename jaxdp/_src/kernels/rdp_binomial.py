"""Exact binomial sums of A_α - 1 for integer orders (MTZ §3.3, Case I).

Mironov, Talwar & Zhang, "Rényi Differential Privacy of the Sampled Gaussian
Mechanism" (2019): for integer α, A_α - 1 = Σ_{k=2}^{α} C(α,k) (1-q)^{α-k} q^k
(exp((k²-k)/(2σ²)) - 1), every term non-negative. The per-bucket and the
per-element forms used by :func:`jaxdp._src.kernels.rdp.sampled_gaussian`
(split out of :mod:`jaxdp._src.kernels.rdp`, moves only).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.rdp_common import log_sum_exp


# --------------------------------------------------------------------------
# Exact binomial sum for integer orders (MTZ §3.3, Case I)
# --------------------------------------------------------------------------


def log_a_minus_1_binomial(log_q, log_1mq, sigma, orders, xp=jnp):
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
  coef, rest, coef_err = binomial_tables(orders)
  dtype = log_q.dtype
  return binomial_lse(log_q[:, None, None], log_1mq[:, None, None], sigma[:, None, None],
                       xp.asarray(coef, dtype), xp.asarray(rest, dtype), xp,
                       xp.asarray(coef_err, dtype))


def binomial_tables(orders):
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


def log_binomial(n, k):
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


def binomial_lse(log_q, log_1mq, sigma, coef, rest, xp=jnp, coef_err=0.0):
  """log Σ_k exp(coef_k + rest_k·log(1-q) + k·log q + log(exp((k²-k)/(2σ²)) - 1)).

  ``coef``, ``rest`` and ``coef_err`` (the tables of :func:`binomial_tables`)
  carry k = 2, 3, … on their last axis; the other arguments broadcast
  against them.
  """
  dtype = log_q.dtype
  k = xp.arange(2, coef.shape[-1] + 2, dtype=dtype)
  terms = _binomial_terms(log_q, log_1mq, sigma, coef, rest, k, xp, coef_err)
  return log_sum_exp(terms, axis=-1, xp=xp)


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


def log_a_minus_1_binomial_elementwise(log_q, log_1mq, sigma, alpha, kmax: int):
  """As :func:`log_a_minus_1_binomial` with one integer order per element.

  Args:
    log_q, log_1mq, sigma, alpha: shape (E,).
    kmax: static bound on the orders (terms are masked beyond each α).
  """
  dtype = log_q.dtype
  k = jnp.arange(2, kmax + 1, dtype=dtype)[None, :]
  a = alpha[:, None]
  valid = k <= a
  rest = jnp.where(valid, a - k, 0.0)
  coef, coef_err = log_binomial(a, k)
  terms = _binomial_terms(log_q[:, None], log_1mq[:, None], sigma[:, None], coef, rest, k,
                          coef_err=coef_err)
  return log_sum_exp(jnp.where(valid, terms, -jnp.inf), axis=-1)
