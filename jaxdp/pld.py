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
--------------------------------------------
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
dp_accounting, with our own orders): the mass of the composed pessimistic
distribution above the window is at most ``1e-17`` and is added to the
infinity atom in the pessimistic result; mass below the window wraps to its
top (which can only increase the pessimistic δ).  Composed infinity mass is
``1 - (1 - p_∞)^T``.  For the optimistic δ, mass wrapped from below the window
to its top (at most ``1e-17`` per phase by the Chernoff bound on the
optimistic PMF) is subtracted from δ, and mass wrapped from above to the
bottom only lowers it.  So only those two edges need a certificate; the other
two are taken from them with a margin of ``_EDGE_PAD`` grid points (accuracy
only).  N is the smallest length f·2^k >= the window (f in {1, 3, 5, 7, 9}).

Implementation: the one-step grids of all configurations, phases and one
direction are packed back to back into blocks of ``_BLK`` nodes (no padding
to the longest grid), processed in cache-sized calls; per-grid sums and
min-plus scans run blockwise with restarts at grid boundaries (:class:`_Rows`).

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
of machine epsilon times the largest composed mass per grid point.  Both
bounds carry an empirical allowance,
``4 · N · max(-min(w), eps_machine · max(w))`` for a composed window w of N
points (typically 1e-13 to 1e-11 absolute; not a proven bound): added to the
pessimistic δ (booked with the infinity atom), subtracted from the optimistic
one; and the
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
from jax.scipy.special import erfc
from scipy import special as _sps  # host-side scalars only (ndtri)

from jaxdp import _guards
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
_MAX_STEP_GRID = 2 ** 22  # largest one-step grid
# Coarsest automatic grid interval where memory allows.  Above ~3e-3 the
# optimistic slack problem of small-σ configurations becomes infeasible and
# the row falls back to first-order rounding down, which T-fold composition
# turns into certified intervals 2-10% wide (q=0.05, σ=0.4, T=1000 at
# h=8.5e-3: [111.1, 113.7]; at h=2.5e-3: [113.73, 113.74]).
_MAX_AUTO_H = 2.5e-3
_MAX_FFT = 2 ** 22     # largest FFT length (the window rounded up to f·2^k)
_MAX_ELEMS = 2 ** 23   # elements per kernel call (batch x grid), to bound memory
_SQRT_HALF = math.sqrt(0.5)
_BLK = 512             # points per block of the packed one-step layout (_Rows)
_CHUNK_BLOCKS = 2 ** 15 // _BLK  # least blocks per one-step kernel call (_chunks)
_EDGE_PAD = 64         # accuracy margin on the uncertified window edges (_stage1)


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




class _Rows:
  """Packed layout of the one-step grids of several rows (phase x direction).

  Row r's nodes j = 0 .. n_r - 1 occupy whole blocks of ``_BLK`` points
  (its last block padded with j >= n_r), and the blocks of all rows are
  concatenated into one (blocks, _BLK) array, so that no row is padded to
  the longest one.  Every block belongs to one row, hence per-row sums and
  scans are a within-block pass plus a sequential pass over block totals
  that restarts at each row's first (or, backwards, last) block.  Trailing
  filler blocks belong to a dummy row.

  Attributes:
    rob: (blocks,) row of each block.  j: (blocks, _BLK) node index in its row.
    start, n: (rows,) flat index of each row's node 0 and its node count.
  """

  def __init__(self, rob, j0, start, n):
    self.rob = rob
    self.j = j0[:, None] + jnp.arange(_BLK)[None, :]
    self.start = start
    self.n = n
    self.first_blk = j0 == 0
    self.last_blk = j0 + _BLK >= n[rob]

  def row(self, x):
    """(rows,) -> (blocks, 1): a per-row value at every point of the row."""
    return x[self.rob][:, None]

  def first(self, x):
    """Value at node 0 of every row."""
    return x.reshape(-1)[self.start]

  def last(self, x):
    """Value at node n - 1 of every row."""
    return x.reshape(-1)[self.start + self.n - 1]

  @staticmethod
  def nxt(x):
    """x_{j+1} (flat order; across a row end it reads filler or the next row)."""
    f = x.reshape(-1)
    return jnp.concatenate([f[1:], jnp.zeros((1,), x.dtype)]).reshape(x.shape)

  @staticmethod
  def prv(x):
    """x_{j-1} (flat order; at node 0 it reads the previous row's filler)."""
    f = x.reshape(-1)
    return jnp.concatenate([jnp.zeros((1,), x.dtype), f[:-1]]).reshape(x.shape)

  def cumsum(self, x):
    """Inclusive per-row cumulative sum Σ_{i <= j} x_i."""
    return _seg_cumsum(x[None], self.first_blk[None])[0]

  def rcumsum(self, x):
    """Inclusive per-row reverse cumulative sum Σ_{i >= j} x_i."""
    return _flip(_seg_cumsum(_flip(x)[None], self.last_blk[::-1][None])[0])

  def all(self, ok):
    """Per-row logical AND (an exact integer count of the failures)."""
    bad = jnp.cumsum(jnp.sum(~ok, axis=-1))  # per block, then running count
    bad = jnp.concatenate([jnp.zeros((1,), bad.dtype), bad])
    blk0 = self.start // _BLK
    nblk = (self.n + _BLK - 1) // _BLK
    return bad[blk0 + nblk] - bad[blk0] == 0

  def scan_pair(self, cap_f, w_f, cap_r, w_r):
    """Per-row min-plus scans: forward y_j = min(cap_j, y_{j-1} + w_j) and
    reverse y_j = min(cap_j, y_{j+1} + w_j), each starting from +inf at its
    row's first (last) block; see :func:`_scan_minplus`."""
    out = _scan_minplus(jnp.stack([cap_f, _flip(cap_r)]), jnp.stack([w_f, _flip(w_r)]),
                        jnp.stack([self.first_blk, self.last_blk[::-1]]))
    return out[0], _flip(out[1])


