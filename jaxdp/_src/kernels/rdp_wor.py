"""Sampling without replacement (replace-one) and the helpers it shares.

Holds the forward differences m_l = Δ^l g(0) of the Gaussian moment sequence
(used here and by the random-allocation moments of :mod:`jaxdp._src.kernels.rdp_bins`),
the Wang, Balle & Kasiviswanathan (AISTATS 2019, arXiv:1808.00087) Thm 27
bound for the Gaussian subsampled without replacement, computed as
dp_accounting 0.6 does (``_compute_rdp_sample_wor_gaussian``) but with
accurate forward differences, and the small helpers shared by the sampler
kernels (dtype, log-sum-exp, tolerances, argument checks). The public entry
point :func:`without_replacement_gaussian` is re-exported by
:mod:`jaxdp.rdp_samplers`, whose docstring states the conventions.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_binomial
from jaxdp._src.kernels import rdp_common
from jaxdp._src.core import persist

# Forward differences of the Gaussian moments are computed up to this order
# (WBK Thm 27 uses them up to order 256, as dp_accounting does; the exact
# random-allocation moments use them up to the same order).
_MAX_FD_ORDER = 256
# Integer orders above this use the plain WBK terms (dp_accounting's switch).
_WBK_FD_MAX_ALPHA = 256
# Largest order summed term by term in WBK for traced orders (static size).
_WBK_TRACED_MAX_ALPHA = 4096
# Hard cap on the static size of the WBK sum for concrete orders.
_WBK_MAX_TERMS = 1 << 16


def _dtype_of(*xs):
  return rdp_common.result_float_dtype(*(jnp.asarray(x) for x in xs))


def _lse(x, axis=-1):
  return rdp_common.log_sum_exp(x, axis=axis)


def _tol(dtype):
  """Relative accuracy demanded of the internal tables in ``dtype``."""
  return 1e-12 if jnp.finfo(dtype).eps < 1e-10 else 1e-4


def _expand_table(table, ndim_s, shape):
  """Prepends axes so that a table of shape S + (L,) broadcasts to shape + (L,)."""
  extra = len(shape) - ndim_s
  return table.reshape((1,) * extra + table.shape) if extra > 0 else table


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
  cc = c[..., None, None]
  terms = jnp.asarray(logc, dtype) + jnp.asarray(ii * (ii - 1), dtype) * cc
  top = jnp.max(terms, axis=-1, keepdims=True)
  scaled = jnp.where(jnp.asarray(valid), jnp.exp(terms - top), 0.0)
  # Both sums as one product with [(-1)^i, 1]: (-1)^(l-i) = (-1)^l (-1)^i. (Two
  # fused reductions over `scaled` gave wrong float32 sums on XLA CPU, jax
  # 0.10.2, in some compiled programs: log m_2 = -0.287 for 0.846 at σ = 0.91.)
  cols = jnp.asarray(np.stack([(-1.0) ** l, np.ones_like(l)], axis=-1), dtype)
  sums = jnp.einsum("...li,ik->...lk", scaled, cols, precision=jax.lax.Precision.HIGHEST)
  signed = jnp.asarray((-1.0) ** l, dtype) * sums[..., 0]
  absolute = sums[..., 1]
  top = top[..., 0]
  log_a = nx.safe_log(jnp.abs(signed)) + top
  log_abs = jnp.log(absolute) + top
  # Summation rounding, plus each term's own: exp(terms - top) is off by
  # ~2·eps·(top + 1) relative (logc and i(i-1)c rounded, 0 ≤ terms ≤ top).
  err_a = eps * (lmax + 1 + 2.0 * (top + 1.0)) * absolute / jnp.abs(signed)
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
  log_binom, gamma_err = rdp_binomial.log_binomial(ex(a), i)
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
  terms = i * ex(log_q) + log_binom + b
  # i·log q, log C(a, i) and b (~ i²c) cancel at large a: each term carries the
  # rounding allowance of its parts (as rdp's binomial sum does).
  parts = jnp.abs(i * ex(log_q)) + jnp.abs(log_binom) + jnp.abs(b)
  terms = terms + nx.rounding_allowance(parts, terms) + gamma_err
  terms = jnp.where(valid, terms, -jnp.inf)
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
  and x's +1 (tests/kernels/test_rdp_samplers.py).

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


@functools.partial(persist.jit, static_argnames=("max_terms",))
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
  out = jnp.maximum(out, 0.0) * rdp_common.safety_factor(dtype)
  out = jnp.where(q <= 0.0, 0.0, out)
  out = jnp.where(alpha > 1.0, out, jnp.nan)
  return out.astype(dtype)
