"""Hockey-stick divergences of explicit distributions, amplification by
subsampling and the randomized-response / randomized-membership profiles.

Balle, Barthe & Gaboardi, "Privacy Amplification by Subsampling: Tight
Analyses via Couplings and Divergences", NeurIPS 2018: eq. 2 (the
hockey-stick divergence), Table 1 and Thms 8–11 (amplification by Poisson
subsampling and by sampling without / with replacement), §5 (their
tightness). Pure kernels with the conventions of
:mod:`jaxdp._src.kernels.profiles` (jittable, broadcasting, in the inputs'
dtype, every result rounded up); re-exported by ``jaxdp.profiles``. Split
out of :mod:`jaxdp._src.kernels.profiles` (moves only).
"""

from __future__ import annotations

import math
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import betainc

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.profiles import _as_float, _check_epsilon, _ulp, _up

__all__ = [
    "hockey_stick",
    "log_hockey_stick",
    "amplify_poisson",
    "amplify_without_replacement",
    "amplify_with_replacement",
    "randomized_response",
    "randomized_membership",
]


# --------------------------------------------------------------------------
# Hockey-stick divergences of explicit distributions (eq. 2)
# --------------------------------------------------------------------------


def _check_distribution(name, p, atol=1e-6):
  nx.check_array(name, p, low=0.0, high=1.0)
  if nx.is_concrete(p):
    s = np.sum(np.asarray(p, dtype=np.float64), axis=-1)
    bad = np.abs(s - 1.0) > atol
    if np.any(bad):
      raise ValueError(
          f"{name} must be normalised along its last axis; found sum "
          f"{np.atleast_1d(s)[np.atleast_1d(bad)][0]!r}.")


def hockey_stick(p, q, epsilon):
  """Hockey-stick divergence D_{e^ε}(p‖q) = Σ_z [p(z) - e^ε q(z)]_+ (eq. 2).

  Args:
    p, q: probability vectors along the last axis (batched over the others).
    epsilon: ε ≥ 0, broadcasting against the batch shape ``p.shape[:-1]``.

  Returns:
    D ∈ [0, 1], rounded up; shape = broadcast batch shape.

  Raises:
    ValueError: negative or non-normalised p / q, ε < 0.
  """
  _check_distribution("p", p)
  _check_distribution("q", q)
  _check_epsilon(epsilon)
  p, q, epsilon, dtype = _as_float(p, q, epsilon)
  ulp = _ulp(dtype)
  n = max(p.shape[-1] if p.ndim else 1, q.shape[-1] if q.ndim else 1)
  c = jnp.exp(epsilon)[..., None]
  cq = jnp.where(q > 0, c * q, 0.0)
  fin = jnp.isfinite(cq)
  cqs = jnp.where(fin, cq, 0.0)
  diff = p - cqs
  err = ulp * (jnp.abs(diff) + 2.0 * cqs)
  term = jnp.where(fin & (diff + err > 0), diff + err, 0.0)
  total = jnp.sum(term, axis=-1) * (1.0 + n * ulp)
  return jnp.minimum(total, 1.0)


