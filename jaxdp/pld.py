"""Tight composition via privacy-loss distributions (PLDs) composed by FFT.

The mechanism is the Poisson-subsampled Gaussian with add/remove neighbours
(L2 sensitivity 1, noise multiplier ``sigma``, sampling rate ``q``).  Its two
dominating directions are

* remove: P = (1-q) N(0, σ²) + q N(1, σ²)   vs   Q = N(0, σ²), and
* add:    P = N(0, σ²)                        vs   Q = (1-q) N(0, σ²) + q N(1, σ²).

In both the privacy loss ``L(x) = log P(x)/Q(x)`` is monotone in the output x,
so every loss bucket (ε_i, ε_{i+1}] is an interval of x whose P and Q masses are
differences of Gaussian CDFs.  The hockey-stick divergence of the T-fold
composition is (Balle, Barthe & Gaboardi 2018, Thm 1 / privacy profiles;
Koskela et al. 2020 for the FFT)

  δ_T(ε) = Σ_{ℓ > ε} p_T(ℓ) (1 - e^{ε-ℓ}) + p_T(∞),

where p_T is the T-fold convolution of the one-step P-distribution of the loss.
The answer is the maximum over the two directions.

Discretisation (uniform loss grid ε_i = i·h)
-------------------------------------------
*Pessimistic* (upper bound on δ).  Losses are moved UP onto the grid: the mass
of each bucket B_i = (ε_i, ε_{i+1}] is split between its two end points so that
both its P-mass and its Q-mass are preserved ("connect the dots", Doroshenko,
Ghazi, Kamath, Kumar & Manurangsi, PETS 2022):

  to ε_i:     α_i = (e^{ε_{i+1}} Q(B_i) - P(B_i)) / (e^h - 1),
  to ε_{i+1}: β_i = P(B_i) - α_i.

Splitting an atom is the inverse of a post-processing, so the split pair
dominates the mechanism (its profile is the chord interpolation of the true
profile in e^ε, which lies above the convex true profile); the error is
second order in h, instead of the first-order shift of plain rounding up.  Mass
below the grid is rounded up to the lowest grid point and mass above the grid
(a per-step tail of at most ``1e-17/T``) goes to the infinity atom.

*Optimistic* (lower ESTIMATE — not certified, see the caveat below).  The same interpolant lowered, at every grid
point, by the largest gap between the chord and the true convex profile on the
two adjacent buckets (the gap of bucket i is bounded by the tangent triangle,
``α_i β_i (e^h-1) / (α_i e^h + β_i)``), which keeps it below the true profile
everywhere; masses outside the grid are dropped.  Its error is also second order.

Caveat (known defect): the lowered chords need not be convex where the loss
density varies on the scale of h (the pile-up of the add direction's loss just
below -log(1-q)); they are convexified by a running minimum of the Q-tail
masses, clipped at zero at the top end, and that clipping can raise the
profile slightly (observed: up to ~0.1% of δ at ε = 0 for one step).  The
lower value is therefore an optimistic *estimate*, reported as
``min(lower, upper)``; only the upper value is a certified bound.

Composition
-----------
One real FFT of length N, the spectrum raised to the power T by binary
exponentiation (complex products only: no logarithm of a possibly vanishing
spectrum), one inverse.  Heterogeneous phases multiply their spectra.  The FFT
is cyclic, so the composed distribution is computed on a window
[a, a + N) of loss indices chosen by Chernoff bounds on the one-step PMF (as in
dp_accounting, with our own orders): the mass of the composed distribution
above the window is at most ``1e-17`` and is added to the infinity atom in the
pessimistic result; mass below the window wraps to its top (which can only
increase the pessimistic δ).  Composed infinity mass is ``1 - (1 - p_∞)^T``.

Grid size (``value_discretization_interval=None``)
----------------------------------------------------
Splitting a bucket's mass between its end points inflates the per-step loss
variance by at most ~h²/4, against a true per-step variance of about
``v = q² (e^{1/σ²} - 1)`` (the χ² divergence); the relative ε error is then
roughly ``0.1 h² / v`` independent of T (measured on DP-SGD configurations).
We take ``h = clip(sqrt(2 · rtol · v), 1e-6, 1e-2)``, enlarge it when one step
would need more than 2**22 grid points or the composed window more than 2**21,
and finally shrink it so that -log(1-q) is a grid point; see
:func:`grid_interval`.  With the default ``rtol = 1e-3`` the upper bound agrees
with dp_accounting's PLD accountant to ~1e-4 relative.

Round-off: bucket masses come from tail-aware Gaussian CDF differences (absolute
error ~1e-16 of the tail, not of 1); the FFT adds absolute errors ~1e-16·T per
grid point.  These are below 1e-12 in δ for the configurations we test and are
not separately certified.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr
from scipy import special as _sps  # host-side scalars only (ndtri)

from jaxdp import _numerics as num
from jaxdp import accountant as _accountant
from jaxdp import events as _events

__all__ = [
    "delta",
    "epsilon",
    "grid_interval",
    "make_accountant",
    "PLDState",
]

_TAIL = 1e-17          # truncated mass allowance (per tail, per composition)
_MAX_WINDOW = 2 ** 21  # largest composed grid
_MAX_ELEMS = 2 ** 23   # elements per kernel call (batch x grid), to bound memory


# --------------------------------------------------------------------------
# one-step loss geometry (pure, float64 inside host functions)
# --------------------------------------------------------------------------


def _loss_of_x(x, q, sigma):
  """Remove-direction loss L(x) = log(1 - q + q exp((2x - 1)/(2σ²)))."""
  return jnp.logaddexp(jnp.log1p(-q), jnp.log(q) + (2.0 * x - 1.0) / (2.0 * sigma ** 2))


def _x_of_loss(loss, q, sigma):
  """Inverse of :func:`_loss_of_x`; -inf for loss <= log(1 - q).

  x = σ² [ℓ + log(1 - (1-q) e^{-ℓ}) - log q] + 1/2, with the middle term
  evaluated as log1mexp(ℓ - log(1-q)) (exact near the lower end).
  """
  d = loss - jnp.log1p(-q)
  ok = d > 0
  dd = jnp.where(ok, d, 1.0)
  x = sigma ** 2 * (loss + num.log1mexp(dd) - jnp.log(q)) + 0.5
  return jnp.where(ok, x, -jnp.inf)


def _gauss_mass(lo, hi, mu, sigma):
  """N(mu, σ²) mass of [lo, hi], from the tail that keeps relative precision."""
  a = (lo - mu) / sigma
  b = (hi - mu) / sigma
  upper = a > 0
  return jnp.maximum(jnp.where(upper, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a)), 0.0)


def _pq_between(xlo, xhi, q, sigma):
  """(N(0,σ²) mass, mixture mass) of the x-interval [xlo, xhi]."""
  g0 = _gauss_mass(xlo, xhi, 0.0, sigma)
  g1 = _gauss_mass(xlo, xhi, 1.0, sigma)
  return g0, (1.0 - q) * g0 + q * g1


def _bucket_masses(e_lo, e_hi, q, sigma, remove):
  """P- and Q-masses of the loss bucket (e_lo, e_hi] in the given direction."""
  if remove:
    g0, mix = _pq_between(_x_of_loss(e_lo, q, sigma), _x_of_loss(e_hi, q, sigma), q, sigma)
    return mix, g0
  # add direction: L' = -L(x) with P = N(0, σ²).
  g0, mix = _pq_between(_x_of_loss(-e_hi, q, sigma), _x_of_loss(-e_lo, q, sigma), q, sigma)
  return g0, mix


def _grid_range(q, sigma, steps, h, remove):
  """Host: integer loss-grid range [i_lo, i_hi] of one step (NumPy, vectorised)."""
  q = np.asarray(q, np.float64)
  sigma = np.asarray(sigma, np.float64)
  tau = _TAIL / np.maximum(steps, 1.0)
  z = -_sps.ndtri(tau)

  def loss(x):
    with np.errstate(divide="ignore"):
      return np.logaddexp(np.log1p(-q), np.log(q) + (2.0 * x - 1.0) / (2.0 * sigma ** 2))

  if remove:
    lo = loss(-sigma * z)
    hi = loss(1.0 + sigma * z)
  else:
    lo = -loss(sigma * z)
    hi = -loss(-sigma * z)
  i_lo = np.floor(lo / h).astype(np.int64)
  i_hi = np.ceil(hi / h).astype(np.int64)
  i_hi = np.maximum(i_hi, i_lo + 2) + 2  # two empty buckets on top (optimistic end)
  return i_lo, i_hi


# --------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------


def _single_step(q, sigma, h, i_lo, n, *, n_pad, remove):
  """One-step pessimistic and optimistic PMFs on the grid (i_lo + j)·h.

  Returns:
    (p_pess, inf_pess, p_opt): p_* of shape (n_pad,), zero past index n - 1.
  """
  j = jnp.arange(n_pad)
  valid = j < n
  top = j == n - 1
  eps = (i_lo + j) * h
  # Node abscissae: bucket (ε_j, ε_{j+1}] is the x-interval [x_j, x_{j+1}]
  # (remove) or [y_{j+1}, y_j] with y_j = x(-ε_j) (add).  Gaussian CDF and
  # survival function are evaluated once per node and mean.
  xs = _x_of_loss(jnp.where(remove, eps, -eps), q, sigma)
  zero = jnp.zeros((1,), eps.dtype)

  def nxt(a):
    return jnp.concatenate([a[1:], zero])

  def cdf_sf(mu):
    z = (xs - mu) / sigma
    return ndtr(z), ndtr(-z), z

  def mass(mu):  # N(mu, σ²) mass of bucket j, from the accurate tail
    c, sf, z = cdf_sf(mu)
    rm_m = jnp.where(z > 0, sf - nxt(sf), nxt(c) - c)
    add_m = jnp.where(nxt(z) > 0, nxt(sf) - sf, c - nxt(c))
    m = jnp.where(remove, rm_m, add_m)
    return jnp.maximum(m, 0.0), c, sf

  m0, c0, s0 = mass(0.0)
  m1, c1, s1 = mass(1.0)
  mix = (1.0 - q) * m0 + q * m1
  pb = jnp.where(remove, mix, m0)
  qb = jnp.where(remove, m0, mix)
  inside = j < n - 1  # buckets (ε_j, ε_{j+1}] with both ends on the grid
  pb = jnp.where(inside, pb, 0.0)
  qb = jnp.where(inside, qb, 0.0)
  em1 = jnp.expm1(h)
  # β_j: share of bucket j moved up to ε_{j+1}.
  beta = (pb - jnp.exp(eps) * qb) * jnp.exp(h) / em1
  beta = jnp.clip(beta, 0.0, pb)
  alpha = pb - beta

  # P-mass outside the grid (below ε_0 / above ε_{n-1}).
  last = jnp.maximum(n - 1, 0)
  below = jnp.where(remove, (1.0 - q) * c0[0] + q * c1[0], s0[0])
  above = jnp.where(remove, (1.0 - q) * s0[last] + q * s1[last], c0[last])

  beta_prev = jnp.concatenate([jnp.zeros((1,), eps.dtype), beta[:-1]])
  p_in = jnp.where(valid, alpha + beta_prev, 0.0)
  p_pess = p_in.at[0].add(below)

  # Optimistic: lower the interpolant by c_j = max(gap_{j-1}, gap_j), c = 0 at
  # the top node (see module docstring).
  den = alpha * jnp.exp(h) + beta
  gap = jnp.where(den > 0, alpha * beta * em1 / jnp.where(den > 0, den, 1.0), 0.0)
  gap_prev = jnp.concatenate([jnp.zeros((1,), eps.dtype), gap[:-1]])
  c = jnp.where(valid & ~top, jnp.maximum(gap, gap_prev), 0.0)
  c_next = jnp.concatenate([c[1:], jnp.zeros((1,), eps.dtype)])
  c_prev = jnp.concatenate([c[:1], c[:-1]])  # c_{-1} := c_0
  corr = ((c_next - c) - jnp.exp(h) * (c - c_prev)) / em1
  p_raw = jnp.where(valid, p_in - corr, 0.0)
  # Convexify (the lowered chords need not be convex where the loss density
  # varies on the scale of h): with R_j the Q-mass at or above node j (minus
  # the slope of the profile just left of u_j), replace R by its running
  # minimum from the left.  This only raises slopes, so rebuilding the profile
  # from the top (where it is 0) only lowers it: it stays below the true one,
  # and every mass is >= 0.
  r = p_raw * jnp.exp(-eps)
  big_r = jnp.cumsum(r[::-1])[::-1]
  big_r = jnp.maximum(jax.lax.cummin(big_r), 0.0)
  r_new = big_r - jnp.concatenate([big_r[1:], jnp.zeros((1,), eps.dtype)])
  p_opt = jnp.where(valid, jnp.maximum(r_new, 0.0) * jnp.exp(eps), 0.0)
  # The P-mass removed above is put back at the lowest grid loss (it is lost
  # mass of losses >= ε_lo, moved down): dropping it would cost (1 - m)^T.
  deficit = jnp.maximum(jnp.sum(p_in) - jnp.sum(p_opt), 0.0)
  p_opt = p_opt.at[0].add(deficit)
  return p_pess, above, p_opt


def _window_bounds(p, i_lo, steps, h):
  """Chernoff window [a, b] (loss indices) holding all but _TAIL of each tail."""
  j = jnp.arange(p.shape[-1], dtype=p.dtype)
  theta = 4.0 ** jnp.arange(-1.0, 7.0)  # orders in loss units
  t = theta * h
  logp = num.safe_log(p)
  kpos = jax.nn.logsumexp(logp[None, :] + t[:, None] * j[None, :], axis=-1)
  kneg = jax.nn.logsumexp(logp[None, :] - t[:, None] * j[None, :], axis=-1)
  log_inv = -math.log(_TAIL)
  upper = jnp.min((steps * kpos + log_inv) / t)
  lower = -jnp.min((steps * kneg + log_inv) / t)
  n_nonzero = jnp.max(jnp.where(p > 0, j, 0.0))
  upper = jnp.minimum(upper, steps * n_nonzero)
  lower = jnp.maximum(lower, 0.0)
  return steps * i_lo + jnp.floor(lower), steps * i_lo + jnp.ceil(upper)


def _complex_power(z, n, nbits):
  """z ** n for integer n >= 0 (traced) by binary exponentiation."""

  def body(k, carry):
    acc, base = carry
    bit = (n >> k) & 1
    acc = jnp.where(bit == 1, acc * base, acc)
    return acc, base * base

  acc0 = jnp.ones_like(z)
  acc, _ = jax.lax.fori_loop(0, nbits, body, (acc0, z))
  return acc


def _compose(p, i_lo, steps, start, *, size, nbits):
  """Composes phases on a window of ``size`` loss indices starting at ``start``.

  Args:
    p: (phases, n_pad) one-step PMFs; phase k's entry j is loss (i_lo[k] + j)·h.
    i_lo: (phases,) int.  steps: (phases,) int.  start: int window start.
  Returns:
    (size,) composed PMF of the window.
  """
  j = jnp.arange(p.shape[-1])

  def spectrum(pk, lo, t):
    pos = jnp.mod(lo + j, size)
    folded = jax.ops.segment_sum(pk, pos, num_segments=size)
    return _complex_power(jnp.fft.rfft(folded), t, nbits)

  spec = jax.vmap(spectrum)(p, i_lo, steps)
  spec = jnp.prod(spec, axis=0)
  out = jnp.fft.irfft(spec, n=size)
  idx = jnp.mod(start + jnp.arange(size), size)
  return out[idx]


def _delta_on_window(w, start, h, inf_mass, eps):
  """δ(ε) = Σ_{ℓ>ε} w(ℓ)(1 - e^{ε-ℓ}) + inf_mass, for a vector of ε."""
  loss = (start + jnp.arange(w.shape[-1])) * h

  def one(e):
    d = jnp.where(loss > e, e - loss, 0.0)
    return jnp.sum(jnp.where(loss > e, w * (-jnp.expm1(d)), 0.0)) + inf_mass

  return jax.vmap(one)(eps)


def _epsilon_on_window(w, start, h, inf_mass, target):
  """Smallest ε with δ(ε) <= target (exact on the piecewise-exponential δ).

  A binary search over grid points uses δ(ε_k) from reverse cumulative sums;
  the final segment is then solved exactly with direct sums.
  """
  size = w.shape[-1]
  loss = (start + jnp.arange(size)) * h
  ref = loss[size // 2]
  # Tail sums over m > k:  S0_k = Σ w_m,  S1_k = Σ w_m e^{ref - ℓ_m}.
  s0 = jnp.cumsum(w[::-1])[::-1]
  s1 = jnp.cumsum((w * jnp.exp(jnp.clip(ref - loss, -700.0, 700.0)))[::-1])[::-1]
  s0 = jnp.concatenate([s0[1:], jnp.zeros((1,), w.dtype)])
  s1 = jnp.concatenate([s1[1:], jnp.zeros((1,), w.dtype)])
  d_grid = s0 - jnp.exp(jnp.clip(loss - ref, -700.0, 700.0)) * s1 + inf_mass
  # Largest k in [-1, size-1] with δ(ε_k) > target (δ is non-increasing); a
  # small relative margin keeps the search on the safe side of round-off.
  big = d_grid > target * (1.0 - 1e-9)
  k = jnp.max(jnp.where(big, jnp.arange(size), -1))
  # On (ε_k, ε_k + h]: δ(ε) = A - e^{ε - ε_k} C, with direct sums.
  e0 = (start + k) * h
  above = loss > e0
  a_mass = jnp.sum(jnp.where(above, w, 0.0)) + inf_mass
  c_mass = jnp.sum(jnp.where(above, w * jnp.exp(jnp.where(above, e0 - loss, 0.0)), 0.0))
  ratio = (a_mass - target) / jnp.where(c_mass > 0, c_mass, 1.0)
  x = jnp.log(jnp.where(ratio > 0, ratio, 1.0))
  eps = e0 + jnp.clip(x, 0.0, h)
  # Nudge up so that rounding never lands on the wrong side.
  eps = eps + 4.0 * jnp.finfo(eps.dtype).eps * jnp.maximum(jnp.abs(eps), 1.0)
  eps = jnp.where(inf_mass > target, jnp.inf, eps)
  return eps


@functools.partial(jax.jit, static_argnames=("n_pad",))
def _stage1(q, sigma, h, i_lo, n, steps, remove, *, n_pad):
  """Batched one-step PMFs and composed windows (``remove``: bool per row)."""

  def one(q, sigma, h, i_lo, n, steps, remove):
    p_pess, inf_pess, p_opt = _single_step(q, sigma, h, i_lo, n, n_pad=n_pad, remove=remove)
    a1, b1 = _window_bounds(p_pess, i_lo, steps, h)
    a2, b2 = _window_bounds(p_opt, i_lo, steps, h)
    return p_pess, inf_pess, p_opt, jnp.minimum(a1, a2), jnp.maximum(b1, b2)

  return jax.vmap(one)(q, sigma, h, i_lo, n, steps, remove)


def _compose_batch(p, i_lo, steps, start, *, size, nbits):
  return jax.vmap(
      functools.partial(_compose, size=size, nbits=nbits))(p, i_lo, steps, start)


_compose_batch = jax.jit(_compose_batch, static_argnames=("size", "nbits"))


@jax.jit
def _delta_batch(w, start, h, inf_mass, eps):
  return jax.vmap(_delta_on_window)(w, start, h, inf_mass, eps)


@jax.jit
def _epsilon_batch(w, start, h, inf_mass, target):
  return jax.vmap(jax.vmap(_epsilon_on_window, in_axes=(None, None, None, None, 0)))(
      w, start, h, inf_mass, target)


# --------------------------------------------------------------------------
# host orchestration
# --------------------------------------------------------------------------


def _loss_variance(q, sigma):
  """One-step loss variance proxy v = q² (e^{1/σ²} - 1) (χ² divergence)."""
  with np.errstate(over="ignore"):
    return np.minimum(q ** 2 * np.expm1(np.minimum(1.0 / sigma ** 2, 700.0)), 1e300)


def grid_interval(q, sigma, steps, rtol=1e-3):
  """Automatic loss-grid interval h for (q, σ, T) and a target relative accuracy.

  ``h = clip(sqrt(2 rtol v), 1e-6, 1e-2)`` with ``v = q² (e^{1/σ²} - 1)`` the
  one-step loss variance (relative ε error ≈ 0.1 h²/v, independent of T),
  enlarged when one step would need more than 2**22 grid points or the
  composed window more than 2**21, then aligned so that -log(1-q) is a grid
  point (module docstring).

  Args:
    q, sigma, steps: broadcastable arrays (host values).
    rtol: target relative width of the certified ε interval.
  Returns:
    NumPy float64 array of h (broadcast shape).
  """
  q, sigma, steps = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (q, sigma, steps)))
  v = _loss_variance(q, sigma)
  t = np.maximum(steps, 1.0)
  s = np.sqrt(t * v)
  h = np.clip(np.sqrt(2.0 * rtol * v), 1e-6, 1e-2)
  # Size caps: one-step span and composed window.
  i_lo, i_hi = _grid_range(q, sigma, t, 1.0, True)
  span = (i_hi - i_lo).astype(np.float64)
  window = np.minimum(40.0 * s + 2.0 * span, t * span)
  h = np.maximum(h, span / 2 ** 22)
  h = np.maximum(h, window / _MAX_WINDOW)
  # Align the grid with the largest add-direction loss -log(1-q), where that
  # direction's loss mass piles up (keeps the optimistic end tight).
  with np.errstate(divide="ignore"):
    top = -np.log1p(-q)
  ok = np.isfinite(top) & (top > 0)
  k = np.ceil(np.where(ok, top, 1.0) / h)
  return np.where(ok, np.where(ok, top, 1.0) / k, h)


def _pow2(n, least=2 ** 12):
  return 1 << int(max(int(n), least) - 1).bit_length()


def _padded(sel):
  """Pads an index batch to a power-of-two length (fewer compilations)."""
  m = _pow2(len(sel), least=1)
  return np.concatenate([sel, np.full(m - len(sel), sel[0])]), len(sel)


def _run(q, sigma, steps, h, queries, *, want_epsilon):
  """Composes U configurations (both directions) and answers (U, K) queries.

  Args:
    q, sigma, steps: (U, P) phases of each configuration (steps 0 = padding);
      (U,) is read as one phase.
    h: (U,) grid interval.  queries: (U, K) ε's or target δ's.
  Returns:
    (upper, lower) arrays of shape (U, K): for want_epsilon the ε bounds for
    target δ's, otherwise the δ bounds for given ε's.
  """
  q, sigma, steps = (np.asarray(a, np.float64).reshape(len(h), -1) for a in (q, sigma, steps))
  u_count, n_ph = q.shape
  k_count = queries.shape[1]
  upper = np.full((u_count, k_count), -np.inf)
  lower = np.full((u_count, k_count), -np.inf)
  hh_rows = np.repeat(h, n_ph)
  qf, sf, tf = q.ravel(), sigma.ravel(), steps.ravel()
  live = tf > 0
  for remove in (True, False):
    i_lo, i_hi = _grid_range(qf, sf, tf, hh_rows, remove)
    i_lo = np.where(live, i_lo, 0)
    n = np.where(live, i_hi - i_lo + 1, 1)
    n_pad = np.array([_pow2(k, least=2 ** 14) for k in n])
    rows = len(qf)
    p_pess = [np.zeros(1)] * rows
    p_opt = [np.zeros(1)] * rows
    inf1 = np.zeros(rows)
    a = np.zeros(rows)
    b = np.zeros(rows)
    for npd in np.unique(n_pad[live]):
      idx = np.nonzero((n_pad == npd) & live)[0]
      chunk = max(1, _MAX_ELEMS // int(npd))
      for c0 in range(0, len(idx), chunk):
        sel, m = _padded(idx[c0:c0 + chunk])
        out = _stage1(qf[sel], sf[sel], hh_rows[sel], i_lo[sel], n[sel], tf[sel],
                      np.full(len(sel), remove), n_pad=int(npd))
        pp, inf_p, po, aa, bb = (np.asarray(o)[:m] for o in out)
        sel = sel[:m]
        for r, k in enumerate(sel):
          p_pess[k] = pp[r, :n[k]]
          p_opt[k] = po[r, :n[k]]
        inf1[sel] = inf_p
        a[sel] = aa
        b[sel] = bb
    # Union bound over phases: the window of the sum is the sum of windows.
    a_cfg = a.reshape(u_count, n_ph).sum(1)
    b_cfg = b.reshape(u_count, n_ph).sum(1)
    log_keep = (steps * np.log1p(-inf1.reshape(u_count, n_ph))).sum(1)
    inf_cfg = -np.expm1(log_keep) + _TAIL * n_ph
    n_cfg = n.reshape(u_count, n_ph)
    lo_cfg = i_lo.reshape(u_count, n_ph)
    size = np.array([_pow2(k) for k in (b_cfg - a_cfg + 1)])
    for sz in np.unique(size):
      idx = np.nonzero(size == sz)[0]
      chunk = max(1, _MAX_ELEMS // (int(sz) * n_ph))
      for c0 in range(0, len(idx), chunk):
        sel, m = _padded(idx[c0:c0 + chunk])
        width = _pow2(np.max(n_cfg[sel]))
        pp = np.zeros((len(sel), n_ph, width))
        po = np.zeros((len(sel), n_ph, width))
        for r, k in enumerate(sel):
          for ph in range(n_ph):
            row = k * n_ph + ph
            pp[r, ph, :n[row]] = p_pess[row]
            po[r, ph, :n[row]] = p_opt[row]
        nbits = 40  # fixed (one compilation): steps < 2**40
        lo_ = jnp.asarray(lo_cfg[sel])
        st_ = jnp.asarray(steps[sel].astype(np.int64))
        start = jnp.asarray(a_cfg[sel].astype(np.int64))
        w_p = _compose_batch(jnp.asarray(pp), lo_, st_, start, size=int(sz), nbits=nbits)
        w_p = jnp.maximum(w_p, 0.0)
        w_o = _compose_batch(jnp.asarray(po), lo_, st_, start, size=int(sz), nbits=nbits)
        hh = jnp.asarray(h[sel])
        qq = jnp.asarray(queries[sel])
        inf_t = jnp.asarray(inf_cfg[sel])
        if want_epsilon:
          up = _epsilon_batch(w_p, start, hh, inf_t, qq)
          lo = _epsilon_batch(w_o, start, hh, jnp.zeros(len(sel)), qq)
        else:
          up = _delta_batch(w_p, start, hh, inf_t, qq)
          lo = _delta_batch(w_o, start, hh, jnp.zeros(len(sel)), qq)
        sel = sel[:m]
        upper[sel] = np.maximum(upper[sel], np.asarray(up)[:m])
        lower[sel] = np.maximum(lower[sel], np.asarray(lo)[:m])
  return upper, lower


def _prepare(q, sigma, steps, value, value_name, value_kw, value_discretization_interval, rtol):
  num.check_array("q", q, low=0.0, high=1.0)
  num.check_array("sigma", sigma, low=0.0, low_open=True)
  num.check_array("steps", steps, low=0.0, integer=True)
  num.check_array(value_name, value, **value_kw)
  if value_discretization_interval is not None:
    num.check_array("value_discretization_interval", value_discretization_interval,
                    low=0.0, low_open=True)
  num.check_array("rtol", rtol, low=0.0, low_open=True)
  shape = num.check_same_shape(q=q, sigma=sigma, steps=steps, **{value_name: value})
  arrs = [np.broadcast_to(np.asarray(x, np.float64), shape).ravel()
          for x in (q, sigma, steps, value)]
  q_, s_, t_, v_ = arrs
  t_ = np.round(t_)
  trivial = (q_ == 0) | (t_ == 0)
  keys = np.stack([q_, s_, t_], axis=1)
  cfg, inverse = np.unique(keys[~trivial], axis=0, return_inverse=True)
  inverse = inverse.reshape(-1)
  counts = np.bincount(inverse, minlength=len(cfg)) if len(cfg) else np.zeros(0, int)
  kmax = int(counts.max()) if len(cfg) else 0
  table = np.zeros((len(cfg), max(kmax, 1)))
  slot = np.zeros(len(inverse), dtype=np.int64)
  fill = np.zeros(len(cfg), dtype=np.int64)
  vals = v_[~trivial]
  for i, c in enumerate(inverse):
    slot[i] = fill[c]
    table[c, fill[c]] = vals[i]
    fill[c] += 1
  for c in range(len(cfg)):  # pad with a repeated valid query
    table[c, fill[c]:] = table[c, 0]
  if value_discretization_interval is None:
    h = grid_interval(cfg[:, 0], cfg[:, 1], cfg[:, 2], rtol) if len(cfg) else np.zeros(0)
  else:
    h = np.broadcast_to(np.asarray(value_discretization_interval, np.float64), shape).ravel()
    h = np.array([h[~trivial][np.nonzero(inverse == c)[0][0]] for c in range(len(cfg))])
  return shape, trivial, cfg, inverse, slot, table, h


@num.host_function
def delta(q, sigma, steps, epsilon, *, value_discretization_interval=None, rtol=1e-3,
          return_bounds=False):
  """δ(ε) of ``steps`` compositions of the Poisson-subsampled Gaussian (PLD, FFT).

  Batched over broadcast arrays of configurations: configurations sharing
  (q, σ, T) share one composed PLD; configurations are grouped by grid size
  and each group runs through vmapped, jitted kernels.

  Args:
    q: sampling rate in [0, 1].
    sigma: noise multiplier (> 0), L2 sensitivity 1.
    steps: number of compositions T (whole number >= 0).
    epsilon: ε >= 0 (may be +inf).
    value_discretization_interval: loss grid h; None picks it from
      :func:`grid_interval`.
    rtol: target relative accuracy used when h is picked automatically.
    return_bounds: also return the optimistic lower estimate.

  Returns:
    The pessimistic upper bound on δ(ε) (max over add/remove), or
    ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  shape, trivial, cfg, inverse, slot, table, h = _prepare(
      q, sigma, steps, epsilon, "epsilon", dict(low=0.0, allow_inf=True),
      value_discretization_interval, rtol)
  up = np.zeros(trivial.shape)
  lo = np.zeros(trivial.shape)
  if len(cfg):
    u, l = _run(cfg[:, 0], cfg[:, 1], cfg[:, 2], h, table, want_epsilon=False)
    up[~trivial] = u[inverse, slot]
    lo[~trivial] = l[inverse, slot]
  up = np.clip(up, 0.0, 1.0).reshape(shape)
  lo = np.minimum(np.clip(lo, 0.0, 1.0).reshape(shape), up)
  return (lo, up) if return_bounds else up


