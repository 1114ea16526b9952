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

*Optimistic* (certified lower bound on δ).  A valid pair Z on the same nodes
whose privacy profile D(u) (u = e^ε) lies below the true profile δ(u) for
EVERY u >= 0 (ε of either sign).  By Blackwell's theorem for dichotomies
(Dong, Roth & Su, JRSS-B 2022, Thm 2.10: pointwise-ordered trade-off
functions, equivalently hockey-stick profiles, imply a post-processing) Z is
a post-processing of the mechanism, hence Z^T is one of the T-fold
composition and δ_{Z^T}(ε) <= δ_T(ε) for all ε.  Z is built from its
profile: D is piecewise linear in u with kinks only at the nodes u_j,
D(0) = 1, D = 0 beyond the top node, D convex, max(0, 1-u) <= D <= δ.  Its
node values are D_j = δ(u_j) - E_j with slacks E_j >= 0 chosen so that

* (C1) the chord of D on each bucket stays below δ: with the tangent gaps
  a_j = δ(u_{j+1}) - T_j(u_{j+1}) = e^{ε_{j+1}} Q(B_j) - P(B_j) and
  b_j = δ(u_j) - T_{j+1}(u_j) = P(B_j) - e^{ε_j} Q(B_j) (T_j the tangent of δ
  at u_j, slope -Q(L > ε_j)), the worst case over all convex δ with these
  end slopes and chord is covered when E_j/b_j + E_{j+1}/a_j >= 1; we require
  E_j >= θ_j b_j and E_{j+1} >= (1 - θ_j) a_j, θ_j = a_j/(a_j+b_j) where
  possible, otherwise moved so the neighbours can absorb the burden;
* (C2) every chord slope stays inside its bucket's slope range
  [Q(L > ε_{j+1}), Q(L > ε_j)], i.e. -b_j <= E_{j+1} - E_j <= a_j, which makes
  D convex (all node masses >= 0); enforced by max-plus envelopes;
* (caps) E_j <= min(δ(u_j), δ(u_j) - (1 - u_j)), with E_0 and E_top fixed
  by D(0) = 1 and D(u_top) = 0.

The node P-masses are e^{ε_j} times the slope jumps of D; they are the
connect-the-dots masses α_j + β_{j-1} plus a local correction from the
second differences of E, and sum to 1.  The slacks are of the order of the
tangent gaps, so the error is second order in h like the pessimistic one
(measured interval widths ~5e-4 relative in ε at the default rtol).  Where
the slack problem is infeasible (grids much coarser than the loss spread)
a flagged fallback rounds every bucket's P-mass down to its lower node
(first order; certified by stochastic dominance, since
(1 - e^{ε-ℓ})_+ is non-decreasing in ℓ).  The optimistic δ has no infinity
atom (the Poisson-sampled Gaussian has none in either direction).

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
For the optimistic δ, mass wrapped from below the window to its top (at most
``1e-17`` per phase by the same Chernoff bound) is subtracted from δ, and mass
wrapped from above to the bottom only lowers it.

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
error ~1e-16 of the tail, not of 1); the FFT adds absolute errors of the order
of machine epsilon times the largest composed mass per grid point.  The
pessimistic δ is not separately corrected (errors below 1e-12 in the tested
configurations).  The optimistic δ is lowered by an empirical allowance,
``4 · N · max(-min(w), eps_machine · max(w))`` for a composed window w of N
points (typically 1e-13 to 1e-11 absolute; not a proven bound), and the
optimistic slacks carry a 1e-6 relative margin against the round-off in the
tangent gaps where the caps allow.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

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

  # Optimistic (certified lower bound, module docstring): node slacks E_j.
  q_below = jnp.where(remove, c0[0], (1.0 - q) * s0[0] + q * s1[0])
  q_above = jnp.where(remove, s0[last], (1.0 - q) * c0[last] + q * c1[last])
  p_opt, feasible = _optimistic(pb, qb, below, q_below, above, q_above, eps, h, n)
  # Fallback (flagged infeasible slack problem, only for grids much coarser
  # than the loss spread): plain rounding down of every bucket's P-mass to its
  # lower node, above-grid mass to the top node, below-grid mass dropped.
  p_down = jnp.where(inside, pb, 0.0) + jnp.where(top, above, 0.0)
  p_opt = jnp.where(feasible, p_opt, jnp.where(valid, p_down, 0.0))
  return p_pess, above, p_opt