def _flip(x):
  """Reverses the flat order of a (blocks, _BLK) array."""
  return x[..., ::-1, ::-1]


def _seg_cumsum(x, reset):
  """Inclusive cumulative sums along the flat order of (k, blocks, _BLK) arrays,
  restarting at the blocks flagged in ``reset`` (k, blocks)."""
  c = jnp.cumsum(x, axis=-1)

  def step(carry, inp):
    tot, first = inp
    carry = jnp.where(first, 0.0, carry)
    return carry + tot, carry

  _, off = jax.lax.scan(step, jnp.zeros(x.shape[0], x.dtype), (c[..., -1].T, reset.T))
  return c + off.T[..., None]


def _scan_minplus(cap, w, reset):
  """y = min(cap, y_prev + w) along the flat order of (k, blocks, _BLK) arrays,
  with y_prev = +inf at the start of the blocks flagged in ``reset`` (k, blocks).

  The map y -> min(c, y + w) composes associatively, so the recursion runs as
  a sequential scan inside every block (all blocks advancing together as one
  vector), a sequential scan over the block aggregates, and one elementwise
  pass; only the sums of the w's are reassociated, as in any parallel scan
  (all w >= 0 here, so each sum keeps its relative precision).
  """
  c = jnp.moveaxis(cap, -1, 0)  # (_BLK, k, blocks)
  ww = jnp.moveaxis(w, -1, 0)
  inf = jnp.full(c.shape[1:], jnp.inf, cap.dtype)

  def step(carry, x):
    cp, wp = carry
    ci, wi = x
    out = (jnp.minimum(ci, cp + wi), wp + wi)
    return out, out

  _, (lc, lw) = jax.lax.scan(step, (inf, jnp.zeros_like(inf)), (c, ww))

  def block_step(y, x):
    cb, wb, first = x
    y = jnp.where(first, jnp.inf, y)
    return jnp.minimum(cb, y + wb), y  # emits the value entering the block

  _, y_in = jax.lax.scan(block_step, inf[:, 0], (lc[-1].T, lw[-1].T, reset.T))
  y = jnp.minimum(lc, y_in.T[None] + lw)
  return jnp.moveaxis(y, 0, -1)


def _single_step(q, sigma, h, i_lo, lay, *, remove):
  """One-step pessimistic and optimistic PMFs on the grids (i_lo + j)·h.

  Args:
    q, sigma, h, i_lo: (rows,) parameters.  lay: the packed layout (_Rows).
  Returns:
    (p_pess, inf_pess, p_opt): p_* of shape (blocks, _BLK), zero at j >= n;
    inf_pess (rows,).
  """
  nxt = lay.nxt
  j = lay.j
  n = lay.row(lay.n)
  q_, sigma_, h_ = lay.row(q), lay.row(sigma), lay.row(h)
  valid = j < n
  top = j == n - 1
  eps = (lay.row(i_lo) + j) * h_
  # Node abscissae: bucket (ε_j, ε_{j+1}] is the x-interval [x_j, x_{j+1}]
  # (remove) or [y_{j+1}, y_j] with y_j = x(-ε_j) (add).  Gaussian CDF and
  # survival function are evaluated once per node and mean.
  xs = _x_of_loss(eps if remove else -eps, q_, sigma_)

  def cdf_sf(mu):
    # Both Gaussian tails from one erfc of |z|: the smaller one keeps relative
    # precision (as ndtr's), the other is its complement.
    z = (xs - mu) / sigma_
    t = 0.5 * erfc(jnp.abs(z) * _SQRT_HALF)
    # Materialised once: keeps XLA from re-evaluating erfc inside every
    # consumer fusion (node j and its neighbour j + 1).
    z, t = jax.lax.optimization_barrier((z, t))
    return jnp.where(z < 0, t, 1.0 - t), jnp.where(z > 0, t, 1.0 - t), z

  def mass(mu):  # N(mu, σ²) mass of bucket j, from the accurate tail
    c, sf, z = cdf_sf(mu)
    if remove:
      m = jnp.where(z > 0, sf - nxt(sf), nxt(c) - c)
    else:
      m = jnp.where(nxt(z) > 0, nxt(sf) - sf, c - nxt(c))
    return jnp.maximum(m, 0.0), c, sf

  m0, c0, s0 = mass(0.0)
  m1, c1, s1 = mass(1.0)
  mix = (1.0 - q_) * m0 + q_ * m1
  pb, qb = (mix, m0) if remove else (m0, mix)
  inside = j < n - 1  # buckets (ε_j, ε_{j+1}] with both ends on the grid
  pb = jnp.where(inside, pb, 0.0)
  qb = jnp.where(inside, qb, 0.0)
  # β_j: share of bucket j moved up to ε_{j+1}.
  # e^ε·Q(B) in log space: ε passes 709 (exp overflows) once σ < ~0.026.
  beta = (pb - jnp.exp(eps + jnp.log(qb))) / (-jnp.expm1(-h_))  # e^h/(e^h - 1)
  beta = jnp.clip(beta, 0.0, pb)
  alpha = pb - beta

  # P- and Q-mass outside the grid (below ε_0 / above ε_{n-1}), per row.
  c0f, s0f, c1f, s1f = (lay.first(x) for x in (c0, s0, c1, s1))
  c0l, s0l, c1l, s1l = (lay.last(x) for x in (c0, s0, c1, s1))
  if remove:
    below, q_below = (1.0 - q) * c0f + q * c1f, c0f
    above, q_above = (1.0 - q) * s0l + q * s1l, s0l
  else:
    below, q_below = s0f, (1.0 - q) * s0f + q * s1f
    above, q_above = c0l, (1.0 - q) * c0l + q * c1l

  # beta is 0 at j >= n - 1, so the previous row's filler reads as 0.
  p_in = jnp.where(valid, alpha + lay.prv(beta), 0.0)
  p_pess = jnp.where(j == 0, p_in + lay.row(below), p_in)

  # Optimistic (certified lower bound, module docstring): node slacks E_j.
  p_opt, feasible = _optimistic(pb, qb, below, q_below, above, q_above, eps, h_, lay)
  # Fallback (flagged infeasible slack problem, only for grids much coarser
  # than the loss spread): plain rounding down of every bucket's P-mass to its
  # lower node, above-grid mass to the top node, below-grid mass dropped.
  p_down = jnp.where(inside, pb, 0.0) + jnp.where(top, lay.row(above), 0.0)
  p_opt = jnp.where(lay.row(feasible), p_opt, jnp.where(valid, p_down, 0.0))
  # Round-off in the total mass is raised to the power T by composition
  # ((1 + 3e-13)^(10^6) - 1 = 3e-7 at q = 1, σ = 100, T = 10^6, where the
  # optimistic δ then exceeded the exact one).  The optimistic PMF is scaled
  # to total mass <= 1 - 4 eps (a sub-probability only lowers δ); the
  # pessimistic deficit 1 - (Σ p + above) goes to the infinity atom (only
  # raises δ).
  fp = jnp.finfo(p_opt.dtype).eps
  tot_opt = lay.first(lay.rcumsum(p_opt))
  p_opt = p_opt * lay.row(jnp.minimum(1.0, (1.0 - 4.0 * fp) / jnp.where(tot_opt > 0, tot_opt, 1.0)))
  tot_pess = lay.first(lay.rcumsum(p_pess)) + above
  return p_pess, above + jnp.maximum(1.0 - tot_pess, 0.0), p_opt