def log_hockey_stick(log_p, log_q, epsilon):
  """log D_{e^ε}(p‖q) from log-probabilities (last axis), rounded up.

  log Σ_z p(z)(1 - exp(ε + log q(z) - log p(z)))_+ by logsumexp, so divergences
  far below the float range stay representable. -inf where D = 0.
  """
  nx.check_array("log_p", log_p, high=0.0, allow_inf=True)
  nx.check_array("log_q", log_q, high=0.0, allow_inf=True)
  for name, v in (("log_p", log_p), ("log_q", log_q)):
    if nx.is_concrete(v):
      s = np.logaddexp.reduce(np.asarray(v, np.float64), axis=-1)
      if np.any(np.abs(s) > 1e-6):
        raise ValueError(f"{name} must be normalised (logsumexp 0) along its last axis; "
                         f"found {np.atleast_1d(s)[np.abs(np.atleast_1d(s)) > 1e-6][0]!r}.")
  _check_epsilon(epsilon)
  log_p, log_q, epsilon, dtype = _as_float(log_p, log_q, epsilon)
  ulp = _ulp(dtype)
  n = max(log_p.shape[-1] if log_p.ndim else 1, log_q.shape[-1] if log_q.ndim else 1)
  e = epsilon[..., None]
  p_ok = log_p > -jnp.inf
  q_ok = log_q > -jnp.inf
  lp = jnp.where(p_ok, log_p, 0.0)
  lq = jnp.where(q_ok, log_q, 0.0)
  ef = jnp.where(jnp.isfinite(e), e, 0.0)
  gap = lp - lq - ef
  gap = gap + 4.0 * ulp * (1.0 + jnp.abs(lp) + jnp.abs(lq) + jnp.abs(ef))
  gap = jnp.where(q_ok, gap, jnp.inf)
  keep = p_ok & (gap > 0) & jnp.isfinite(e)
  safe_gap = jnp.where(keep, gap, 1.0)
  terms = jnp.where(keep, lp + nx.log1mexp(safe_gap), -jnp.inf)
  out = jax.nn.logsumexp(terms, axis=-1)
  out = jnp.where(jnp.isfinite(out), out + math.log1p(n * ulp), out)
  return jnp.minimum(out, 0.0)


# --------------------------------------------------------------------------
# Amplification by subsampling (Table 1, Thms 8–11)
# --------------------------------------------------------------------------


def _amplified_epsilon(epsilon, eta, dtype):
  """ε' = log(1 + η(e^ε - 1)), rounded up; stable for small and huge ε."""
  small = epsilon <= 1.0
  es = jnp.where(small, epsilon, 0.0)
  el = jnp.where(small, 1.0, epsilon)
  etas = jnp.where(eta > 0, eta, 1.0)
  v_small = jnp.log1p(eta * jnp.expm1(es))
  v_large = jnp.logaddexp(jnp.log1p(-jnp.minimum(eta, 1.0)), jnp.log(etas) + el)
  out = jnp.where(small, v_small, v_large)
  out = jnp.where(eta > 0, out, 0.0)
  return _up(out, dtype)


def _finish_amplification(epsilon, delta, eta, dtype):
  eta = jnp.minimum(_up(eta, dtype), 1.0)
  eps_p = _amplified_epsilon(epsilon, eta, dtype)
  delta_p = jnp.minimum(_up(eta * delta, dtype), 1.0)
  return eps_p.astype(dtype), delta_p.astype(dtype)


def amplify_poisson(epsilon, delta, gamma) -> Tuple[jax.Array, jax.Array]:
  """Poisson subsampling with rate γ, add/remove neighbours (Thm 8).

  If M is (ε, δ)-DP then M∘S_γ is (ε', γδ)-DP with ε' = log(1 + γ(e^ε - 1)).
  Tight for the randomized-membership mechanism (Thm 13).

  Args:
    epsilon: ε ≥ 0 of the base mechanism (∞ allowed).
    delta: δ in [0, 1] of the base mechanism (δ(ε) of its profile).
    gamma: sampling probability γ in [0, 1].

  Returns:
    (ε', δ'), both rounded up.
  """
  _check_epsilon(epsilon)
  nx.check_array("delta", delta, low=0.0, high=1.0)
  nx.check_array("gamma", gamma, low=0.0, high=1.0)
  nx.check_same_shape(epsilon=epsilon, delta=delta, gamma=gamma)
  epsilon, delta, gamma, dtype = _as_float(epsilon, delta, gamma)
  return _finish_amplification(epsilon, delta, gamma, dtype)