@num.host_function
def epsilon(q, sigma, steps, delta, *, value_discretization_interval=None, rtol=1e-3,
            return_bounds=False):
  """ε(δ) of ``steps`` compositions of the Poisson-subsampled Gaussian (PLD, FFT).

  The returned ε is the smallest ε at which the pessimistic PLD's δ(ε) is
  <= ``delta`` (solved exactly on the piecewise-exponential δ of the discrete
  PLD, then nudged up by a few ulps), so δ(ε) <= delta holds for the mechanism.
  +inf when the infinity mass alone exceeds ``delta``.

  Args:
    q, sigma, steps: as in :func:`delta`.
    delta: target δ in (0, 1].
    value_discretization_interval, rtol: as in :func:`delta`.
    return_bounds: also return the optimistic lower estimate.

  Returns:
    The upper bound on ε, or ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  shape, trivial, cfg, inverse, slot, table, h = _prepare(
      q, sigma, steps, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
      value_discretization_interval, rtol)
  up = np.zeros(trivial.shape)
  lo = np.zeros(trivial.shape)
  if len(cfg):
    u, l = _run(cfg[:, 0], cfg[:, 1], cfg[:, 2], h, table, want_epsilon=True)
    up[~trivial] = u[inverse, slot]
    lo[~trivial] = l[inverse, slot]
  up = np.maximum(up, 0.0).reshape(shape)
  lo = np.minimum(np.maximum(lo, 0.0).reshape(shape), up)
  return (lo, up) if return_bounds else up


# --------------------------------------------------------------------------
# host-side accountant
# --------------------------------------------------------------------------


class PLDState(NamedTuple):
  """State of the PLD accountant: the composed phases, ``((q, sigma, count), ...)``.

  The PLD is composed on query (one FFT per phase and direction, spectra
  multiplied), so ``compose`` is O(1) and the state is a small hashable tuple.
  """
  phases: tuple = ()


def _event_params(event):
  if isinstance(event, _events.SampledGaussian):
    q, sigma = float(event.q), float(event.sigma)
  elif isinstance(event, _events.Gaussian):
    q, sigma = 1.0, float(event.sigma)
  else:
    raise ValueError(
        f"event must be jaxdp.events.SampledGaussian or Gaussian; found {event!r}.")
  num.check_array("q", q, low=0.0, high=1.0)
  num.check_array("sigma", sigma, low=0.0, low_open=True)
  return q, sigma


def make_accountant(*, value_discretization_interval=None, rtol=1e-3):
  """Host-side PLD accountant: ``Accountant(init, compose, epsilon, delta)``.

  ``state = acc.compose(state, event, count)`` records the phase (consecutive
  identical events are merged); ``acc.epsilon(state, delta)`` and
  ``acc.delta(state, epsilon)`` compose all phases on one loss grid (the
  finest automatic grid of the phases unless given) by multiplying their
  spectra, and return the pessimistic bound (max over add/remove).

  Not jittable: the state holds concrete Python numbers.

  Args:
    value_discretization_interval: loss grid h; None = automatic.
    rtol: target relative accuracy for the automatic grid.
  """

  def init():
    return PLDState(())

  def compose(state, event, count=1):
    q, sigma = _event_params(event)
    num.check_array("count", count, low=0.0, integer=True)
    count = int(count)
    phases = list(state.phases)
    if count == 0 or q == 0.0:
      return PLDState(tuple(phases))
    if phases and phases[-1][:2] == (q, sigma):
      phases[-1] = (q, sigma, phases[-1][2] + count)
    else:
      phases.append((q, sigma, count))
    return PLDState(tuple(phases))

  def _query(state, value, want_epsilon):
    if not state.phases:
      return np.float64(0.0)
    q, sigma, steps = (np.array([[p[i] for p in state.phases]], np.float64) for i in range(3))
    if value_discretization_interval is None:
      h = np.min(grid_interval(q[0], sigma[0], steps[0], rtol))
      # Keep the composed window bounded for many phases as well.
      h = max(h, np.max(grid_interval(q[0], sigma[0], steps.sum(), rtol)) / 8.0)
    else:
      h = float(value_discretization_interval)
    up, _ = _run(q, sigma, steps, np.array([h]), np.array([[float(value)]]),
                 want_epsilon=want_epsilon)
    return up[0, 0]

  @num.host_function
  def epsilon(state, delta):
    num.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
    return max(_query(state, delta, True), 0.0)

  @num.host_function
  def delta(state, epsilon):
    num.check_array("epsilon", epsilon, low=0.0, allow_inf=True)
    return float(np.clip(_query(state, epsilon, False), 0.0, 1.0))

  return _accountant.Accountant(init, compose, epsilon, delta)