def _optimistic(pb, qb, p_low, q_low, p_high, q_high, eps, h, lay):
  """Certified optimistic one-step PMF on the nodes ε_j (module docstring).

  Builds a valid pair on the grid whose privacy profile is convex, has kinks
  only at the nodes u_j = e^{ε_j}, and lies below the true profile δ(u) for
  every u >= 0 (so it is a post-processing of the mechanism): node values
  D_j = δ(u_j) - E_j with slacks E_j that (C1) cover the worst-case sag of δ
  below the chord on each bucket, (C2) keep the segment slopes inside the
  bucket's slope range (convexity, non-negative masses), and (caps) keep
  max(0, 1 - u_j) <= D_j.

  All sums and scans run per row of the packed layout ``lay`` (:class:`_Rows`);
  neighbour reads that cross a row end only meet quantities that are zero
  there (masked by ``inside``).

  Args:
    pb, qb: (blocks, _BLK) P- and Q-masses of buckets (ε_j, ε_{j+1}], j < n - 1.
    p_low, q_low, p_high, q_high: (rows,) masses below ε_0 / above ε_{n-1}.
    eps: nodes (blocks, _BLK).  h: grid step (blocks, 1).  lay: the layout.
  Returns:
    (p, feasible): the P-masses at the nodes (zero at j >= n) and, per row,
    whether the slack problem was solvable (else the caller falls back).
  """
  nxt, prv, row = lay.nxt, lay.prv, lay.row
  j = lay.j
  n = row(lay.n)
  valid = j < n
  inside = j < n - 1
  top = j == n - 1
  em1 = jnp.expm1(h)
  eh = jnp.exp(h)
  u = jnp.exp(eps)
  big = jnp.asarray(jnp.inf, eps.dtype)

  pb = jnp.where(inside, pb, 0.0)
  # Consistent inputs: the bucket's loss ratio P/Q lies in [u_j, u_{j+1}].
  qb = jnp.where(inside, jnp.clip(qb, pb * jnp.exp(-eps - h), pb * jnp.exp(-eps)), 0.0)
  hh = u * em1                                      # H_j = u_{j+1} - u_j
  a = jnp.where(inside, jnp.maximum(u * eh * qb - pb, 0.0), 0.0)  # δ(u_{j+1}) - T_j(u_{j+1})
  b = jnp.where(inside, jnp.maximum(pb - u * qb, 0.0), 0.0)       # δ(u_j) - T_{j+1}(u_j)
  # Q-mass strictly above / below node j; profile δ_j and margin δ_j - (1 - u_j).
  q_gt = row(q_high) + lay.rcumsum(qb)
  q_le = row(q_low) + lay.cumsum(qb) - qb
  d_top = jnp.maximum(p_high - lay.last(u) * q_high, 0.0)   # (rows,), at j = n - 1
  seg_d = jnp.where(inside, hh * nxt(q_gt) + b, 0.0)
  d = lay.rcumsum(seg_d) + row(d_top)
  m0 = jnp.maximum(lay.first(u) * q_low - p_low, 0.0)      # (rows,), at j = 0
  seg_m = jnp.where(inside, hh * q_le + a, 0.0)
  m = row(m0) + lay.cumsum(seg_m) - seg_m
  cap = jnp.where(valid, jnp.minimum(d, m), big)
  # Largest slacks compatible with the caps and (C2): E_j <= E_{j+1} + b_j,
  # E_{j+1} <= E_j + a_j.
  ecap_f, ecap_r = lay.scan_pair(cap, prv(a), cap, b)
  ecap = jnp.minimum(ecap_r, ecap_f)
  # (C1): E_j >= θ_j b_j and E_{j+1} >= (1 - θ_j) a_j for some θ_j in [0, 1],
  # balanced (θ = a/(a+b)) where the caps allow; the burdens carry a small
  # relative safety margin for the round-off in a, b where the caps allow.
  lo = jnp.where(a > 0, 1.0 - nxt(ecap) / jnp.where(a > 0, a, 1.0), 0.0)
  hi = jnp.where(b > 0, ecap / jnp.where(b > 0, b, 1.0), 1.0)
  lo = jnp.maximum(lo, 0.0)
  hi = jnp.minimum(hi, 1.0)
  # (Exactly tight at a grid end below the support, hence the tolerance.)
  # NaN compares False, so overflow of u = e^ε (losses > 709) is infeasible
  # too and takes the round-down fallback.
  feasible = lay.all(jnp.where(inside, lo <= hi + 1e-9, True) & jnp.isfinite(jnp.where(valid, u, 0.0)))
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
  req = jnp.where(j == 0, jnp.maximum(req, row(m0)), req)
  req = jnp.where(top, jnp.maximum(req, row(d_top)), req)
  req = jnp.where(valid, req, 0.0)
  # Smallest slacks above req that satisfy (C2): max-plus envelopes.
  fwd, bwd = lay.scan_pair(-req, prv(b), -req, a)
  e = jnp.minimum(jnp.maximum(-fwd, -bwd), cap)
  e = jnp.where(valid, e, 0.0)
  de = jnp.where(inside, nxt(e) - e, 0.0)
  # p_j = u_j (R_{j-1} - R_j), R_j = -(slope of segment j), written locally:
  # connect-the-dots masses α_j + β_{j-1} plus the slack correction.
  alpha = a / em1
  beta = eh * b / em1
  p = alpha + prv(beta) + (eh * prv(de) - de) / em1
  p = jnp.where(j == 0, p + u * row(q_low), p)
  p = jnp.where(top, p + u * row(q_high), p)
  p = jnp.where(valid, jnp.maximum(p, 0.0), 0.0)
  # A valid pair is a probability distribution: a row whose construction lost
  # mass (observed when the lowest node sits exactly on the infimum of the
  # loss, e.g. the grid aligned with -log(1-q)) is treated as infeasible.
  total = lay.first(lay.rcumsum(p))
  feasible = feasible & (jnp.abs(total - 1.0) <= 1e-9)
  return p, feasible