def _scan_minplus(cap, w, reverse):
  """y_j = min(cap_j, y_{j∓1} + w_j) by an associative scan (w_j: step into j)."""

  def comb(x, y):
    (c1, w1), (c2, w2) = x, y
    return jnp.minimum(c2, c1 + w2), w1 + w2

  if reverse:
    out, _ = jax.lax.associative_scan(comb, (cap[::-1], w[::-1]))
    return out[::-1]
  out, _ = jax.lax.associative_scan(comb, (cap, w))
  return out


def _optimistic(pb, qb, p_low, q_low, p_high, q_high, eps, h, n):
  """Certified optimistic one-step PMF on the nodes ε_j (module docstring).

  Builds a valid pair on the grid whose privacy profile is convex, has kinks
  only at the nodes u_j = e^{ε_j}, and lies below the true profile δ(u) for
  every u >= 0 (so it is a post-processing of the mechanism): node values
  D_j = δ(u_j) - E_j with slacks E_j that (C1) cover the worst-case sag of δ
  below the chord on each bucket, (C2) keep the segment slopes inside the
  bucket's slope range (convexity, non-negative masses), and (caps) keep
  max(0, 1 - u_j) <= D_j.

  Args:
    pb, qb: (n_pad,) P- and Q-masses of buckets (ε_j, ε_{j+1}], j < n - 1.
    p_low, q_low, p_high, q_high: masses below ε_0 / above ε_{n-1}.
    eps: (n_pad,) nodes.  h: grid step.  n: number of valid nodes.
  Returns:
    (p, feasible): the P-masses at the nodes (zero past n - 1) and whether
    the slack problem was solvable (else the caller falls back).
  """
  dtype = eps.dtype
  size = eps.shape[-1]
  j = jnp.arange(size)
  valid = j < n
  inside = j < n - 1
  top = j == n - 1
  em1 = jnp.expm1(h)
  eh = jnp.exp(h)
  u = jnp.exp(eps)
  big = jnp.asarray(jnp.inf, dtype)
  zero = jnp.zeros((1,), dtype)

  def nxt(a):
    return jnp.concatenate([a[1:], zero])

  def prv(a):
    return jnp.concatenate([zero, a[:-1]])

  pb = jnp.where(inside, pb, 0.0)
  # Consistent inputs: the bucket's loss ratio P/Q lies in [u_j, u_{j+1}].
  qb = jnp.where(inside, jnp.clip(qb, pb * jnp.exp(-eps - h), pb * jnp.exp(-eps)), 0.0)
  hh = u * em1                                      # H_j = u_{j+1} - u_j
  a = jnp.where(inside, jnp.maximum(u * eh * qb - pb, 0.0), 0.0)  # δ(u_{j+1}) - T_j(u_{j+1})
  b = jnp.where(inside, jnp.maximum(pb - u * qb, 0.0), 0.0)       # δ(u_j) - T_{j+1}(u_j)
  # Q-mass strictly above / below node j; profile δ_j and margin δ_j - (1 - u_j).
  q_gt = q_high + jnp.cumsum(qb[::-1])[::-1]
  q_le = q_low + jnp.cumsum(qb) - qb
  d_top = jnp.maximum(p_high - u * q_high, 0.0)     # read at j = n - 1
  seg_d = jnp.where(inside, hh * nxt(q_gt) + b, 0.0)
  d = jnp.cumsum(seg_d[::-1])[::-1] + jnp.sum(jnp.where(top, d_top, 0.0))
  m0 = jnp.maximum(u[0] * q_low - p_low, 0.0)
  seg_m = jnp.where(inside, hh * q_le + a, 0.0)
  m = m0 + jnp.cumsum(seg_m) - seg_m
  cap = jnp.where(valid, jnp.minimum(d, m), big)
  # Largest slacks compatible with the caps and (C2): E_j <= E_{j+1} + b_j,
  # E_{j+1} <= E_j + a_j.
  ecap = jnp.minimum(_scan_minplus(cap, b, reverse=True),
                     _scan_minplus(cap, prv(a), reverse=False))
  # (C1): E_j >= θ_j b_j and E_{j+1} >= (1 - θ_j) a_j for some θ_j in [0, 1],
  # balanced (θ = a/(a+b)) where the caps allow; the burdens carry a small
  # relative safety margin for the round-off in a, b where the caps allow.
  lo = jnp.where(a > 0, 1.0 - nxt(ecap) / jnp.where(a > 0, a, 1.0), 0.0)
  hi = jnp.where(b > 0, ecap / jnp.where(b > 0, b, 1.0), 1.0)
  lo = jnp.maximum(lo, 0.0)
  hi = jnp.minimum(hi, 1.0)
  # (Exactly tight at a grid end below the support, hence the tolerance.)
  feasible = jnp.all(jnp.where(inside, lo <= hi + 1e-9, True))
  # Prefer burdens the neighbouring segments can absorb in one step, which
  # makes (C2) hold without propagation: (1 - θ_j) a_j <= b_{j+1} and
  # θ_j b_j <= a_{j-1} (burden moves towards the larger masses in the tails).
  lo2 = jnp.maximum(lo, jnp.where(a > 0, 1.0 - nxt(b) / jnp.where(a > 0, a, 1.0), 0.0))
  hi2 = jnp.minimum(hi, jnp.where(b > 0, prv(a) / jnp.where(b > 0, b, 1.0), 1.0))
  ok2 = lo2 <= hi2
  lo = jnp.where(ok2, lo2, lo)
  hi = jnp.where(ok2, hi2, hi)
  s = a + b
  theta = jnp.clip(jnp.where(s > 0, a / jnp.where(s > 0, s, 1.0), 0.5), lo, hi)
  margin = 1.0 + 1e-6
  left = jnp.where(inside, jnp.minimum(theta * b * margin, jnp.maximum(ecap, theta * b)), 0.0)
  right = jnp.where(inside, jnp.minimum((1.0 - theta) * a * margin,
                                        jnp.maximum(nxt(ecap), (1.0 - theta) * a)), 0.0)
  req = jnp.maximum(left, prv(right))
  req = jnp.where(j == 0, jnp.maximum(req, m0), req)
  req = jnp.where(top, jnp.maximum(req, d_top), req)
  req = jnp.where(valid, req, 0.0)
  # Smallest slacks above req that satisfy (C2): max-plus envelopes.
  fwd = -_scan_minplus(-req, prv(b), reverse=False)
  bwd = -_scan_minplus(-req, a, reverse=True)
  e = jnp.minimum(jnp.maximum(fwd, bwd), cap)
  e = jnp.where(valid, e, 0.0)
  de = jnp.where(inside, nxt(e) - e, 0.0)
  # p_j = u_j (R_{j-1} - R_j), R_j = -(slope of segment j), written locally:
  # connect-the-dots masses α_j + β_{j-1} plus the slack correction.
  alpha = a / em1
  beta = eh * b / em1
  p = alpha + prv(beta) + (eh * prv(de) - de) / em1
  p = jnp.where(j == 0, p + u * q_low, p)
  p = jnp.where(top, p + u * q_high, p)
  p = jnp.where(valid, jnp.maximum(p, 0.0), 0.0)
  return p, feasible


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