def _check_m_n(m, n):
  nx.check_array("n", n, low=1.0, integer=True)
  nx.check_array("m", m, low=0.0, integer=True)
  if nx.is_concrete(m) and nx.is_concrete(n):
    mm, nn = np.broadcast_arrays(np.asarray(m, np.float64), np.asarray(n, np.float64))
    bad = mm > nn
    if np.any(bad):
      raise ValueError(f"m must be <= n; found m={mm[bad].flat[0]!r} > n={nn[bad].flat[0]!r}.")


def amplify_without_replacement(epsilon, delta, m, n) -> Tuple[jax.Array, jax.Array]:
  """Subsampling m of n records without replacement, substitution neighbours (Thm 9).

  η = m/n; ε' = log(1 + η(e^ε - 1)), δ' = ηδ. Tight (Thm 13).

  Args:
    epsilon: ε ≥ 0; delta: δ ∈ [0, 1] of the base mechanism on size-m sets.
    m: subsample size (whole number, 0 ≤ m ≤ n); n: dataset size (≥ 1).
  """
  _check_epsilon(epsilon)
  nx.check_array("delta", delta, low=0.0, high=1.0)
  _check_m_n(m, n)
  nx.check_same_shape(epsilon=epsilon, delta=delta, m=m, n=n)
  epsilon, delta, m, n, dtype = _as_float(epsilon, delta, m, n)
  return _finish_amplification(epsilon, delta, m / n, dtype)


def amplify_with_replacement(epsilon, group_deltas, m, n) -> Tuple[jax.Array, jax.Array]:
  """Subsampling m of n records with replacement (Thms 10 and 11).

  η = 1 - (1 - 1/n)^m, ε' = log(1 + η(e^ε - 1)) and
  δ' = Σ_{k=1}^{m} C(m,k) (1/n)^k (1 - 1/n)^{m-k} δ_{M,k}(ε),
  where δ_{M,k} is the k-th group-privacy profile of the base mechanism
  (e.g. :func:`jaxdp._src.kernels.profiles.gaussian_group`). Thm 10
  (substitution/substitution) and Thm 11 (add/remove on the full data, size-n
  datasets) share this bound.

  ``group_deltas[..., k-1]`` holds δ_{M,k}(ε) for k = 1..K. Terms k > K (when
  K < m) are bounded by δ_{M,k} ≤ 1, i.e. the binomial tail Pr[Bin(m, 1/n) > K]
  is added, so a short list of group deltas still gives a sound bound.

  Args:
    epsilon: ε ≥ 0 at which the group profiles were evaluated.
    group_deltas: array [..., K] of δ_{M,k}(ε) in [0, 1].
    m: number of draws (0 ≤ m ≤ n); n: dataset size ≥ 1.

  Returns:
    (ε', δ'), both rounded up.
  """
  _check_epsilon(epsilon)
  nx.check_array("group_deltas", group_deltas, low=0.0, high=1.0)
  _check_m_n(m, n)
  epsilon, gd, m, n, dtype = _as_float(epsilon, group_deltas, m, n)
  if gd.ndim == 0:
    gd = gd[None]
  ulp = _ulp(dtype)
  big_k = gd.shape[-1]
  k = jnp.arange(1, big_k + 1, dtype=dtype)
  m_ = m[..., None]
  n_ = n[..., None]
  log_p = -jnp.log(n_)
  log_1mp = jnp.log1p(-1.0 / n_)
  rest = m_ - k
  valid = rest >= 0
  rest_s = jnp.where(valid, rest, 0.0)
  tail_term = jnp.where(rest_s > 0, rest_s * jnp.where(n_ > 1, log_1mp, 0.0), 0.0)
  lbin = nx.log_binom(m_, jnp.where(valid, k, 0.0))
  logw = lbin + k * log_p + tail_term
  logw = logw + 8.0 * ulp * (1.0 + jnp.abs(lbin) + jnp.abs(k * log_p) + jnp.abs(tail_term))
  # n == 1: every draw is the differing record, weight 1 at k = m only.
  logw = jnp.where(n_ > 1, logw, jnp.where(rest == 0, 0.0, -jnp.inf))
  w = jnp.where(valid, jnp.exp(logw), 0.0)
  delta_p = jnp.sum(w * gd, axis=-1)
  # Pr[Bin(m, 1/n) > K] = I_{1/n}(K+1, m-K) for m > K.
  has_tail = m > big_k
  bb = jnp.where(has_tail, m - big_k, 1.0)
  tail = jnp.where(has_tail, betainc(jnp.asarray(big_k + 1.0, dtype), bb, 1.0 / n), 0.0)
  # betainc is accurate to ~1e-13 relative in float64; allow far more.
  tail = _up(tail, dtype, ulps=1e6 if dtype == jnp.float64 else 64.0)
  delta_p = _up(delta_p, dtype, ulps=8.0 * (big_k + 4.0)) + tail
  eta = -jnp.expm1(m * jnp.where(n > 1, jnp.log1p(-1.0 / n), -jnp.inf))
  eta = jnp.where(m > 0, eta, 0.0)
  eta = jnp.minimum(_up(eta, dtype, ulps=8.0), 1.0)
  eps_p = _amplified_epsilon(epsilon, eta, dtype)
  return eps_p.astype(dtype), jnp.minimum(delta_p, 1.0).astype(dtype)