def _chernoff_edges(p, steps, h, lay, upper):
  """Chernoff edges (node index) of the ``steps``-fold sums of every row.

  For ``upper``: x with P(S > x) <= _TAIL, else x with P(S < x) <= _TAIL, where
  S is the sum of ``steps`` independent draws from the row's PMF (mass <= 1)
  on nodes j: P(S > x) <= M(t)^T e^{-t x} for every t > 0 (M the MGF), so
  any order t gives a valid edge and the smallest over the orders tried is
  kept.  Orders: twelve coarse ones 4^k / span (k = -1..10, span = the row's
  loss span n·h), then two refinements at
  2^{±1/2} times the best coarse one (the edge at an order off by a factor 2
  from the optimum is up to 25% wider, by 2^{1/2} about 6%).
  """
  jf = lay.j.astype(p.dtype)
  sign = 1.0 if upper else -1.0
  logp = num.safe_log(p)
  log_inv = -math.log(_TAIL)
  rows = lay.n.shape[0]

  def edges(theta):  # theta: (orders, rows)
    t = theta * h                                            # (orders, rows)
    tb = t[:, lay.rob][..., None]                            # (orders, blocks, 1)
    lb = jax.nn.logsumexp(logp[None] + sign * tb * jf[None], axis=-1)  # (orders, blocks)
    mx = jax.ops.segment_max(lb.T, lay.rob, num_segments=rows)         # (rows, orders)
    mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
    ssum = jax.ops.segment_sum(jnp.exp(lb.T - mx[lay.rob]), lay.rob, num_segments=rows)
    k = (num.safe_log(ssum) + mx).T                          # (orders, rows)
    return (steps * k + log_inv) / t

  # Orders relative to each row's loss span n·h: with rare large losses
  # (σ = 0.01, q = 1e-6: losses ~6000 with probability 1e-6) the best order is
  # ~1e-3 loss units, far below the 0.25 that fixed orders started at, and
  # the edges came out 10^4 times too wide.
  span = jnp.maximum(lay.n * h, 1e-300)                    # (rows,)
  coarse = (4.0 ** jnp.arange(-1.0, 11.0))[:, None] / span[None, :]  # (12, rows)
  e1 = edges(coarse)
  best = jnp.take_along_axis(coarse, jnp.argmin(e1, axis=0)[None], axis=0)[0]
  e2 = edges(best[None] * jnp.array([2.0 ** -0.5, 2.0 ** 0.5])[:, None])
  e = jnp.minimum(jnp.min(e1, axis=0), jnp.min(e2, axis=0))
  if upper:
    top_nz = jnp.max(jnp.where(p > 0, jf, 0.0), axis=-1)
    n_nonzero = jax.ops.segment_max(top_nz, lay.rob, num_segments=rows)
    return jnp.minimum(e, steps * n_nonzero)
  return jnp.maximum(-e, 0.0)


def _complex_power(z, n, nbits):
  """z ** n for integer n >= 0 (traced) by binary exponentiation.

  ``nbits`` (traced, unbatched) is the number of bits to visit: at least the
  bit length of n (the caller passes the largest one of its batch).
  """

  def body(k, carry):
    acc, base = carry
    bit = (n >> k) & 1
    acc = jnp.where(bit == 1, acc * base, acc)
    return acc, base * base

  acc0 = jnp.ones_like(z)
  acc, _ = jax.lax.fori_loop(0, nbits, body, (acc0, z))
  return acc