def _epsilon_on_window(w, start, h, inf_mass, target, lower=False):
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
  big = d_grid > target * (1.0 + 1e-9 if lower else 1.0 - 1e-9)
  k = jnp.max(jnp.where(big, jnp.arange(size), -1))
  # On (ε_k, ε_k + h]: δ(ε) = A - e^{ε - ε_k} C, with direct sums.
  e0 = (start + k) * h
  above = loss > e0
  a_mass = jnp.sum(jnp.where(above, w, 0.0)) + inf_mass
  c_mass = jnp.sum(jnp.where(above, w * jnp.exp(jnp.where(above, e0 - loss, 0.0)), 0.0))
  ratio = (a_mass - target) / jnp.where(c_mass > 0, c_mass, 1.0)
  x = jnp.log(jnp.where(ratio > 0, ratio, 1.0))
  eps = e0 + jnp.clip(x, 0.0, h)
  # Nudge (up for the upper bound, down for the lower one) so that rounding
  # never lands on the wrong side.
  nudge = 4.0 * jnp.finfo(eps.dtype).eps * jnp.maximum(jnp.abs(eps), 1.0)
  eps = eps - nudge if lower else eps + nudge
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


@functools.partial(jax.jit, static_argnames=("lower",))
def _epsilon_batch(w, start, h, inf_mass, target, lower=False):
  fn = functools.partial(_epsilon_on_window, lower=lower)
  return jax.vmap(jax.vmap(fn, in_axes=(None, None, None, None, 0)))(
      w, start, h, inf_mass, target)