# --------------------------------------------------------------------------
# Tightness: randomized response / randomized membership (§5)
# --------------------------------------------------------------------------


def randomized_response(epsilon, p):
  """Profile ψ_p(ε) = [p - e^ε(1-p)]_+ of randomized response R_p (§5).

  R_p returns its input bit with probability p. For p < 1/2 the roles of the
  outputs swap, so p is replaced by max(p, 1-p).
  """
  _check_epsilon(epsilon)
  nx.check_array("p", p, low=0.0, high=1.0)
  nx.check_same_shape(epsilon=epsilon, p=p)
  epsilon, p, _ = _as_float(epsilon, p)
  pt = jnp.maximum(p, 1.0 - p)
  rest = 1.0 - pt
  cq = jnp.where(rest > 0, jnp.exp(epsilon) * rest, 0.0)
  return jnp.maximum(pt - cq, 0.0)


def randomized_membership(epsilon, p, eta):
  """Profile of the subsampled randomized-membership mechanism M_{v,p}∘S (Lemma 12).

  M_{v,p}(x) = R_p(1[v ∈ x]); under any natural subsampling S with
  total-variation parameter η its profile is exactly
  δ(ε') = η ψ_p(ε) at ε' = log(1 + η(e^ε - 1)), i.e.
  δ(ε') = [η(2p - 1) - (1 - p)(e^{ε'} - 1)]_+ (p ≥ 1/2; else p → 1-p).
  It attains the bounds of Thms 8–10 (Thm 13).

  Args:
    epsilon: ε' ≥ 0 (the subsampled mechanism's ε).
    p: randomized-response probability in [0, 1].
    eta: η in [0, 1] (γ for Poisson, m/n without replacement,
      1 - (1 - 1/n)^m with replacement).
  """
  _check_epsilon(epsilon)
  nx.check_array("p", p, low=0.0, high=1.0)
  nx.check_array("eta", eta, low=0.0, high=1.0)
  nx.check_same_shape(epsilon=epsilon, p=p, eta=eta)
  epsilon, p, eta, _ = _as_float(epsilon, p, eta)
  pt = jnp.maximum(p, 1.0 - p)
  rest = 1.0 - pt
  e = jnp.where(jnp.isfinite(epsilon), epsilon, 0.0)
  loss = jnp.where(rest > 0, rest * jnp.expm1(e), 0.0)
  loss = jnp.where((rest > 0) & ~jnp.isfinite(epsilon), jnp.inf, loss)
  return jnp.maximum(eta * (2.0 * pt - 1.0) - loss, 0.0)
