"""Truncated Poisson sampling: binomial-tail brackets and the one-step bound.

Holds rigorous brackets of the binomial upper tail P(Bin(n, p) ≥ k) (pmf in
Loader's 2000 saddle-point form, explicit terms plus a geometric remainder)
and the truncated Poisson-sampled Gaussian: the disjoint two-block dominating
pair (:class:`TruncatedPoissonPair`, the decomposition behind dp_accounting's
``from_truncated_subsampled_gaussian_mechanism``, arXiv:2508.15089) and its
RDP from Mironov, Talwar & Zhang (2019) sampled-Gaussian moments. The public
names are re-exported by :mod:`jaxdp.rdp_samplers`, whose docstring states
the conventions. The brackets and the mixture are written against an array
namespace ``xp``: host-level callers (a sampler's ε, its dominating pair, the
overflow term of the bins coupling) run them in NumPy, nothing compiled
(:func:`truncated_poisson_gaussian_host`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_common
from jaxdp._src.kernels.rdp_wor import _check_common, _dtype_of, _tol
from jaxdp._src.core import persist


def _lse(x, xp):
  return rdp_common.log_sum_exp(x, -1, xp)


# Terms summed on each side of the binomial tail (static size).
_TAIL_TERMS = 4096


# --------------------------------------------------------------------------
# Binomial tails (for truncated Poisson sampling)
# --------------------------------------------------------------------------


def _gammaln(xp):
  if xp is jnp:
    return gammaln
  from scipy import special  # pylint: disable=g-import-not-at-top
  return special.gammaln


def _stirlerr(x, xp=jnp):
  """log(x!) - [(x + 1/2) log x - x + log √(2π)] for x ≥ 1 (Loader 2000)."""
  x = xp.asarray(x)
  big = x >= 16.0
  xb = xp.where(big, x, 16.0)
  xs = xp.where(big, 1.0, xp.maximum(x, 1.0))
  inv = 1.0 / xb
  inv2 = inv * inv
  series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 / 1188))))
  direct = _gammaln(xp)(xs + 1.0) - (xs + 0.5) * xp.log(xs) + xs - 0.5 * math.log(2.0 * math.pi)
  return xp.where(big, series, direct)


def _bd0(x, m, xp=jnp):
  """x log(x/m) + m - x ≥ 0, without cancellation when x ≈ m (Loader 2000)."""
  near = xp.abs(x - m) < 0.1 * (x + m)
  xn = xp.where(near, x, 1.0)
  mn = xp.where(near, m, 2.0)
  v = (xn - mn) / (xn + mn)
  v2 = v * v
  s = (xn - mn) * v
  term = 2.0 * xn * v
  acc = s
  for j in range(1, 40):
    term = term * v2
    acc = acc + term / (2.0 * j + 1.0)
  xf = xp.where(near, 1.0, x)
  mf = xp.where(near, 1.0, m)
  far = xf * (nx.safe_log(xf, xp) - xp.log(mf)) + mf - xf
  far = xp.where(xf == 0.0, mf, far)
  return xp.where(near, acc, far)


def _log_binom_pmf(k, n, p, xp=jnp):
  """log P(Bin(n, p) = k) for 0 < p < 1 and integers 0 ≤ k ≤ n (Loader's
  saddle-point form, relative error ~1e-14 even for n ~ 1e9); -inf outside."""
  inside = (k >= 0) & (k <= n)
  mid = inside & (k >= 1) & (k <= n - 1)
  km = xp.where(mid, k, 1.0)
  nm = xp.where(mid, n, 2.0)
  log_mid = (_stirlerr(nm, xp) - _stirlerr(km, xp) - _stirlerr(nm - km, xp) - _bd0(km, nm * p, xp)
             - _bd0(nm - km, nm * (1.0 - p), xp) + 0.5 * (xp.log(nm) - xp.log(2.0 * math.pi * km * (nm - km))))
  log_end0 = n * nx.log1p(-p, xp)
  log_endn = n * xp.log(p)
  out = xp.where(k == 0, log_end0, xp.where(k == n, log_endn, log_mid))
  return xp.where(inside, out, -xp.inf)


class _Tail(NamedTuple):
  """Rigorous brackets of t = P(Bin(n, p) ≥ k) and u = 1 - t (logs), and an
  upper bound on r = 1 - (1-p) P(Bin(n,p) = k) / t ∈ [p, 1]."""
  log_t_lo: jax.Array
  log_t_hi: jax.Array
  log_u_lo: jax.Array
  log_u_hi: jax.Array
  r_hi: jax.Array


def _binomial_upper_tail(k, n, p, terms=_TAIL_TERMS, xp=jnp):
  """Brackets of P(Bin(n, p) ≥ k), by summing ``terms`` pmf values outward
  from k (upwards when k is above the mode, else the complementary lower tail
  downwards from k - 1) and bounding the remainder by a geometric series (the
  successive pmf ratios are monotone away from the mode).

  Args:
    k, n, p: broadcast together; integers k, n (as floats), 0 < p < 1.
    terms: static number of explicit terms.
    xp: array namespace (``jnp``, or ``numpy`` for the host).

  Returns:
    :class:`_Tail`.
  """
  k, n, p = xp.broadcast_arrays(k, n, p)
  dtype = p.dtype
  tol = _tol(dtype)
  ex = lambda x: x[..., None]
  log_pk = _log_binom_pmf(k, n, p, xp)
  logit = xp.log(p) - nx.log1p(-p, xp)
  j = xp.arange(terms, dtype=dtype)
  # Upper: pmf(k + j) = pmf(k) Π_{x=k}^{k+j-1} r_x, r_x = (n-x) p / ((x+1)(1-p)).
  x_up = ex(k) + j
  log_r_up = nx.safe_log(ex(n) - x_up, xp) - xp.log(x_up + 1.0) + ex(logit)
  cum_up = xp.cumsum(log_r_up, axis=-1)
  rel_up = xp.concatenate([xp.zeros_like(cum_up[..., :1]), cum_up[..., :-1]], axis=-1)
  s_up = _lse(rel_up, xp)                          # Σ pmf(k+j)/pmf(k), j < terms
  s_up_tail = _lse(rel_up[..., 1:], xp)            # the same without j = 0
  log_r_last = log_r_up[..., -1]               # ratio at x = k + terms - 1
  log_next = cum_up[..., -1]                   # pmf(k+terms)/pmf(k)
  rem_up = xp.where(log_r_last < 0.0,
                     log_next - nx.log1mexp(-xp.where(log_r_last < 0.0, log_r_last, -1.0), xp), xp.inf)
  rem_up = xp.where(log_next == -xp.inf, -xp.inf, rem_up)
  # Lower: pmf(k-1-j) = pmf(k) Π_{x=k-j}^{k} d_x, d_x = x (1-p) / ((n-x+1) p).
  x_dn = ex(k) - j
  log_d = nx.safe_log(x_dn, xp) - xp.log(ex(n) - x_dn + 1.0) - ex(logit)
  cum_dn = xp.cumsum(log_d, axis=-1)          # pmf(k-1-j)/pmf(k)
  s_dn = _lse(cum_dn, xp)
  log_d_next = nx.safe_log(ex(k) - terms, xp) - xp.log(ex(n) - ex(k) + terms + 1.0) - ex(logit)
  log_d_next = log_d_next[..., 0]
  rem_dn = xp.where(log_d_next < 0.0, cum_dn[..., -1] + log_d_next
                     - nx.log1mexp(-xp.where(log_d_next < 0.0, log_d_next, -1.0), xp), xp.inf)
  rem_dn = xp.where(k - terms <= 0.0, -xp.inf, rem_dn)
  mode = xp.floor((n + 1.0) * p)
  upper = k > mode
  # Upper branch: t = pmf(k) (S + R).
  log_t_lo_u = log_pk + s_up
  log_t_hi_u = log_pk + nx.log_add(s_up, rem_up, xp)
  # Lower branch: u = 1 - t = pmf(k) (S + R).
  log_u_lo_l = log_pk + s_dn
  log_u_hi_l = log_pk + nx.log_add(s_dn, rem_dn, xp)
  neg = lambda log_x: nx.safe_log(-xp.expm1(xp.minimum(log_x, 0.0)), xp)   # log(1 - e^x)
  log_t_lo = xp.where(upper, log_t_lo_u, neg(log_u_hi_l))
  log_t_hi = xp.where(upper, log_t_hi_u, neg(log_u_lo_l))
  log_u_lo = xp.where(upper, neg(log_t_hi_u), log_u_lo_l)
  log_u_hi = xp.where(upper, neg(log_t_lo_u), log_u_hi_l)
  # r = 1 - (1-p) pmf(k)/t, increasing in t. Upper branch: t = pmf(k)(1 + E)
  # with E = Σ_{j≥1} pmf(k+j)/pmf(k) ≥ 0, so r = (E + p)/(1 + E) exactly
  # (no cancellation for tiny p). Lower branch: t ≳ 1/2 and r ≥ p ≳ 1/n.
  log_e_hi = nx.log_add(s_up_tail, rem_up, xp)
  e_hi = xp.exp(xp.minimum(log_e_hi, 700.0))
  r_up = xp.where(log_e_hi > 700.0, 1.0, (e_hi + p) / (1.0 + e_hi))
  r_dn = 1.0 - (1.0 - p) * xp.exp(xp.minimum(log_pk - neg(log_u_lo_l), 0.0))
  r_hi = xp.where(upper, r_up, r_dn)
  # Rounding margins (relative).
  pad = 10.0 * tol
  log_t_lo = log_t_lo - pad
  log_u_lo = log_u_lo - pad
  log_t_hi = xp.minimum(log_t_hi + pad, 0.0)
  log_u_hi = xp.minimum(log_u_hi + pad, 0.0)
  r_hi = xp.minimum(r_hi * (1.0 + pad), 1.0)
  # k ≤ 0: t = 1 exactly; k > n: t = 0 exactly.
  all_in = k <= 0.0
  none = k > n
  log_t_lo = xp.where(all_in, 0.0, xp.where(none, -xp.inf, log_t_lo))
  log_t_hi = xp.where(all_in, 0.0, xp.where(none, -xp.inf, log_t_hi))
  log_u_lo = xp.where(all_in, -xp.inf, xp.where(none, 0.0, log_u_lo))
  log_u_hi = xp.where(all_in, -xp.inf, xp.where(none, 0.0, log_u_hi))
  r_hi = xp.where(all_in | none, 1.0, r_hi)
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


def _truncation_parameters(n, q, cap, xp=jnp):
  """t = P(Bin(N-1, q) ≥ C) (brackets) and an upper bound on q'.

  q' = P(x in batch | K ≥ C, x sampled)·q = (C/N) P(Bin(N,q) ≥ C+1) / t
     = (C/N)(1 - (1-q) P(Bin(N-1,q) = C)/t)      (Bin(N) = Bin(N-1) + Bern(q)).
  """
  dtype = q.dtype
  qs = xp.clip(q, xp.finfo(dtype).tiny, 1.0 - xp.finfo(dtype).epsneg)
  tail = _binomial_upper_tail(cap, n - 1.0, qs, xp=xp)
  q_prime = xp.minimum(cap / n * tail.r_hi, 1.0)
  # q = 1: K = N-1 surely, t = 1[C ≤ N-1], q' = C/N.
  full = q >= 1.0
  sure = cap <= n - 1.0
  log_t_lo = xp.where(full, xp.where(sure, 0.0, -xp.inf), tail.log_t_lo)
  log_t_hi = xp.where(full, xp.where(sure, 0.0, -xp.inf), tail.log_t_hi)
  log_u_lo = xp.where(full, xp.where(sure, -xp.inf, 0.0), tail.log_u_lo)
  log_u_hi = xp.where(full, xp.where(sure, -xp.inf, 0.0), tail.log_u_hi)
  q_prime = xp.where(full, xp.minimum(cap / n, 1.0), q_prime)
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


@persist.jit
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
  return persist.jit(lambda n, q, cap, sigma: _truncated_impl(n, q, cap, sigma, alpha_np))


@persist.jit
def _truncated_traced(n, q, cap, sigma, alpha):
  return _truncated_impl(n, q, cap, sigma, alpha)


def _truncated_impl(n, q, cap, sigma, alpha):
  log_t_lo, log_t_hi, log_u_lo, log_u_hi, q_prime = _truncation_parameters(n, q, cap)
  # One sampled-Gaussian evaluation for both blocks (one compiled kernel).
  shape = jnp.broadcast_shapes(q.shape, q_prime.shape, sigma.shape, np.shape(alpha))
  both_q = jnp.stack([jnp.broadcast_to(q, shape), jnp.broadcast_to(q_prime, shape)])
  both_s = jnp.stack([jnp.broadcast_to(sigma, shape), jnp.broadcast_to(sigma / 2.0, shape)])
  eps = rdp.sampled_gaussian(both_q, both_s, alpha)
  return _mix((log_t_lo, log_t_hi, log_u_lo, log_u_hi), eps[0], eps[1], q, cap, sigma,
              jnp.asarray(alpha).astype(sigma.dtype), jnp)


def _mix(logs, eps1, eps2, q, cap, sigma, a, xp):
  """The two blocks' RDP ``eps1`` (rate q, σ) and ``eps2`` (rate q', σ/2)
  mixed by the brackets ``logs`` of t and 1 - t (the larger end kept),
  rounded up, capped by one unsubsampled step of sensitivity 2."""
  log_t_lo, log_t_hi, log_u_lo, log_u_hi = logs
  dtype = sigma.dtype
  beta = xp.where(a > 1.0, a - 1.0, 1.0)
  x1 = beta * eps1
  x2 = beta * eps2

  def mix(log_u, log_t):
    inner = nx.log_add(log_u + nx.log_expm1(x1, xp), log_t + nx.log_expm1(x2, xp), xp)
    return nx.softplus(inner, xp) / beta

  with np.errstate(all="ignore"):
    out = xp.maximum(mix(log_u_hi, log_t_lo), mix(log_u_lo, log_t_hi))
    out = xp.where(xp.isinf(eps1) | xp.isinf(eps2), xp.inf, out)
    out = xp.maximum(out, 0.0) * rdp_common.safety_factor(dtype)
    # Never worse than one unsubsampled step of sensitivity 2 (joint convexity).
    out = xp.minimum(out, rdp_common.gaussian_rdp(sigma / 2.0, a, dtype))
    out = xp.where((q <= 0.0) | (cap <= 0.0), 0.0, out)
    return xp.where(a > 1.0, out, xp.nan).astype(dtype)


def truncated_poisson_gaussian_host(dataset_size, q, capacity, sigma, orders, plain=None):
  """:func:`truncated_poisson_gaussian` of one configuration (Python scalars)
  at the 1-D float64 ``orders``, in NumPy: the same formulas (the binomial-tail
  brackets, the two blocks' sampled-Gaussian RDP by
  :func:`jaxdp._src.kernels.host_rdp.per_step_rdp`, each block with its own
  quadrature nodes, and the same mixture and rounding), nothing compiled.
  Agrees with the compiled kernel to ~1e-10 relative (tested). ``plain``:
  the block-0 curve ``per_step_rdp(q, σ, orders)`` if the caller has it
  already (it does not depend on N)."""
  from jaxdp._src.kernels import host_rdp  # pylint: disable=g-import-not-at-top
  f = lambda v: np.asarray(v, np.float64).reshape(1)
  n, q, cap, sigma = (f(v) for v in (dataset_size, q, capacity, sigma))
  orders = np.asarray(orders, np.float64)
  with np.errstate(all="ignore"):
    log_t_lo, log_t_hi, log_u_lo, log_u_hi, q_prime = _truncation_parameters(n, q, cap, np)
  eps1 = (host_rdp.per_step_rdp(q, sigma, orders) if plain is None
          else np.asarray(plain, np.float64).reshape(1, -1))
  eps2 = host_rdp.per_step_rdp(np.asarray(q_prime, np.float64).reshape(1), sigma / 2.0, orders)
  col = lambda v: np.asarray(v, np.float64).reshape(1, 1)
  logs = tuple(col(v) for v in (log_t_lo, log_t_hi, log_u_lo, log_u_hi))
  return _mix(logs, eps1, eps2, col(q), col(cap), col(sigma), orders[None, :], np)[0]