@jax.jit
def _roundoff_allowance(w):
  """Absolute allowance for FFT round-off in δ computed from a composed PMF.

  Empirical, not certified: the size of the window times the round-off
  level of one entry, estimated as the larger of the most negative entry
  (exact values are >= 0) and ``eps_machine · max(w)``, times 4.
  """
  level = jnp.maximum(-jnp.min(w, axis=-1), 0.0)
  level = jnp.maximum(level, jnp.finfo(w.dtype).eps * jnp.max(w, axis=-1))
  return 4.0 * w.shape[-1] * level


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
        # Lower bound: subtract the mass that may have wrapped from below the
        # window to its top (Chernoff, <= _TAIL per phase) and the FFT
        # round-off allowance.
        slack = _roundoff_allowance(w_o) + _TAIL * n_ph
        hh = jnp.asarray(h[sel])
        qq = jnp.asarray(queries[sel])
        inf_t = jnp.asarray(inf_cfg[sel])
        if want_epsilon:
          up = _epsilon_batch(w_p, start, hh, inf_t, qq)
          lo = _epsilon_batch(w_o, start, hh, jnp.zeros(len(sel)), qq + slack[:, None],
                              lower=True)
        else:
          up = _delta_batch(w_p, start, hh, inf_t, qq)
          lo = _delta_batch(w_o, start, hh, jnp.zeros(len(sel)), qq) - slack[:, None]
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


def _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon):
  """(upper, lower) for every query: 0 where trivial, else from the composed PLDs."""
  up = np.zeros(trivial.shape)
  lo = np.zeros(trivial.shape)
  if len(cfg):
    u, l = _run(cfg[:, 0], cfg[:, 1], cfg[:, 2], h, table, want_epsilon=want_epsilon)
    up[~trivial] = u[inverse, slot]
    lo[~trivial] = l[inverse, slot]
  return up, lo


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
    return_bounds: also return the certified optimistic lower bound.

  Returns:
    The pessimistic upper bound on δ(ε) (max over add/remove), or
    ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  shape, trivial, cfg, inverse, slot, table, h = _prepare(
      q, sigma, steps, epsilon, "epsilon", dict(low=0.0, allow_inf=True),
      value_discretization_interval, rtol)
  up, lo = _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon=False)
  up = np.clip(up, 0.0, 1.0).reshape(shape)
  # Both ends are bounds; no clipping of one to the other (tests check lo <= up).
  lo = np.clip(lo, 0.0, 1.0).reshape(shape)
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
    return_bounds: also return the certified optimistic lower bound.

  Returns:
    The upper bound on ε, or ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: naming the argument and value when an input is out of range.
  """
  shape, trivial, cfg, inverse, slot, table, h = _prepare(
      q, sigma, steps, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
      value_discretization_interval, rtol)
  up, lo = _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon=True)
  up = np.maximum(up, 0.0).reshape(shape)
  lo = np.maximum(lo, 0.0).reshape(shape)
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