def _compose(p, i_lo, steps, start, nbits, *, size):
  """Composes phases on a window of ``size`` loss indices starting at ``start``.

  Each phase's PMF is folded onto the cycle of length ``size`` from its own
  grid start (a sum of reshaped slices, no scatter); the composed cyclic PMF is
  then read from ``start - Σ_k steps_k · i_lo_k`` (cyclic convolution commutes
  with shifts, so this is the same cyclic result as placing every phase at its
  true loss indices first).

  Args:
    p: (phases, n_pad) one-step PMFs; phase k's entry j is loss (i_lo[k] + j)·h.
    i_lo: (phases,) int.  steps: (phases,) int.  start: int window start.
    nbits: bits visited by the binary exponentiation (>= bit length of steps).
  Returns:
    (size,) composed PMF of the window.
  """
  n_pad = p.shape[-1]
  reps = -(-n_pad // size)

  def spectrum(pk, t):
    folded = jnp.pad(pk, (0, reps * size - n_pad)).reshape(reps, size).sum(axis=0)
    return _complex_power(jnp.fft.rfft(folded), t, nbits)

  spec = jax.vmap(spectrum)(p, steps)
  spec = jnp.prod(spec, axis=0)
  out = jnp.fft.irfft(spec, n=size)
  shift = start - jnp.sum(steps * i_lo)
  idx = jnp.mod(shift + jnp.arange(size), size)
  return out[idx]


def _delta_on_window(w, start, h, inf_mass, eps):
  """δ(ε) = Σ_{ℓ>ε} w(ℓ)(1 - e^{ε-ℓ}) + inf_mass, for a vector of ε."""
  loss = (start + jnp.arange(w.shape[-1])) * h

  def one(e):
    d = jnp.where(loss > e, e - loss, 0.0)
    return jnp.sum(jnp.where(loss > e, w * (-jnp.expm1(d)), 0.0)) + inf_mass

  return jax.vmap(one)(eps)


def _discounted_tail(w, c):
  """S_k = Σ_{m>k} w_m c^{m-k} for every k (0 < c <= 1), by a reverse scan.

  The recurrence S_k = c (w_{k+1} + S_{k+1}) is an affine map of S_{k+1};
  affine maps compose associatively, so it runs as one associative scan.
  Every coefficient is a power of c <= 1: no overflow for any window length
  or grid interval (an earlier version referred all losses to one middle
  point and overflowed ``exp`` on windows spanning more than ~700 loss
  units, which under-reported ε by orders of magnitude at small σ).
  """
  b = c * jnp.concatenate([w[1:], jnp.zeros((1,), w.dtype)])
  a = jnp.broadcast_to(c, w.shape).astype(w.dtype)

  def combine(later, cur):
    a1, b1 = later
    a2, b2 = cur
    return a2 * a1, b2 + a2 * b1

  _, s = jax.lax.associative_scan(combine, (a, b), reverse=True)
  return s


def _grid_deltas(w, h):
  """(D, S) on the window nodes: D_k = Σ_{m>k} w_m (1 - e^{-(m-k)h}) (δ at
  node k without the infinity atom) and S_k = Σ_{m>k} w_m e^{-(m-k)h}.

  D_k - D_{k+1} = (1 - e^{-h})(w_{k+1} + S_{k+1}) = (e^h - 1) S_k, so D is a
  reverse cumulative sum of non-negative terms when w >= 0 (no cancellation).
  """
  s = _discounted_tail(w, jnp.exp(-h))
  # (1 - e^{-h})(w_{k+1} + S_{k+1}): finite for every h (e^h - 1 overflows
  # for h > 709, and inf·0 would be NaN).
  nxt = lambda x: jnp.concatenate([x[1:], jnp.zeros((1,), x.dtype)])  # noqa: E731
  t = -jnp.expm1(-h) * (nxt(w) + nxt(s))
  d = jnp.cumsum(t[::-1])[::-1]
  return d, s


def _epsilon_on_window(w, start, h, inf_mass, target, lower=False):
  """Smallest ε with δ(ε) <= target (exact on the piecewise-exponential δ).

  δ at the nodes comes from :func:`_grid_deltas`; the largest node k with
  δ(ε_k) > target is found by a reduction, and on (ε_k, ε_k + h]
  δ(ε_k + x) = δ(ε_k) - (e^x - 1) S_k is solved in closed form,
  x = log1p((δ(ε_k) - target) / S_k).  For the upper bound the node values
  are inflated by a relative ``64 · size · eps_machine`` (summation
  round-off) and the result nudged up; for the lower bound both go down.
  """
  size = w.shape[-1]
  d, s = _grid_deltas(w, h)
  fp = jnp.finfo(w.dtype).eps
  infl = 64.0 * size * fp
  d = d * (1.0 - infl if lower else 1.0 + infl) + inf_mass
  big = d > target
  k = jnp.max(jnp.where(big, jnp.arange(size), -1))
  kk = jnp.maximum(k, 0)
  # k = -1: δ at the first node is already <= target.  The upper bound is
  # then the first node (δ is non-increasing); the lower bound knows nothing
  # better than -inf (clipped to 0 by the caller).
  dk = d[kk]
  sk = s[kk]
  ratio = (dk - target) / jnp.where(sk > 0, sk, 1.0)
  x = jnp.where(sk > 0, jnp.log1p(jnp.maximum(ratio, 0.0)), h)
  eps = (start + kk) * h + jnp.clip(x, 0.0, h)
  nudge = 4.0 * fp * jnp.maximum(jnp.abs(eps), 1.0)
  eps = eps - nudge if lower else eps + nudge
  first = start * h
  eps = jnp.where(k < 0, -jnp.inf if lower else first, eps)
  eps = jnp.where(inf_mass > target, jnp.inf, eps)
  # A non-finite composed PMF must not turn into a number (NaN compares
  # False above and would select the first node): NaN reaches the guards.
  return jnp.where(jnp.all(jnp.isfinite(w)) & ~jnp.isnan(inf_mass), eps, jnp.nan)


def _stage1(q, sigma, h, i_lo, steps, rob, j0, start, n, *, remove):
  """One-step PMFs of packed rows (:class:`_Rows`) and their composed windows.

  Returns the flat PMFs, the per-row infinity mass and window [a, b] of loss
  indices.  Only the two window edges that soundness relies on are
  Chernoff-certified: the upper edge of the pessimistic PMF (the mass above
  it is booked at infinity) and the lower edge of the optimistic one (the
  mass below it, wrapped to the top, is subtracted from the lower bound).
  The other two only matter for accuracy: pessimistic mass below the window
  wraps to its top, which can only raise the pessimistic δ, and optimistic
  mass above it wraps to its bottom, which can only lower the optimistic δ.
  Both PMFs share the window, so each edge is the outer of the two PMFs'
  Chernoff edges (a PMF whose construction failed cannot cut the other's
  window short), plus ``_EDGE_PAD`` points.

  Two compiled calls: fused into one, XLA's fusion of the PMF construction
  with the edge reductions measured ~1.5x slower.
  """
  p_pess, inf_pess, p_opt = _one_step(q, sigma, h, i_lo, rob, j0, start, n, remove=remove)
  a, b = _edges(p_pess, p_opt, steps, h, i_lo, rob, j0, start, n)
  return p_pess.reshape(-1), inf_pess, p_opt.reshape(-1), a, b


@functools.partial(jax.jit, static_argnames=("remove",))
def _one_step(q, sigma, h, i_lo, rob, j0, start, n, *, remove):
  return _single_step(q, sigma, h, i_lo, _Rows(rob, j0, start, n), remove=remove)


@jax.jit
def _edges(p_pess, p_opt, steps, h, i_lo, rob, j0, start, n):
  lay = _Rows(rob, j0, start, n)
  # The certified edges (pessimistic top, optimistic bottom), widened to the
  # other PMF's edges so that neither composition is cut short by the other.
  hi = jnp.maximum(_chernoff_edges(p_pess, steps, h, lay, upper=True),
                   _chernoff_edges(p_opt, steps, h, lay, upper=True))
  lo = jnp.minimum(_chernoff_edges(p_opt, steps, h, lay, upper=False),
                   _chernoff_edges(p_pess, steps, h, lay, upper=False))
  return steps * i_lo + jnp.floor(lo) - _EDGE_PAD, steps * i_lo + jnp.ceil(hi) + _EDGE_PAD


def _pack(n, nb_pad=None):
  """Host: packed layout (:class:`_Rows`) of rows with n[r] nodes.

  ``nb_pad`` blocks in all (at least one more than the rows need: the filler
  belongs to a dummy row); by default the need rounded up with 8 steps per
  octave.  Rows are padded to a power of two (>= 32) with dummy rows.
  Returns (rob, j0, start, n_rows) as NumPy arrays.
  """
  n = np.asarray(n, np.int64)
  rows = len(n)
  nblk = -(-n // _BLK)
  total = int(nblk.sum())
  if nb_pad is None:
    m = max(total + 1, 16)
    step = 1 << max(m.bit_length() - 4, 0)
    nb_pad = -(-m // step) * step
  r_pad = _pow2(rows + 1, least=32)
  filler = nb_pad - total
  rob = np.concatenate([np.repeat(np.arange(rows), nblk), np.full(filler, rows)])
  j0 = np.concatenate([np.arange(k) * _BLK for k in nblk] + [np.arange(filler) * _BLK])
  start = np.full(r_pad, total * _BLK, np.int64)
  start[:rows] = (np.cumsum(nblk) - nblk) * _BLK
  n_rows = np.ones(r_pad, np.int64)
  n_rows[:rows] = n
  return rob.astype(np.int32), j0.astype(np.int64), start, n_rows


def _chunks(n):
  """Host: rows (indices into n) grouped into kernel calls (bins of blocks).

  The one-step kernels are memory bound, so small calls whose working set
  stays in cache are faster per node (measured: calls of 2**15 nodes ~1.8x
  faster per node than calls of 2**18).  Bins hold ``_CHUNK_BLOCKS`` blocks,
  or the next power of two above a longer row; first-fit decreasing packing
  fills the room left in any bin.  Bin sizes are powers of two so that few
  shapes are compiled.  Returns [(rows, nb_pad)].
  """
  nblk = -(-np.asarray(n, np.int64) // _BLK)
  bins = []  # [room, rows, size]; one block of each bin is the dummy row's filler
  for k in np.argsort(-nblk, kind="stable"):
    for b in bins:
      if b[0] >= nblk[k]:
        b[0] -= nblk[k]
        b[1].append(k)
        break
    else:
      size = max(_CHUNK_BLOCKS, _pow2(nblk[k] + 1, least=1))
      bins.append([size - 1 - nblk[k], [k], size])
  return [(sorted(b[1]), b[2]) for b in bins]


def _compose_batch(p, i_lo, steps, start, nbits, *, size):
  return jax.vmap(functools.partial(_compose, size=size),
                  in_axes=(0, 0, 0, 0, None))(p, i_lo, steps, start, nbits)


def _delta_batch(w, start, h, inf_mass, eps):
  return jax.vmap(_delta_on_window)(w, start, h, inf_mass, eps)


def _epsilon_batch(w, start, h, inf_mass, target, lower=False):
  fn = functools.partial(_epsilon_on_window, lower=lower)
  return jax.vmap(jax.vmap(fn, in_axes=(None, None, None, None, 0)))(
      w, start, h, inf_mass, target)


def _roundoff_allowance(w):
  """Absolute allowance for FFT round-off in δ computed from a composed PMF.

  Empirical, not certified: the size of the window times the round-off
  level of one entry, estimated as the larger of the most negative entry
  (exact values are >= 0) and ``eps_machine · max(w)``, times 4.
  """
  level = jnp.maximum(-jnp.min(w, axis=-1), 0.0)
  level = jnp.maximum(level, jnp.finfo(w.dtype).eps * jnp.max(w, axis=-1))
  return 4.0 * w.shape[-1] * level


@functools.partial(jax.jit, static_argnames=("size", "want_epsilon"))
def _finish(p, i_lo, steps, start, nbits, h, inf_mass, queries, wrap, *, size, want_epsilon):
  """Composes a group of configurations and answers their queries (one call).

  Args:
    p: (2m, phases, width) one-step PMFs, the m pessimistic rows then the m
      optimistic ones.  i_lo, steps: (m, phases).  start: (m,) window starts.
    nbits: bits of the largest step count.  h, inf_mass: (m,).
    queries: (m, K).  wrap: the Chernoff mass that may have wrapped from
      below the window to its top (_TAIL per phase).
  Returns:
    (upper, lower) of shape (m, K).
  """
  m = start.shape[0]
  lo2 = jnp.concatenate([i_lo, i_lo])
  st2 = jnp.concatenate([steps, steps])
  w = _compose_batch(p, lo2, st2, jnp.concatenate([start, start]), nbits, size=size)
  w_p = jnp.maximum(w[:m], 0.0)
  w_o = w[m:]
  # Lower bound: subtract the mass that may have wrapped from below the
  # window to its top and the FFT round-off allowance.
  slack = _roundoff_allowance(w_o) + wrap
  # Upper bound: the same round-off allowance is added (booked with the
  # infinity atom): clipping the negative FFT noise to zero can otherwise
  # drop up to N·|noise| of δ, which matters at δ below ~1e-9 on windows of
  # 10^6 points.  Where the allowance alone exceeds the target δ, ε is +inf
  # and jaxdp.epsilon returns the RDP bound.
  inf_up = inf_mass + _roundoff_allowance(w[:m])
  zero = jnp.zeros_like(inf_mass)
  if want_epsilon:
    up = _epsilon_batch(w_p, start, h, inf_up, queries)
    lo = _epsilon_batch(w_o, start, h, zero, queries + slack[:, None], lower=True)
  else:
    up = _delta_batch(w_p, start, h, inf_up, queries)
    lo = _delta_batch(w_o, start, h, zero, queries) - slack[:, None]
  return up, lo


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
  h = np.clip(np.sqrt(2.0 * rtol * v), 1e-6, _MAX_AUTO_H)
  # Size caps: one-step span and composed window (memory floor on h).  The
  # window's spread uses the loss variance bounded by q·span² (at small σ the
  # χ² proxy v is astronomically larger than the spread of the loss); the
  # real window comes from Chernoff edges and is capped at run time.
  i_lo, i_hi = _grid_range(q, sigma, t, 1.0, True)
  span = (i_hi - i_lo).astype(np.float64)
  s = np.sqrt(t * np.minimum(v, np.maximum(q, 1e-300) * span ** 2))
  window = np.minimum(40.0 * s + 2.0 * span, t * span)
  h_min = np.maximum(span / _MAX_STEP_GRID, window / _MAX_WINDOW)
  h = np.maximum(h, h_min)
  # Align the grid with the largest add-direction loss -log(1-q), where that
  # direction's loss mass piles up (keeps the optimistic end tight): h = top/k
  # for a whole k, but never below the memory floor h_min (when top < h_min
  # the grid is left unaligned; aligning it there once shrank h to -log(1-q)
  # and asked for grids of 10^8 points).
  with np.errstate(divide="ignore"):
    top = -np.log1p(-q)
  ok = np.isfinite(top) & (top > 0)
  top_ = np.where(ok, top, 1.0)
  k = np.minimum(np.ceil(top_ / h), np.floor(top_ / h_min))
  return np.where(ok & (k >= 1), top_ / np.maximum(k, 1.0), h)


def _pow2(n, least=2 ** 12):
  return 1 << int(max(int(n), least) - 1).bit_length()


def _fft_size(n, least=2 ** 12):
  """Smallest FFT length >= n of the form f·2^k, f in {1, 3, 5, 7, 9}.

  The composition cost (FFT and the spectrum's power) is linear in the
  length, and these lengths keep the waste of the window below 25% instead
  of 100% for powers of two alone.
  """
  n = max(int(n), least)
  best = _pow2(n)
  for f in (5, 3, 7, 9):
    k = _pow2(-(-n // f), least=1)
    best = min(best, f * k)
  return best


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
    (upper, lower, grow): (U, K) arrays, for want_epsilon the ε bounds for
    target δ's, otherwise the δ bounds for given ε's; and (U,) factors by
    which h must grow for configurations whose one-step grid or composed
    window would exceed the memory caps (``_MAX_STEP_GRID``, ``_MAX_FFT``).
    Those are not composed (their bounds stay -inf) and no memory is
    allocated for them: the window is known from the Chernoff edges before
    the FFT buffer exists.
  """
  q, sigma, steps = (np.asarray(a, np.float64).reshape(len(h), -1) for a in (q, sigma, steps))
  u_count, n_ph = q.shape
  k_count = queries.shape[1]
  upper = np.full((u_count, k_count), -np.inf)
  lower = np.full((u_count, k_count), -np.inf)
  hh_rows = np.repeat(h, n_ph)
  qf, sf, tf = q.ravel(), sigma.ravel(), steps.ravel()
  live = tf > 0
  grow = np.ones(u_count)
  pending = []
  for remove in (True, False):
    i_lo, i_hi = _grid_range(qf, sf, tf, hh_rows, remove)
    i_lo = np.where(live, i_lo, 0)
    n = np.where(live, i_hi - i_lo + 1, 1)
    # Rows whose one-step grid alone exceeds the cap: not built (their
    # configuration is flagged to grow h).
    row_grow = np.where(live, n / _MAX_STEP_GRID, 0.0).reshape(u_count, n_ph).max(1)
    grow = np.maximum(grow, row_grow)
    live_r = live & np.repeat(grow <= 1.0, n_ph)
    rows = len(qf)
    p_pess = [np.zeros(1)] * rows
    p_opt = [np.zeros(1)] * rows
    inf1 = np.zeros(rows)
    a = np.zeros(rows)
    b = np.zeros(rows)
    idx = np.nonzero(live_r)[0]
    for part, nb_pad in _chunks(n[idx]):
      sel = idx[np.asarray(part)]
      rob, j0, start, n_rows = _pack(n[sel], nb_pad)
      r_pad, m = len(start), len(sel)

      def pad(x, fill):
        return np.concatenate([x[sel], np.full(r_pad - m, fill, x.dtype)])

      out = _stage1(pad(qf, 0.5), pad(sf, 1.0), pad(hh_rows, 1.0), pad(i_lo, 0), pad(tf, 1.0),
                    rob, j0, start, n_rows, remove=remove)
      pp, inf_p, po, aa, bb = (np.asarray(o) for o in out)
      for r, k in enumerate(sel):
        p_pess[k] = pp[start[r]:start[r] + n[k]]
        p_opt[k] = po[start[r]:start[r] + n[k]]
      inf1[sel] = inf_p[:m]
      a[sel] = aa[:m]
      b[sel] = bb[:m]
    # Union bound over phases: the window of the sum is the sum of windows.
    a_cfg = a.reshape(u_count, n_ph).sum(1)
    b_cfg = b.reshape(u_count, n_ph).sum(1)
    log_keep = (steps * np.log1p(-inf1.reshape(u_count, n_ph))).sum(1)
    inf_cfg = -np.expm1(log_keep) + _TAIL * n_ph
    n_cfg = n.reshape(u_count, n_ph)
    lo_cfg = i_lo.reshape(u_count, n_ph)
    size = np.array([_fft_size(k) for k in (b_cfg - a_cfg + 1)])
    ok_cfg = grow <= 1.0
    grow = np.maximum(grow, np.where(ok_cfg, size / _MAX_FFT, 0.0))
    size = np.where(grow <= 1.0, size, 0)
    for sz in np.unique(size[size > 0]):
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
        st_int = steps[sel].astype(np.int64)
        nbits = max(1, int(st_int.max()).bit_length())  # traced: no recompiles
        up, lo = _finish(np.concatenate([pp, po]), lo_cfg[sel], st_int,
                         a_cfg[sel].astype(np.int64), nbits, h[sel], inf_cfg[sel],
                         queries[sel], _TAIL * n_ph, size=int(sz), want_epsilon=want_epsilon)
        pending.append((sel[:m], up, lo))
  for sel, up, lo in pending:  # collected after all groups are dispatched
    m = len(sel)
    upper[sel] = np.maximum(upper[sel], np.asarray(up)[:m])
    lower[sel] = np.maximum(lower[sel], np.asarray(lo)[:m])
  over = grow > 1.0
  upper[over] = np.nan
  lower[over] = np.nan
  return upper, lower, grow


def _run_within_memory(q, sigma, steps, h, queries, *, want_epsilon, automatic):
  """:func:`_run` with the memory caps enforced for every input.

  Configurations whose grids would exceed the caps are recomputed with h
  grown by the reported factor (automatic grids; the answer stays a
  certified bound, only coarser), or rejected with a ``ValueError`` naming
  ``value_discretization_interval`` when the caller fixed h.
  """
  h = np.asarray(h, np.float64).copy()
  q, sigma, steps = (np.asarray(a, np.float64).reshape(len(h), -1) for a in (q, sigma, steps))
  upper, lower, grow = _run(q, sigma, steps, h, queries, want_epsilon=want_epsilon)
  for _ in range(8):
    over = np.nonzero(grow > 1.0)[0]
    if not len(over):
      break
    if not automatic:
      k = over[0]
      raise ValueError(
          f"value_discretization_interval={h[k]!r} needs a loss grid {grow[k]:.3g} times "
          f"larger than the memory cap for q={q[k].tolist()}, sigma={sigma[k].tolist()}, "
          f"steps={steps[k].tolist()}; use at least {h[k] * grow[k] * 1.05:.6g} or None.")
    h[over] *= grow[over] * 1.05
    u, l, g = _run(q[over], sigma[over], steps[over], h[over], queries[over],
                   want_epsilon=want_epsilon)
    upper[over], lower[over] = u, l
    grow = np.ones_like(grow)
    grow[over] = g
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


def _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon, automatic):
  """(upper, lower) for every query: 0 where trivial, else from the composed PLDs."""
  up = np.zeros(trivial.shape)
  lo = np.zeros(trivial.shape)
  if len(cfg):
    u, l = _run_within_memory(cfg[:, 0], cfg[:, 1], cfg[:, 2], h, table,
                              want_epsilon=want_epsilon, automatic=automatic)
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
  up, lo = _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon=False,
                           automatic=value_discretization_interval is None)
  up = np.clip(up, 0.0, 1.0).reshape(shape)
  lo = np.clip(lo, 0.0, 1.0).reshape(shape)
  lo, up = _guard("delta", lo, up, q, sigma, steps, epsilon, shape)
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
  up, lo = _scatter_bounds(trivial, cfg, inverse, slot, table, h, want_epsilon=True,
                           automatic=value_discretization_interval is None)
  up = np.maximum(up, 0.0).reshape(shape)
  lo = np.maximum(lo, 0.0).reshape(shape)
  lo, up = _guard("epsilon", lo, up, q, sigma, steps, delta, shape)
  return (lo, up) if return_bounds else up


def _guard(name, lo, up, q, sigma, steps, value, shape):
  """Runtime soundness guards (:mod:`jaxdp._guards`) on a tight answer."""
  q, sigma, steps, value = (np.broadcast_to(np.asarray(a, np.float64), shape)
                            for a in (q, sigma, steps, value))
  composed = (np.round(steps) >= 1) & (q > 0)
  if name == "epsilon":
    one = _guards.one_step_epsilon(q, sigma, value)
  else:
    one = _guards.one_step_delta(q, sigma, value)

  def safe(mask):
    from jaxdp import _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if name == "epsilon" else _api.delta
    return fn(q[mask], sigma[mask], steps[mask], value[mask])

  return _guards.check(name, lo, up, one, composed, safe)


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
    up, _ = _run_within_memory(q, sigma, steps, np.array([h]), np.array([[float(value)]]),
                               want_epsilon=want_epsilon,
                               automatic=value_discretization_interval is None)
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
