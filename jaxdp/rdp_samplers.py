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
  (:mod:`jaxdp._bins_add`); see :func:`balls_in_bins_gaussian_epoch`.
shuffling (k = N // B fixed-size batches per epoch)
  No amplification is claimed (Chua et al., ICML 2024); a certified *lower*
  bound is in :func:`shuffle_lower_bound_epsilon`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxdp import _bins_add
from jaxdp import _numerics as nx
from jaxdp import rdp

__all__ = [
    "without_replacement_gaussian",
    "truncated_poisson_gaussian",
    "truncated_poisson_pair",
    "TruncatedPoissonPair",
    "balls_in_bins_gaussian_epoch",
    "shuffle_gaussian_epoch",
    "shuffle_lower_bound_epsilon",
]

# Forward differences of the Gaussian moments are computed up to this order
# (WBK Thm 27 uses them up to order 256, as dp_accounting does; the exact
# random-allocation moments use them up to the same order).
_MAX_FD_ORDER = 256
# Order n of the power-mean bound used for random allocation beyond order
# _MAX_FD_ORDER (cost ∝ n², looseness ∝ α/n - 1).
_POWER_MEAN_ORDER = 128
# Integer orders above this use the plain WBK terms (dp_accounting's switch).
_WBK_FD_MAX_ALPHA = 256
# Largest order summed term by term in WBK for traced orders (static size).
_WBK_TRACED_MAX_ALPHA = 4096
# Hard cap on the static size of the WBK sum for concrete orders.
_WBK_MAX_TERMS = 1 << 16
# Terms summed on each side of the binomial tail (static size).
_TAIL_TERMS = 4096


def _dtype_of(*xs):
  return rdp._float_dtype(*(jnp.asarray(x) for x in xs))


def _lse(x, axis=-1):
  return rdp._logsumexp(x, axis=axis)


def _tol(dtype):
  """Relative accuracy demanded of the internal tables in ``dtype``."""
  return 1e-12 if jnp.finfo(dtype).eps < 1e-10 else 1e-4


# --------------------------------------------------------------------------
# Forward differences of the Gaussian moment sequence
# --------------------------------------------------------------------------
#
# With c = 1/(2σ²) and the likelihood ratio L = dN(1,σ²)/dN(0,σ²) under
# N(0,σ²), E[L^m] = g(m) = exp(m(m-1)c) and
#
#   m_l := Δ^l g(0) = Σ_i (-1)^{l-i} C(l,i) e^{i(i-1)c} = E[(L-1)^l] ≥ 0.
#
# Non-negativity (also for odd l) follows from the Newton series
# g(x) = Σ_k c^k (x(x-1))^k / k!: (x(x-1))^k has non-negative coefficients
# a_k[j] in the falling-factorial basis (x^(2)·x^(j) = x^(j+2) + 2j x^(j+1) +
# j(j-1) x^(j)), so m_l = l! Σ_k a_k[l] c^k / k! is a sum of positive terms.
# Two evaluations:
#  (A) the alternating sum (accurate unless its terms cancel: small c), and
#  (B) the positive Newton series (converges quickly exactly when c is small).
# Each reports its own error; (A) is used where it is accurate, else (B); if
# neither is (never seen for σ in [0.01, 100], l ≤ 256), the sum of absolute
# values, an upper bound, is used.


def _fd_terms(lmax: int) -> int:
  """Newton-series terms that make (B) cover every l ≤ lmax where (A) fails.

  Measured against mpmath (600 digits) over σ ∈ [0.01, 100]: lmax = 256 needs
  1024 terms (768 do not suffice), smaller lmax proportionally fewer.
  """
  return 4 * lmax + 64


def _log_forward_differences(c, lmax: int):
  """log m_l for l = 0..lmax (log m_0 = 0, log m_1 = -inf).

  Args:
    c: 1/(2σ²) > 0, any shape S.
    lmax: static largest order.

  Returns:
    Shape S + (lmax + 1,), inflated by the table's relative error bound.
  """
  dtype = c.dtype
  eps = float(jnp.finfo(dtype).eps)
  tol = _tol(dtype)
  l = np.arange(lmax + 1, dtype=np.float64)
  # (A) alternating sum, in log space with a common scale per row.
  li, ii = l[:, None], l[None, :]
  valid = ii <= li
  with np.errstate(invalid="ignore"):
    logc = np.where(valid, _np_lgamma(li + 1) - _np_lgamma(ii + 1) - _np_lgamma(np.maximum(li - ii, 0) + 1),
                    -np.inf)
  sign = np.where((li - ii) % 2 == 0, 1.0, -1.0)
  cc = c[..., None, None]
  terms = jnp.asarray(logc, dtype) + jnp.asarray(ii * (ii - 1), dtype) * cc
  top = jnp.max(terms, axis=-1, keepdims=True)
  scaled = jnp.where(jnp.asarray(valid), jnp.exp(terms - top), 0.0)
  signed = jnp.sum(jnp.asarray(sign, dtype) * scaled, axis=-1)
  absolute = jnp.sum(scaled, axis=-1)
  top = top[..., 0]
  log_a = nx.safe_log(jnp.abs(signed)) + top
  log_abs = jnp.log(absolute) + top
  err_a = eps * (lmax + 1) * absolute / jnp.abs(signed)
  ok_a = err_a <= tol
  # (B) Newton series: T_{k+1}[j] = c/(k+1) (T_k[j-2] + 2(j-1) T_k[j-1] + j(j-1) T_k[j]).
  log2jm1 = jnp.asarray(np.log(np.maximum(2.0 * (l - 1.0), 1e-300)), dtype)
  logjj = jnp.asarray(np.log(np.maximum(l * (l - 1.0), 1e-300)), dtype)
  keep1 = jnp.asarray(l >= 2, bool)  # j(j-1) and 2(j-1) vanish below
  neg = jnp.full(c.shape + (1,), -jnp.inf, dtype)
  neg2 = jnp.full(c.shape + (2,), -jnp.inf, dtype)
  log_c = jnp.log(c)[..., None]
  t0 = jnp.where(jnp.arange(lmax + 1) == 0, 0.0, -jnp.inf).astype(dtype)
  t0 = jnp.broadcast_to(t0, c.shape + (lmax + 1,))

  def step(carry, k):
    t, s = carry
    a = jnp.concatenate([neg2, t[..., :-2]], axis=-1)
    b = jnp.concatenate([neg, t[..., :-1]], axis=-1) + log2jm1
    d = t + logjj
    b = jnp.where(l >= 2, b, -jnp.inf)
    d = jnp.where(keep1, d, -jnp.inf)
    t_new = log_c - jnp.log(k + 1.0) + nx.log_add(nx.log_add(a, b), d)
    return (t_new, nx.log_add(s, t_new)), None

  ks = jnp.arange(_fd_terms(lmax), dtype=dtype)
  (t_last, s), _ = jax.lax.scan(step, (t0, t0), ks)
  log_b = s + jnp.asarray(_np_lgamma(l + 1), dtype)
  ok_b = (t_last - s) < math.log(tol) - 20.0
  out = jnp.where(ok_a, log_a, jnp.where(ok_b, log_b, log_abs))
  # Relative inflation covering the selected method's error (measured ≤ 2e-12
  # against mpmath) and the rounding of the log-magnitude itself.
  out = out + (20.0 * tol + 8.0 * eps * jnp.abs(out))
  out = out.at[..., 0].set(0.0)
  if lmax >= 1:
    out = out.at[..., 1].set(-jnp.inf)
  return out


def _np_lgamma(x):
  return np.vectorize(math.lgamma, otypes=[np.float64])(x)


# --------------------------------------------------------------------------
# Sampling without replacement
# --------------------------------------------------------------------------


def _wbk_log_a(log_q, sigma, a, fd, max_terms: int):
  """log A for integer orders ``a`` by WBK Thm 27 as dp_accounting computes it.

  A_a = 1 + Σ_{i=2}^{a} q^i C(a,i) b_i with (ε(j) = j/(2σ²), c = 1/(2σ²))
    b_2 = min(4 (e^{ε(2)} - 1), 2 e^{ε(2)}),
    b_i = min(4 √(m_{2⌊i/2⌋} m_{2⌈i/2⌉}), 2 e^{(i-1) ε(i)})   (a ≤ 256),
    b_i = 2 e^{(i-1) ε(i)}                                     (a > 256),
  m_l the forward differences above (Wang, Balle & Kasiviswanathan 2019,
  Thm 27; the a > 256 switch is dp_accounting's).

  Args:
    log_q, sigma, a: broadcast together (shape S); a integer-valued, ≥ 1.
    fd: log m_l table, shape broadcastable to S + (_MAX_FD_ORDER + 1,).
    max_terms: static bound on a.

  Returns:
    log A, shape S (0 where a ≤ 1).
  """
  dtype = sigma.dtype
  c = 1.0 / (2.0 * sigma * sigma)
  i_np = np.arange(2, max(max_terms, 2) + 1, dtype=np.float64)
  i = jnp.asarray(i_np, dtype)
  ex = lambda x: x[..., None]
  valid = i <= ex(a)
  log_binom = gammaln(ex(a) + 1.0) - gammaln(i + 1.0) - gammaln(jnp.maximum(ex(a) - i, 0.0) + 1.0)
  plain = math.log(2.0) + (i - 1.0) * i * ex(c)
  # i = 2: min(log 4 + log(e^{2c} - 1), 2c + log 2).
  b2 = jnp.minimum(math.log(4.0) + nx.log_expm1(2.0 * c), 2.0 * c + math.log(2.0))
  # i ≥ 3 with forward differences (only orders i ≤ 256 are ever used there).
  n_fd = min(len(i_np), _WBK_FD_MAX_ALPHA - 1)
  lo = 2 * np.floor(i_np[:n_fd] / 2).astype(int)
  hi = 2 * np.ceil(i_np[:n_fd] / 2).astype(int)
  fd_terms = math.log(4.0) + 0.5 * (fd[..., lo] + fd[..., hi])
  fd_terms = jnp.minimum(fd_terms, plain[..., :n_fd])
  pad = len(i_np) - n_fd
  fd_terms = jnp.concatenate([fd_terms, jnp.broadcast_to(plain[..., n_fd:], fd_terms.shape[:-1] + (pad,))],
                             axis=-1) if pad else fd_terms
  use_fd = ex(a) <= _WBK_FD_MAX_ALPHA
  b = jnp.where(use_fd, fd_terms, plain)
  b = jnp.where(i == 2.0, ex(b2), b)
  terms = jnp.where(valid, i * ex(log_q) + log_binom + b, -jnp.inf)
  return nx.softplus(_lse(terms))


def _check_common(name, value, **kw):
  nx.check_array(name, value, **kw)


def without_replacement_gaussian(dataset_size, batch_size, sigma, alpha, relation="replace_one"):
  """RDP of one step: a batch of B out of N drawn without replacement + Gaussian.

  ``relation="replace_one"`` (N public, one example replaced): the bound of
  Wang, Balle & Kasiviswanathan (AISTATS 2019, Thm 27) for the subsampled
  Gaussian, with q = B/N and base RDP ε(j) = j/(2σ²):

      ε(α) = log(1 + Σ_{i=2}^{α} q^i C(α,i) b_i) / (α - 1)

  (b_i in :func:`_wbk_log_a`), exactly as dp_accounting 0.6 computes it for
  ``SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(σ))`` under
  REPLACE_ONE: forward differences for integer α ≤ 256, the plain terms above;
  fractional α interpolate the log-moment (α-1)ε(α) linearly between ⌊α⌋
  and ⌈α⌉ (WBK Cor. 10: it is convex in α, so the chord is an upper bound;
  (α-1)ε = 0 at α = 1). Two deviations, both sound: the forward differences
  are computed accurately (dp_accounting's cancel catastrophically for
  σ ≳ 5 at high orders), and the result is capped by the unamplified
  α/(2σ²) (subsampling never hurts, by joint convexity). ``sigma`` is the
  noise std over the replace-one sensitivity (2C for a clipped sum; see the
  module docstring).

  ``relation="add_remove"`` (``sigma`` = std / C): for a dataset of size N
  and a neighbour of size N ± 1, the batch of the larger dataset contains the
  extra example x with probability q' = B/N' (N' its size) and, coupled with
  the smaller dataset's batch, differs from it by replacing one element y by
  x (the maximal coupling of Balle, Barthe & Gaboardi 2018, as in the proof of
  their Thm 9). Conditioned on the rest of the batch the pair is N(0,σ²) vs
  (1-q') N(0,σ²) + q' N(x-y,σ²), ‖x - y‖ ≤ 2, so by joint convexity
  ε(α) ≤ ``rdp.sampled_gaussian(B/N, σ/2, α)`` (q' ≤ B/N for both
  neighbours; MTZ 2019 Thm 5 covers both orders), capped by the unamplified
  sensitivity-2 Gaussian 2α/σ². Attained exactly with the other gradients -1
  and x's +1 (tests/test_rdp_samplers.py).

  Args:
    dataset_size: N ≥ 1 (examples).
    batch_size: B in [0, N].
    sigma: noise multiplier > 0 (see above for its meaning per relation).
    alpha: Rényi order(s) > 1 (may be ∞ → ∞). Traced orders are supported up
      to 4096 (larger traced orders get α/(2σ²)).
    relation: "replace_one" (default, as dp_accounting) or "add_remove".

  Returns:
    RDP values, the broadcast shape of the arguments.

  Raises:
    ValueError: bad concrete arguments or unknown ``relation``.
  """
  if relation not in ("replace_one", "add_remove"):
    raise ValueError(f"relation must be 'replace_one' or 'add_remove'; found {relation!r}.")
  _check_common("dataset_size", dataset_size, low=1.0, integer=True)
  _check_common("batch_size", batch_size, low=0.0, integer=True)
  _check_common("sigma", sigma, low=0.0, low_open=True)
  _check_common("alpha", alpha, low=1.0, low_open=True, allow_inf=True)
  if nx.is_concrete(dataset_size) and nx.is_concrete(batch_size):
    if np.any(np.asarray(batch_size, np.float64) > np.asarray(dataset_size, np.float64)):
      raise ValueError(f"batch_size must be <= dataset_size; found {batch_size} > {dataset_size}.")
  dtype = _dtype_of(dataset_size, batch_size, sigma, alpha)
  n = jnp.asarray(dataset_size).astype(dtype)
  b = jnp.asarray(batch_size).astype(dtype)
  sigma = jnp.asarray(sigma).astype(dtype)
  q = jnp.clip(b / n, 0.0, 1.0)
  if relation == "add_remove":
    eps = rdp.sampled_gaussian(q, sigma / 2.0, alpha)
    return jnp.minimum(eps, rdp.gaussian(sigma / 2.0, alpha)).astype(dtype)
  if nx.is_concrete(alpha):
    alpha_np = np.asarray(alpha, np.float64)
    finite = alpha_np[np.isfinite(alpha_np)]
    top = int(np.ceil(finite.max())) if finite.size else 2
    max_terms = min(max(top, 2), _WBK_MAX_TERMS)
    return _wor_replace_one(q, sigma, jnp.asarray(alpha_np, dtype), max_terms=max_terms)
  return _wor_replace_one(q, sigma, jnp.asarray(alpha).astype(dtype), max_terms=_WBK_TRACED_MAX_ALPHA)


@functools.partial(jax.jit, static_argnames=("max_terms",))
def _wor_replace_one(q, sigma, alpha, max_terms):
  dtype = sigma.dtype
  # The forward-difference table depends on σ only: build it on σ's own shape.
  fd = _log_forward_differences(1.0 / (2.0 * sigma * sigma),
                                min(_MAX_FD_ORDER, max(2 * ((max_terms + 1) // 2), 2)))
  if fd.shape[-1] < _MAX_FD_ORDER + 1:
    fd = jnp.concatenate([fd, jnp.full(fd.shape[:-1] + (_MAX_FD_ORDER + 1 - fd.shape[-1],), jnp.inf, dtype)],
                         axis=-1)
  shape = jnp.broadcast_shapes(q.shape, sigma.shape, alpha.shape)
  fd = _expand_table(fd, sigma.ndim, shape)
  q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
  log_q = nx.safe_log(q)
  ok = jnp.isfinite(alpha) & (alpha > 1.0) & (alpha <= max_terms)
  a = jnp.where(ok, alpha, 2.0)
  lo = jnp.floor(a)
  hi = jnp.ceil(a)
  frac = a - lo
  k_lo = _wbk_log_a(log_q, sigma, lo, fd, max_terms)
  k_hi = _wbk_log_a(log_q, sigma, hi, fd, max_terms)
  log_moment = (1.0 - frac) * k_lo + frac * k_hi
  beta = a - 1.0
  wbk = log_moment / beta
  gauss = alpha / (2.0 * sigma * sigma)
  out = jnp.where(ok, jnp.minimum(wbk, gauss), gauss)
  out = jnp.where(q >= 1.0, gauss, out)
  out = jnp.maximum(out, 0.0) * rdp._safety(dtype)
  out = jnp.where(q <= 0.0, 0.0, out)
  out = jnp.where(alpha > 1.0, out, jnp.nan)
  return out.astype(dtype)


# --------------------------------------------------------------------------
# Binomial tails (for truncated Poisson sampling)
# --------------------------------------------------------------------------


def _stirlerr(x):
  """log(x!) - [(x + 1/2) log x - x + log √(2π)] for x ≥ 1 (Loader 2000)."""
  x = jnp.asarray(x)
  big = x >= 16.0
  xb = jnp.where(big, x, 16.0)
  xs = jnp.where(big, 1.0, jnp.maximum(x, 1.0))
  inv = 1.0 / xb
  inv2 = inv * inv
  series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 / 1188))))
  direct = gammaln(xs + 1.0) - (xs + 0.5) * jnp.log(xs) + xs - 0.5 * math.log(2.0 * math.pi)
  return jnp.where(big, series, direct)


def _bd0(x, m):
  """x log(x/m) + m - x ≥ 0, without cancellation when x ≈ m (Loader 2000)."""
  near = jnp.abs(x - m) < 0.1 * (x + m)
  xn = jnp.where(near, x, 1.0)
  mn = jnp.where(near, m, 2.0)
  v = (xn - mn) / (xn + mn)
  v2 = v * v
  s = (xn - mn) * v
  term = 2.0 * xn * v
  acc = s
  for j in range(1, 40):
    term = term * v2
    acc = acc + term / (2.0 * j + 1.0)
  xf = jnp.where(near, 1.0, x)
  mf = jnp.where(near, 1.0, m)
  far = xf * (nx.safe_log(xf) - jnp.log(mf)) + mf - xf
  far = jnp.where(xf == 0.0, mf, far)
  return jnp.where(near, acc, far)


def _log_binom_pmf(k, n, p):
  """log P(Bin(n, p) = k) for 0 < p < 1 and integers 0 ≤ k ≤ n (Loader's
  saddle-point form, relative error ~1e-14 even for n ~ 1e9); -inf outside."""
  inside = (k >= 0) & (k <= n)
  mid = inside & (k >= 1) & (k <= n - 1)
  km = jnp.where(mid, k, 1.0)
  nm = jnp.where(mid, n, 2.0)
  log_mid = (_stirlerr(nm) - _stirlerr(km) - _stirlerr(nm - km) - _bd0(km, nm * p)
             - _bd0(nm - km, nm * (1.0 - p)) + 0.5 * (jnp.log(nm) - jnp.log(2.0 * math.pi * km * (nm - km))))
  log_end0 = n * nx.log1p(-p)
  log_endn = n * jnp.log(p)
  out = jnp.where(k == 0, log_end0, jnp.where(k == n, log_endn, log_mid))
  return jnp.where(inside, out, -jnp.inf)


class _Tail(NamedTuple):
  """Rigorous brackets of t = P(Bin(n, p) ≥ k) and u = 1 - t (logs), and an
  upper bound on r = 1 - (1-p) P(Bin(n,p) = k) / t ∈ [p, 1]."""
  log_t_lo: jax.Array
  log_t_hi: jax.Array
  log_u_lo: jax.Array
  log_u_hi: jax.Array
  r_hi: jax.Array


def _binomial_upper_tail(k, n, p, terms=_TAIL_TERMS):
  """Brackets of P(Bin(n, p) ≥ k), by summing ``terms`` pmf values outward
  from k (upwards when k is above the mode, else the complementary lower tail
  downwards from k - 1) and bounding the remainder by a geometric series (the
  successive pmf ratios are monotone away from the mode).

  Args:
    k, n, p: broadcast together; integers k, n (as floats), 0 < p < 1.
    terms: static number of explicit terms.

  Returns:
    :class:`_Tail`.
  """
  k, n, p = jnp.broadcast_arrays(k, n, p)
  dtype = p.dtype
  tol = _tol(dtype)
  ex = lambda x: x[..., None]
  log_pk = _log_binom_pmf(k, n, p)
  logit = jnp.log(p) - nx.log1p(-p)
  j = jnp.arange(terms, dtype=dtype)
  # Upper: pmf(k + j) = pmf(k) Π_{x=k}^{k+j-1} r_x, r_x = (n-x) p / ((x+1)(1-p)).
  x_up = ex(k) + j
  log_r_up = nx.safe_log(ex(n) - x_up) - jnp.log(x_up + 1.0) + ex(logit)
  cum_up = jnp.cumsum(log_r_up, axis=-1)
  rel_up = jnp.concatenate([jnp.zeros_like(cum_up[..., :1]), cum_up[..., :-1]], axis=-1)
  s_up = _lse(rel_up)                          # Σ pmf(k+j)/pmf(k), j < terms
  s_up_tail = _lse(rel_up[..., 1:])            # the same without j = 0
  log_r_last = log_r_up[..., -1]               # ratio at x = k + terms - 1
  log_next = cum_up[..., -1]                   # pmf(k+terms)/pmf(k)
  rem_up = jnp.where(log_r_last < 0.0,
                     log_next - nx.log1mexp(-jnp.where(log_r_last < 0.0, log_r_last, -1.0)), jnp.inf)
  rem_up = jnp.where(log_next == -jnp.inf, -jnp.inf, rem_up)
  # Lower: pmf(k-1-j) = pmf(k) Π_{x=k-j}^{k} d_x, d_x = x (1-p) / ((n-x+1) p).
  x_dn = ex(k) - j
  log_d = nx.safe_log(x_dn) - jnp.log(ex(n) - x_dn + 1.0) - ex(logit)
  cum_dn = jnp.cumsum(log_d, axis=-1)          # pmf(k-1-j)/pmf(k)
  s_dn = _lse(cum_dn)
  log_d_next = nx.safe_log(ex(k) - terms) - jnp.log(ex(n) - ex(k) + terms + 1.0) - ex(logit)
  log_d_next = log_d_next[..., 0]
  rem_dn = jnp.where(log_d_next < 0.0, cum_dn[..., -1] + log_d_next
                     - nx.log1mexp(-jnp.where(log_d_next < 0.0, log_d_next, -1.0)), jnp.inf)
  rem_dn = jnp.where(k - terms <= 0.0, -jnp.inf, rem_dn)
  mode = jnp.floor((n + 1.0) * p)
  upper = k > mode
  # Upper branch: t = pmf(k) (S + R).
  log_t_lo_u = log_pk + s_up
  log_t_hi_u = log_pk + nx.log_add(s_up, rem_up)
  # Lower branch: u = 1 - t = pmf(k) (S + R).
  log_u_lo_l = log_pk + s_dn
  log_u_hi_l = log_pk + nx.log_add(s_dn, rem_dn)
  neg = lambda log_x: nx.safe_log(-jnp.expm1(jnp.minimum(log_x, 0.0)))   # log(1 - e^x)
  log_t_lo = jnp.where(upper, log_t_lo_u, neg(log_u_hi_l))
  log_t_hi = jnp.where(upper, log_t_hi_u, neg(log_u_lo_l))
  log_u_lo = jnp.where(upper, neg(log_t_hi_u), log_u_lo_l)
  log_u_hi = jnp.where(upper, neg(log_t_lo_u), log_u_hi_l)
  # r = 1 - (1-p) pmf(k)/t, increasing in t. Upper branch: t = pmf(k)(1 + E)
  # with E = Σ_{j≥1} pmf(k+j)/pmf(k) ≥ 0, so r = (E + p)/(1 + E) exactly
  # (no cancellation for tiny p). Lower branch: t ≳ 1/2 and r ≥ p ≳ 1/n.
  log_e_hi = nx.log_add(s_up_tail, rem_up)
  e_hi = jnp.exp(jnp.minimum(log_e_hi, 700.0))
  r_up = jnp.where(log_e_hi > 700.0, 1.0, (e_hi + p) / (1.0 + e_hi))
  r_dn = 1.0 - (1.0 - p) * jnp.exp(jnp.minimum(log_pk - neg(log_u_lo_l), 0.0))
  r_hi = jnp.where(upper, r_up, r_dn)
  # Rounding margins (relative).
  pad = 10.0 * tol
  log_t_lo = log_t_lo - pad
  log_u_lo = log_u_lo - pad
  log_t_hi = jnp.minimum(log_t_hi + pad, 0.0)
  log_u_hi = jnp.minimum(log_u_hi + pad, 0.0)
  r_hi = jnp.minimum(r_hi * (1.0 + pad), 1.0)
  # k ≤ 0: t = 1 exactly; k > n: t = 0 exactly.
  all_in = k <= 0.0
  none = k > n
  log_t_lo = jnp.where(all_in, 0.0, jnp.where(none, -jnp.inf, log_t_lo))
  log_t_hi = jnp.where(all_in, 0.0, jnp.where(none, -jnp.inf, log_t_hi))
  log_u_lo = jnp.where(all_in, -jnp.inf, jnp.where(none, 0.0, log_u_lo))
  log_u_hi = jnp.where(all_in, -jnp.inf, jnp.where(none, 0.0, log_u_hi))
  r_hi = jnp.where(all_in | none, 1.0, r_hi)
  return _Tail(log_t_lo, log_t_hi, log_u_lo, log_u_hi, r_hi)



# --------------------------------------------------------------------------
# Truncated Poisson sampling
# --------------------------------------------------------------------------


class TruncatedPoissonPair(NamedTuple):
  """One-step dominating pair of the truncated Poisson-sampled Gaussian.

  A disjoint union of two blocks b ∈ {0, 1} (the block index is revealed),
  drawn with probabilities ``block_weights[..., b]``. In block b the pair is

      P_b = Σ_j p_weights[..., b, j] · N(means[..., b, j], σ²),   Q_b = N(0, σ²),

  with means in units of the clip norm (noise std σ·C): block 0 is the Poisson
  pair with rate q and shift 1, block 1 the Poisson pair with rate q' and
  shift 2. Its privacy loss distribution is the block-weighted mixture of the
  two blocks' loss distributions (and the same for the reverse order).
  ``block_weights``/``p_weights`` are accurate to ~1e-10 relative, rounded
  towards the side that gives more weight to the shift-2 component.
  """
  block_weights: jax.Array   # (..., 2): [1 - t, t]
  p_weights: jax.Array       # (..., 2, 2): [[1-q, q], [1-q', q']]
  means: jax.Array           # (..., 2, 2): [[0, 1], [0, 2]]


def _truncation_parameters(n, q, cap):
  """t = P(Bin(N-1, q) ≥ C) (brackets) and an upper bound on q'.

  q' = P(x in batch | K ≥ C, x sampled)·q = (C/N) P(Bin(N,q) ≥ C+1) / t
     = (C/N)(1 - (1-q) P(Bin(N-1,q) = C)/t)      (Bin(N) = Bin(N-1) + Bern(q)).
  """
  dtype = q.dtype
  qs = jnp.clip(q, jnp.finfo(dtype).tiny, 1.0 - jnp.finfo(dtype).epsneg)
  tail = _binomial_upper_tail(cap, n - 1.0, qs)
  q_prime = jnp.minimum(cap / n * tail.r_hi, 1.0)
  # q = 1: K = N-1 surely, t = 1[C ≤ N-1], q' = C/N.
  full = q >= 1.0
  sure = cap <= n - 1.0
  log_t_lo = jnp.where(full, jnp.where(sure, 0.0, -jnp.inf), tail.log_t_lo)
  log_t_hi = jnp.where(full, jnp.where(sure, 0.0, -jnp.inf), tail.log_t_hi)
  log_u_lo = jnp.where(full, jnp.where(sure, -jnp.inf, 0.0), tail.log_u_lo)
  log_u_hi = jnp.where(full, jnp.where(sure, -jnp.inf, 0.0), tail.log_u_hi)
  q_prime = jnp.where(full, jnp.minimum(cap / n, 1.0), q_prime)
  return log_t_lo, log_t_hi, log_u_lo, log_u_hi, q_prime


def _check_truncated(dataset_size, q, capacity):
  _check_common("dataset_size", dataset_size, low=1.0, integer=True)
  _check_common("q", q, low=0.0, high=1.0)
  _check_common("capacity", capacity, low=0.0, integer=True)


def truncated_poisson_pair(dataset_size, q, capacity) -> TruncatedPoissonPair:
  """Dominating pair of one step of truncated Poisson sampling (add/remove).

  Mechanism: each of the N examples is included independently with
  probability q; if more than C = ``capacity`` are included, a uniformly
  random C-subset is kept; the clipped sum gets N(0, σ²C²) noise.

  Derivation (x the differing example, D' = D ∪ {x}, N = ``|D'|``; K ~ Bin(N-1, q)
  the number of the other examples sampled, independent of x):

  * K < C (probability 1 - t): no truncation can involve x; D' gives S ∪ {x}
    w.p. q and S otherwise, D gives S: conditioned on S, the Poisson pair
    (1-q) N(0) + q N(1) vs N(0).
  * K ≥ C (probability t = P(Bin(N-1, q) ≥ C)): D's batch is a uniform
    C-subset of S, written T ∪ {y} (T a uniform (C-1)-subset, y uniform in
    S \\ T). D''s batch contains x with probability r_K = qC/(K+1) and is then
    T ∪ {x}; otherwise it is distributed as D's, T ∪ {y}. Given K ≥ C, (T, y)
    is a uniform draw from the other examples independent of K, so averaging
    over K inside each (T, y)-component gives (1-q') N(T+y) + q' N(T+x) vs
    N(T+y), q' = E[r_K | K ≥ C] = (C/N) P(Bin(N,q) ≥ C+1)/t, and ‖x - y‖ ≤ 2:
    the Poisson pair with rate q' and shift 2.

  Joint convexity over the conditioning (the event K ≥ C has the same
  probability under D and D') gives the disjoint union of the two blocks. This
  is the decomposition behind dp_accounting's
  ``from_truncated_subsampled_gaussian_mechanism`` (arXiv:2508.15089), except
  that dp_accounting's PLD uses the looser REPLACE pair (±shift on both sides)
  for the K ≥ C block. ``dataset_size`` is the size of the dataset containing
  x: a dataset of size N has neighbours giving N (removal) and N + 1
  (addition), and the bound is not monotone in N at every order, so account
  with the maximum over both.

  Args:
    dataset_size: N ≥ 1.
    q: sampling rate in [0, 1].
    capacity: C ≥ 0.

  Returns:
    :class:`TruncatedPoissonPair`, broadcast over the arguments.
  """
  _check_truncated(dataset_size, q, capacity)
  dtype = _dtype_of(dataset_size, q, capacity)
  return _pair_kernel(*(jnp.asarray(x).astype(dtype) for x in (dataset_size, q, capacity)))


@jax.jit
def _pair_kernel(n, q, cap):
  dtype = q.dtype
  n, q, cap = jnp.broadcast_arrays(n, q, cap)
  _, log_t_hi, _, log_u_lo, q_prime = _truncation_parameters(n, q, cap)
  t = jnp.exp(log_t_hi)
  u = jnp.exp(log_u_lo)
  t = jnp.where(q <= 0.0, 0.0, t)
  u = jnp.where(q <= 0.0, 1.0, u)
  block = jnp.stack([u, t], axis=-1)
  pw = jnp.stack([jnp.stack([1.0 - q, q], -1), jnp.stack([1.0 - q_prime, q_prime], -1)], axis=-2)
  means = jnp.broadcast_to(jnp.asarray([[0.0, 1.0], [0.0, 2.0]], dtype), pw.shape)
  return TruncatedPoissonPair(block, pw, means)


def truncated_poisson_gaussian(dataset_size, q, capacity, sigma, alpha):
  """RDP of one step of truncated Poisson sampling with Gaussian noise.

  With the blocks of :func:`truncated_poisson_pair` (add/remove, ``sigma`` =
  std / clip norm), the Rényi moments of a disjoint union add up:

      e^{(α-1)ε(α)} = (1-t) e^{(α-1) ε_SG(q, σ, α)} + t e^{(α-1) ε_SG(q', σ/2, α)},

  ε_SG = :func:`jaxdp.rdp.sampled_gaussian` (Mironov, Talwar & Zhang 2019;
  their Thm 5 makes the same expression bound both orders of the pair). t and
  q' are computed from rigorous brackets of the binomial tail (the bound is
  evaluated at both ends of t's bracket and the larger kept, with q''s upper
  end). C ≥ N gives ε_SG(q, σ, α); C = 0 or q = 0 gives 0. dp_accounting has
  no RDP for this event (its PLD accountant only); at t = 0 this equals its
  Poisson RDP.

  Args:
    dataset_size: N ≥ 1, the size of the dataset containing the differing
      example (take the maximum over N and N + 1 to cover both neighbours of
      a dataset of size N).
    q: sampling rate in [0, 1].
    capacity: maximum batch size C ≥ 0.
    sigma: noise multiplier > 0 (std / clip norm).
    alpha: order(s) > 1.

  Returns:
    RDP values, broadcast.
  """
  _check_truncated(dataset_size, q, capacity)
  _check_common("sigma", sigma, low=0.0, low_open=True)
  _check_common("alpha", alpha, low=1.0, low_open=True, allow_inf=True)
  dtype = _dtype_of(dataset_size, q, capacity, sigma, alpha)
  args = tuple(jnp.asarray(x).astype(dtype) for x in (dataset_size, q, capacity, sigma))
  if nx.is_concrete(alpha):
    a_np = np.asarray(alpha, np.float64)
    return _truncated_static(a_np.shape, tuple(a_np.ravel().tolist()))(*args)
  return _truncated_traced(*args, jnp.asarray(alpha).astype(dtype))


@functools.lru_cache(maxsize=64)
def _truncated_static(shape, values):
  """Jitted kernel for one concrete order array (exact integer-order paths)."""
  alpha_np = np.asarray(values, np.float64).reshape(shape)
  return jax.jit(lambda n, q, cap, sigma: _truncated_impl(n, q, cap, sigma, alpha_np))


@jax.jit
def _truncated_traced(n, q, cap, sigma, alpha):
  return _truncated_impl(n, q, cap, sigma, alpha)


def _truncated_impl(n, q, cap, sigma, alpha):
  dtype = sigma.dtype
  log_t_lo, log_t_hi, log_u_lo, log_u_hi, q_prime = _truncation_parameters(n, q, cap)
  # One sampled-Gaussian evaluation for both blocks (one compiled kernel).
  shape = jnp.broadcast_shapes(q.shape, q_prime.shape, sigma.shape, np.shape(alpha))
  both_q = jnp.stack([jnp.broadcast_to(q, shape), jnp.broadcast_to(q_prime, shape)])
  both_s = jnp.stack([jnp.broadcast_to(sigma, shape), jnp.broadcast_to(sigma / 2.0, shape)])
  eps = rdp.sampled_gaussian(both_q, both_s, alpha)
  eps1, eps2 = eps[0], eps[1]
  a = jnp.asarray(alpha).astype(dtype)
  beta = jnp.where(a > 1.0, a - 1.0, 1.0)
  x1 = beta * eps1
  x2 = beta * eps2

  def mix(log_u, log_t):
    inner = nx.log_add(log_u + nx.log_expm1(x1), log_t + nx.log_expm1(x2))
    return nx.softplus(inner) / beta

  out = jnp.maximum(mix(log_u_hi, log_t_lo), mix(log_u_lo, log_t_hi))
  out = jnp.where(jnp.isinf(eps1) | jnp.isinf(eps2), jnp.inf, out)
  out = jnp.maximum(out, 0.0) * rdp._safety(dtype)
  # Never worse than one unsubsampled step of sensitivity 2 (joint convexity).
  out = jnp.minimum(out, rdp.gaussian(sigma / 2.0, a))
  out = jnp.where((q <= 0.0) | (cap <= 0.0), 0.0, out)
  return jnp.where(a > 1.0, out, jnp.nan).astype(dtype)


# --------------------------------------------------------------------------
# Random allocation (balls-in-bins), one epoch
# --------------------------------------------------------------------------


def _expand_table(table, ndim_s, shape):
  """Prepends axes so that a table of shape S + (L,) broadcasts to shape + (L,)."""
  extra = len(shape) - ndim_s
  return table.reshape((1,) * extra + table.shape) if extra > 0 else table


def _log_poly_mul(a, b):
  """Product of two power series with non-negative coefficients, in log space,
  truncated to the common length L: out[j] = log Σ_{i≤j} e^{a[i] + b[j-i]}."""
  length = a.shape[-1]
  j = np.arange(length)[:, None]
  i = np.arange(length)[None, :]
  mask = jnp.asarray(i <= j)
  idx = np.where(i <= j, j - i, 0)
  terms = a[..., None, :] + b[..., idx]
  return _lse(jnp.where(mask, terms, -jnp.inf), axis=-1)


def _log_poly_pow(base, k, nbits: int):
  """base^k for a log-space series with base[0] = 0 (constant term 1) and
  integer-valued k ≥ 1 (may be traced; exact below 2^nbits), by squaring."""
  one = jnp.where(jnp.arange(base.shape[-1]) == 0, 0.0, -jnp.inf).astype(base.dtype)
  res = jnp.broadcast_to(one, base.shape)

  def body(_, carry):
    res, sq, rest = carry
    odd = jnp.mod(rest, 2.0) == 1.0
    res = jnp.where(odd[..., None], _log_poly_mul(res, sq), res)
    return res, _log_poly_mul(sq, sq), jnp.floor(rest / 2.0)

  res, _, _ = jax.lax.fori_loop(0, nbits, body, (res, base, k))
  return res


def _log_moments_of_mean(c, k, nmax: int, nbits: int):
  """log E[M^n], n = 0..nmax, for M = (1/k) Σ_{i≤k} L_i, L_i iid likelihood
  ratios dN(1,σ²)/dN(0,σ²) under N(0,σ²), c = 1/(2σ²).

  E[M^n] = Σ_j C(n,j) E[(M-1)^j] and the central moments are
  E[(M-1)^j] = j! [x^j] (1 + Σ_{l≥2} m_l x^l / (k^l l!))^k, m_l = E[(L-1)^l]
  ≥ 0 the forward differences: every term is non-negative, so E[M^n] - 1
  keeps full relative precision even when it is ~1e-12 (k ~ 1e9).

  Args:
    c, k: broadcast together (shape S); k integer-valued ≥ 1.
    nmax: static largest order.
    nbits: static bound on log2(k).

  Returns:
    log E[M^n], shape S + (nmax + 1,).
  """
  c, k = jnp.broadcast_arrays(c, k)
  dtype = c.dtype
  lvec = np.arange(nmax + 1, dtype=np.float64)
  fd = _log_forward_differences(c, nmax)
  log_u = fd - lvec * jnp.log(k)[..., None] - jnp.asarray(_np_lgamma(lvec + 1), dtype)
  log_u = log_u.at[..., 0].set(0.0)
  powk = _log_poly_pow(log_u, k, nbits)
  log_central = powk + jnp.asarray(_np_lgamma(lvec + 1), dtype)       # log E[(M-1)^j]
  nn, jj = lvec[:, None], lvec[None, :]
  with np.errstate(invalid="ignore"):
    lbin = np.where((jj <= nn) & (jj >= 2),
                    _np_lgamma(nn + 1) - _np_lgamma(jj + 1) - _np_lgamma(np.maximum(nn - jj, 0) + 1), -np.inf)
  terms = jnp.asarray(lbin, dtype) + log_central[..., None, :]
  return nx.softplus(_lse(terms, axis=-1))


def _interp_table(table, x):
  """Chord of a table of a convex function f(0..L-1) at real x ∈ [0, L-1]."""
  length = table.shape[-1]
  xs = jnp.clip(x, 0.0, length - 1.0)
  lo = jnp.floor(xs)
  f = xs - lo
  il = lo.astype(jnp.int32)
  ih = jnp.minimum(il + 1, length - 1)
  t_lo = jnp.take_along_axis(table, il[..., None], axis=-1)[..., 0]
  t_hi = jnp.take_along_axis(table, ih[..., None], axis=-1)[..., 0]
  return jnp.where(f > 0, (1.0 - f) * t_lo + f * t_hi, t_lo)


def _check_bins(dataset_size, batch_size):
  _check_common("dataset_size", dataset_size, low=1.0, integer=True)
  _check_common("batch_size", batch_size, low=1.0, integer=True)
  if nx.is_concrete(dataset_size) and nx.is_concrete(batch_size):
    if np.any(np.asarray(batch_size, np.float64) > np.asarray(dataset_size, np.float64)):
      raise ValueError(f"batch_size must be <= dataset_size; found {batch_size} > {dataset_size}.")


def balls_in_bins_gaussian_epoch(dataset_size, batch_size, sigma, alpha, direction="both"):
  """RDP of ONE epoch of random allocation ("balls-in-bins") with Gaussian noise.

  Each of the N examples is put in one of k = N // B steps uniformly and
  independently; each step releases its clipped sum plus N(0, σ²C²) noise
  (add/remove, ``sigma`` = std / C). Conditioned on the other examples'
  allocation (independent of x and common to both datasets) the epoch's
  output pair is, by joint convexity,

      P = (1/k) Σ_i N(e_i, σ² I_k)   (x present)   vs   Q = N(0, σ² I_k),

  attained with all other gradients 0 (Feldman & Shenfeld 2025,
  arXiv:2502.08202, random 1-of-k allocation). With L_i the per-step
  likelihood ratios under Q and M = (1/k) Σ L_i = dP/dQ:

  * remove, D_α(P‖Q) = log E[M^α]/(α-1): EXACT at integer α ≤ 256
    (E[M^α] = Σ_j C(α,j) E[(M-1)^j], central moments from a positive power
    series; equal to FS's multinomial sum over compositions of α, their
    Cor. 6.2); fractional α ≤ 256 take the chord of the convex log-moment
    between ⌊α⌋ and ⌈α⌉; α > 256 use the power-mean inequality
    M ≤ ((1/k) Σ L_i^{α/n})^{n/α} with n = 128, which turns into the exact
    order-n moment at σ' = σ n/α plus α(α/n - 1)/(2σ²).
  * add, D_α(Q‖P) = log E[M^{1-α}]/(α-1), bounded by the minimum of
    - AM–GM (M ≥ geometric mean): (α-1)/(2kσ²) + 1/(2σ²);
    - HM–AM (M ≥ harmonic mean, FS Cor. 6.2): 1/σ² + log E[M^{α-1}]/(α-1);
    - (float64 only) the certified quadrature of ``jaxdp._bins_add``:
    M^{1-α} = Γ(α-1)⁻¹ ∫ u^{α-2} e^{-uM} du turns E[M^{1-α}] into a 1-D
    integral of φ(u/k)^k, φ the Laplace transform of the lognormal L, and
    every discretisation, tail and rounding step is bounded upwards.
  * both bounded by the unamplified α/(2σ²) (joint quasi-convexity).

  THE GAP (closed at float64): AM–GM and HM–AM keep 1/(2σ²) per epoch as
  k → ∞ although the true D_α(Q‖P) → 0. The quadrature bound follows the
  true value (within ~0.1% of the exponent for α ≥ 1.5 in the tests; k = 1,
  2, 3 against independent references), so the add direction is no longer
  what dominates: N = 60000, B = 256, σ = 1.1, 2000 steps, δ = 1e-5 gives
  ε ≈ 1.04 (4.53 with the mean inequalities alone; Poisson at q = B/N:
  1.06). Under float32 the quadrature is not used (its round-off allowance
  assumes float64) and the gap remains. Feldman & Shenfeld's reduction to
  Poisson sampling is an (ε, δ) statement, not an RDP bound, and is not
  used. No Monte Carlo is involved anywhere.

  Args:
    dataset_size: N ≥ 1.
    batch_size: B in [1, N]; k = N // B steps per epoch.
    sigma: noise multiplier > 0 (std / clip norm).
    alpha: order(s) > 1.
    direction: "both" (default, the RDP), "remove" or "add".

  Returns:
    RDP of one epoch, broadcast. Compose epochs by adding.
  """
  if direction not in ("both", "remove", "add"):
    raise ValueError(f"direction must be 'both', 'remove' or 'add'; found {direction!r}.")
  _check_bins(dataset_size, batch_size)
  _check_common("sigma", sigma, low=0.0, low_open=True)
  _check_common("alpha", alpha, low=1.0, low_open=True, allow_inf=True)
  dtype = _dtype_of(dataset_size, batch_size, sigma, alpha)
  n = jnp.asarray(dataset_size).astype(dtype)
  b = jnp.asarray(batch_size).astype(dtype)
  k = jnp.maximum(jnp.floor(n / b), 1.0)
  sigma = jnp.asarray(sigma).astype(dtype)
  if nx.is_concrete(dataset_size) and nx.is_concrete(batch_size):
    kmax = int(np.max(np.asarray(dataset_size, np.float64) // np.asarray(batch_size, np.float64)))
    nbits = 32 if kmax < 2**32 else 53     # few distinct programs; unused bits cost little
  else:
    nbits = 53 if dtype == jnp.float64 else 24
  if nx.is_concrete(alpha):
    a_np = np.asarray(alpha, np.float64)
    fin = a_np[np.isfinite(a_np)]
    top = float(fin.max()) if fin.size else 2.0
    nmax = int(min(_MAX_FD_ORDER, max(2, math.ceil(top))))
    big = bool(top > _MAX_FD_ORDER)
    a = jnp.asarray(a_np, dtype)
  else:
    nmax, big = _MAX_FD_ORDER, True
    a = jnp.asarray(alpha).astype(dtype)
  rem, add = _bins_kernel(k, sigma, a, nmax=nmax, nbits=nbits, big=big)
  lm = {"remove": rem, "add": add, "both": jnp.maximum(rem, add)}[direction]
  out = jnp.maximum(lm / jnp.where(a > 1.0, a - 1.0, 1.0), 0.0) * rdp._safety(dtype)
  out = jnp.where(jnp.isinf(a), jnp.inf, out)
  return jnp.where(a > 1.0, out, jnp.nan).astype(dtype)


@functools.partial(jax.jit, static_argnames=("nmax", "nbits", "big"))
def _bins_kernel(k, sigma, alpha, nmax, nbits, big):
  """(α-1)-scaled RDP bounds of the two directions: (log E[M^α], log E[M^{1-α}])."""
  k_s, sigma_s = jnp.broadcast_arrays(k, sigma)
  c_s = 1.0 / (2.0 * sigma_s * sigma_s)
  log_mom = _log_moments_of_mean(c_s, k_s, nmax, nbits)             # shape S + (nmax+1,)
  shape = jnp.broadcast_shapes(k_s.shape, alpha.shape)
  k_b = jnp.broadcast_to(k_s, shape)
  c_b = jnp.broadcast_to(c_s, shape)
  a_b = jnp.broadcast_to(alpha, shape)
  table = jnp.broadcast_to(_expand_table(log_mom, k_s.ndim, shape), shape + (nmax + 1,))
  ok = jnp.isfinite(a_b) & (a_b > 1.0)
  a = jnp.where(ok, a_b, 2.0)
  beta = a - 1.0
  gauss = a * beta * c_b                                              # α(α-1)/(2σ²)
  # Remove direction: log E[M^α].
  rem = jnp.where(a <= nmax, _interp_table(table, a), jnp.inf)
  if big:
    npm = min(_POWER_MEAN_ORDER, nmax)
    p = jnp.maximum(a / npm, 1.0)
    mom_p = _log_moments_of_mean(c_b * p * p, k_b, npm, nbits)
    pm = a * (p - 1.0) * c_b + mom_p[..., npm]
    rem = jnp.minimum(rem, jnp.where(a > nmax, pm, jnp.inf))
  rem = jnp.minimum(rem, gauss)
  # Add direction: log E[M^{1-α}].
  amgm = beta * (c_b + beta * c_b / k_b)
  hmam = jnp.where(beta <= nmax, 2.0 * beta * c_b + _interp_table(table, beta), jnp.inf)
  add = jnp.minimum(jnp.minimum(amgm, hmam), gauss)
  if a.dtype == jnp.float64:   # certified only with float64 round-off (see jaxdp._bins_add)
    add = jnp.minimum(add, _bins_add.log_neg_moment_upper(k_s, sigma_s, a))   # one grid per (k, σ)
  return rem, add


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
  import mpmath as mp
  from scipy import special as sps
  from scipy import stats

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
  k, candidates = _shuffle_pairs(dataset_size, batch_size, relation)
  sigma = float(sigma)
  epochs = int(epochs)
  n_used = k * int(batch_size)
  n_pool = int(dataset_size) + (1 if relation == "add_remove" else 0)

  def log_exceed(tau, shift, w):
    # log P(max > τ) for one epoch, float64 via log_ndtr.
    base = (k - 1) * sps.log_ndtr(tau / sigma)
    log_f_used = sps.log_ndtr((tau - shift) / sigma) + base
    log_f_unused = sps.log_ndtr(tau / sigma) + base
    f_mix = np.logaddexp(np.log1p(-w) + log_f_unused, np.log(w) + log_f_used) if w < 1 else log_f_used
    return np.log(-np.expm1(f_mix))

  def exceed_mp(tau, shift):
    with mp.workdps(50):
      t, sg, sh = mp.mpf(tau), mp.mpf(sigma), mp.mpf(shift)
      ww = mp.mpf(n_used) / n_pool
      base = mp.ncdf(t / sg) ** (k - 1)
      f = (1 - ww) * mp.ncdf(t / sg) * base + ww * mp.ncdf((t - sh) / sg) * base
      return 1 - f

  xs = np.arange(epochs + 1)

  def hockey(lp, lq, eps):
    a = stats.binom.logpmf(xs, epochs, math.exp(lp))
    b = stats.binom.logpmf(xs, epochs, math.exp(lq))
    d = np.exp(a) - np.exp(eps + b)
    return float(np.sum(np.where(d > 0, d, 0.0)))

  def hockey_mp(p1, p2, eps):
    with mp.workdps(50):
      tot = mp.mpf(0)
      e = mp.e ** mp.mpf(eps)
      for x in range(epochs + 1):
        c = mp.binomial(epochs, x)
        d = c * p1 ** x * (1 - p1) ** (epochs - x) - e * c * p2 ** x * (1 - p2) ** (epochs - x)
        if d > 0:
          tot += d
      return tot

  def eps_for(lp, lq):
    if hockey(lp, lq, 0.0) <= delta:
      return 0.0
    lo, hi = 0.0, 1.0
    while hockey(lp, lq, hi) > delta and hi < 1e4:
      lo, hi = hi, 2.0 * hi
    for _ in range(60):
      mid = 0.5 * (lo + hi)
      if hockey(lp, lq, mid) > delta:
        lo = mid
      else:
        hi = mid
    return lo

  # Thresholds: quantiles of the null max over a wide range of tail masses.
  taus = [sigma * float(sps.ndtri(math.exp(math.log1p(-s) / k)))
          for s in np.exp(np.linspace(math.log(0.5), math.log(1e-12), 40))]
  best = (0.0, None)
  for w, s_1, s_2 in candidates:
    for tau in taus:
      l1, l2 = log_exceed(tau, s_1, w), log_exceed(tau, s_2, w)
      for a, b, order in ((l1, l2, 0), (l2, l1, 1)):
        e = eps_for(a, b)
        if e > best[0]:
          best = (e, (tau, order, s_1, s_2))
  eps, arg = best
  if arg is None:
    return 0.0
  tau, order, s_1, s_2 = arg
  p_1, p_2 = exceed_mp(tau, s_1), exceed_mp(tau, s_2)
  p1, p2 = (p_1, p_2) if order == 0 else (p_2, p_1)
  # Certify in 50-digit arithmetic, backing off until the violation is verified.
  cand = eps
  for _ in range(60):
    if hockey_mp(p1, p2, cand) > delta:
      return float(cand)
    cand = cand * (1.0 - 1e-6) - 1e-12 if cand > 1e-9 else 0.0
    if cand == 0.0:
      return 0.0
  return 0.0
