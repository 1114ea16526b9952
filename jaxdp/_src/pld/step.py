"""One-step discretisation of the Poisson-sampled Gaussian's privacy loss
for :mod:`jaxdp.pld`: loss geometry, the packed block layout of the one-step
grids, the pessimistic ("connect the dots") and optimistic discretisations, and
the Chernoff window edges of the T-fold composition.

The mathematics is in the docstring of :mod:`jaxdp.pld`; every function here is
private to it. The packed block layout (:class:`_Rows`, the host's packing
and chunking) is in :mod:`jaxdp._src.pld.step_layout`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfc
from scipy import special as _sps  # host-side scalars only (ndtri)

from jaxdp._src.core import numerics as num
from jaxdp._src.pld.step_layout import _Rows
from jaxdp._src.core import persist

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
_EDGE_PAD = 64         # accuracy margin on the uncertified window edges (_stage1)
_EDGE_BISECTIONS = 6   # order-search steps of _chernoff_edges


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


def _grid_steps(steps):
  """Step counts rounded up to a power of 256 (1, 256, 65536, 2^24, ...): the
  one-step grid's range depends on T only through this bucket, so
  configurations that differ in T alone (a sweep over training length)
  share their one-step PMFs (:func:`jaxdp._src.pld.run._one_step_rows`); the
  grids grow by <= ~10% (the Gaussian quantile of tail/B against tail/T).
  """
  t = np.maximum(np.asarray(steps, np.float64), 1.0)
  return np.exp2(8.0 * np.ceil(np.log2(t) / 8.0))


def _grid_range(q, sigma, steps, h, remove, tail=_TAIL):
  """Host: integer loss-grid range [i_lo, i_hi] of one step (NumPy, vectorised).

  The grid covers the x-range outside which the direction's P-distribution
  has mass ``tail / B`` per side, with B = :func:`_grid_steps` (>= steps);
  what lies beyond is booked exactly by the kernel (below: rounded up to the
  lowest node; above: the infinity atom), so ``tail`` only trades grid
  length for accuracy.  The remove direction's P is the mixture
  (1 - q) N(0, σ²) + q N(1, σ²): its top x_hi splits the budget between the
  two components, q·Φ̄((x_hi - 1)/σ) <= τ/2 and (1 - q)·Φ̄(x_hi/σ) <= τ/2,
  which for small q cuts the long, almost empty top of the grid (each
  component's own τ-quantile there, before: ~20% more nodes at q = 0.004).
  """
  q = np.asarray(q, np.float64)
  sigma = np.asarray(sigma, np.float64)
  tau = np.asarray(tail, np.float64) / _grid_steps(steps)
  z = -_sps.ndtri(tau)

  def loss(x):
    with np.errstate(divide="ignore"):
      return np.logaddexp(np.log1p(-q), np.log(q) + (2.0 * x - 1.0) / (2.0 * sigma ** 2))

  if remove:
    lo = loss(-sigma * z)
    with np.errstate(divide="ignore"):
      z1 = -_sps.ndtri(np.minimum(0.5 * tau / q, 0.5))          # q·Φ̄(z1) <= τ/2
      z0 = -_sps.ndtri(np.minimum(0.5 * tau / (1.0 - q), 0.5))  # (1-q)·Φ̄(z0) <= τ/2
    hi = loss(np.maximum(1.0 + sigma * z1, sigma * z0))
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


def _single_step(q, sigma, h, i_lo, lay, *, remove, want_lower=True):
  """One-step pessimistic and optimistic PMFs on the grids (i_lo + j)·h.

  Args:
    q, sigma, h, i_lo: (rows,) parameters.  lay: the packed layout (_Rows).
    remove: boolean, or (rows,) booleans: the direction of each row (may be
      traced).  want_lower: boolean (may be traced); without it the
      optimistic PMF is all zeros (not built).
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
  # ``remove`` is traced, per row: one compiled program serves both
  # directions, in the same call.
  rem_rows = jnp.broadcast_to(jnp.asarray(remove), lay.n.shape)
  remove = lay.row(rem_rows)
  xs = _x_of_loss(jnp.where(remove, eps, -eps), q_, sigma_)

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
    m = jnp.where(remove, jnp.where(z > 0, sf - nxt(sf), nxt(c) - c),
                  jnp.where(nxt(z) > 0, nxt(sf) - sf, c - nxt(c)))
    return jnp.maximum(m, 0.0), c, sf

  m0, c0, s0 = mass(0.0)
  m1, c1, s1 = mass(1.0)
  mix = (1.0 - q_) * m0 + q_ * m1
  pb, qb = jnp.where(remove, mix, m0), jnp.where(remove, m0, mix)
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
  mix_c0f, mix_s0f = (1.0 - q) * c0f + q * c1f, (1.0 - q) * s0f + q * s1f
  mix_s0l, mix_c0l = (1.0 - q) * s0l + q * s1l, (1.0 - q) * c0l + q * c1l
  below = jnp.where(rem_rows, mix_c0f, s0f)
  q_below = jnp.where(rem_rows, c0f, mix_s0f)
  above = jnp.where(rem_rows, mix_s0l, c0l)
  q_above = jnp.where(rem_rows, s0l, mix_c0l)

  # beta is 0 at j >= n - 1, so the previous row's filler reads as 0.
  p_in = jnp.where(valid, alpha + lay.prv(beta), 0.0)
  p_pess = jnp.where(j == 0, p_in + lay.row(below), p_in)

  def optimistic():
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
    tot_opt = lay.total(p_opt)
    return p_opt * lay.row(jnp.minimum(1.0, (1.0 - 4.0 * fp)
                                       / jnp.where(tot_opt > 0, tot_opt, 1.0)))

  # Upper bounds alone (want_lower False, a traced scalar: one program) skip
  # the optimistic construction, half of this kernel's time.
  p_opt = jax.lax.cond(want_lower, optimistic, lambda: jnp.zeros_like(p_pess))
  tot_pess = lay.total(p_pess) + above
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
  total = lay.total(p)
  feasible = feasible & (jnp.abs(total - 1.0) <= 1e-9)
  return p, feasible


def _chernoff_edges(p, steps, h, lay, upper, order=None, log_inv=-math.log(_TAIL)):
  """Chernoff edges (node index) of the ``steps``-fold sums of every row.

  For ``upper``: x with P(S > x) <= τ, else x with P(S < x) <= τ, where
  τ = exp(-log_inv) is the row's truncation budget (default _TAIL) and S
  is the sum of ``steps`` independent draws from the row's PMF (mass <= 1)
  on nodes j: P(S > x) <= M(t)^T e^{-t x} for every t > 0 (M the MGF), so
  any order t gives a valid edge e(t) = (T·K(t) + log_inv)/t (K = log M) and
  the smallest over the orders tried is kept.

  Order search: e is quasi-convex in t (its derivative has the sign of
  g(t) = t·T·K'(t) - T·K(t) - log_inv, and g' = t·T·K''(t) >= 0 since the
  cumulant generating function K is convex), so bisection on the sign of g
  over log2 t finds its minimum: ``_EDGE_BISECTIONS`` steps over the orders
  4^k / span, k in [-1, 10] (span = the row's loss span n·h; with rare large
  losses, σ = 0.01 and q = 1e-6, the best order is ~1e-3 loss units), leave
  a bracket 22/2^6 = 0.34 octaves wide, and the best order evaluated is kept
  (an order off by 2^{1/2} from the optimum widens the edge by about 6%).
  K and K' come from one pass over the PMF per step. (Before: twelve coarse
  orders a factor 4 apart and two refinements, 14 passes.) With ``order``
  given ((rows,), e.g. the best order of a nearby PMF) only that order is
  evaluated.

  Returns:
    (edge, order): (rows,) edges and the orders that gave them.
  """
  jf = lay.j.astype(p.dtype)
  sign = 1.0 if upper else -1.0
  logp = num.safe_log(p)
  rows = lay.n.shape[0]

  def cgf(theta):  # theta: (rows,) -> K(t) and K'(t) of each row, t = theta·h per node
    z = logp + sign * lay.row(theta * h) * jf                # (blocks, _BLK)
    mb = jnp.max(z, axis=-1)                                 # -inf: a block without mass
    w = jnp.exp(z - jnp.where(jnp.isfinite(mb), mb, 0.0)[:, None])
    s0, s1 = jnp.sum(w, axis=-1), jnp.sum(w * jf, axis=-1)    # (blocks,)
    # The row's largest block maximum; empty blocks (-inf) must not enter
    # it, or the other blocks' scales underflow to 0.
    mx = jax.ops.segment_max(mb, lay.rob, num_segments=rows)
    mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
    scale = jnp.exp(mb - mx[lay.rob])
    m0 = jax.ops.segment_sum(s0 * scale, lay.rob, num_segments=rows)
    m1 = jax.ops.segment_sum(s1 * scale, lay.rob, num_segments=rows)
    return num.safe_log(m0) + mx, sign * m1 / m0

  def edge_at(theta):
    t = theta * h
    k, slope = cgf(theta)
    return (steps * k + log_inv) / t, t * steps * slope - steps * k - log_inv

  if order is None:
    span = jnp.maximum(lay.n * h, 1e-300)                    # (rows,)
    lo = -2.0 - jnp.log2(span)                               # log2 of 4^-1 / span
    hi = 20.0 - jnp.log2(span)                               # log2 of 4^10 / span

    def bisect(_, carry):
      lo, hi, best, best_theta = carry
      mid = 0.5 * (lo + hi)
      theta = jnp.exp2(mid)
      e, g = edge_at(theta)
      better = e < best
      best = jnp.where(better, e, best)
      best_theta = jnp.where(better, theta, best_theta)
      up = g < 0          # e still falls at mid: the minimum lies above
      return jnp.where(up, mid, lo), jnp.where(up, hi, mid), best, best_theta

    init = (lo, hi, jnp.full_like(lo, jnp.inf), jnp.exp2(hi))
    _, _, e, order = jax.lax.fori_loop(0, _EDGE_BISECTIONS, bisect, init)
  else:
    e = edge_at(order)[0]
  if upper:
    top_nz = jnp.max(jnp.where(p > 0, jf, 0.0), axis=-1)
    n_nonzero = jax.ops.segment_max(top_nz, lay.rob, num_segments=rows)
    return jnp.minimum(e, steps * n_nonzero), order
  return jnp.maximum(-e, 0.0), order


def _stage1(q, sigma, h, i_lo, steps, log_inv, rob, j0, start, n, *, remove, want_lower=True):
  """One-step PMFs of packed rows (:class:`_Rows`) and their composed windows.

  Returns the flat PMFs, the per-row infinity mass and the windows [a_p,
  b_p] (pessimistic) and [a_o, b_o] (optimistic) of loss indices: each PMF
  composes in its own window.  Only the two window edges that soundness
  relies on are Chernoff-certified: the upper edge of the pessimistic PMF
  (the mass above it is booked at infinity) and the lower edge of the
  optimistic one (the mass below it, wrapped to the top, is subtracted from
  the lower bound).  The other two only matter for accuracy: pessimistic
  mass below its window wraps to its top, which can only raise the
  pessimistic δ, and optimistic mass above its window wraps to its bottom,
  which can only lower the optimistic δ.  Each edge gets ``_EDGE_PAD``
  points more.  The pessimistic window is a function of the pessimistic PMF
  alone, so upper bounds alone (``want_lower`` False: the optimistic PMF is
  not built, zeros, and its window is a copy) compose bit for bit what the
  full evaluation composes (the PLD calibration's rounds rely on it).

  Two compiled calls: fused into one, XLA's fusion of the PMF construction
  with the edge reductions measured ~1.5x slower.

  ``steps`` and ``log_inv`` may be (L, rows): L compositions of every PMF
  (rows whose PMFs are equal share one, :func:`jaxdp._src.pld.run._one_step_rows`),
  each with its own windows; the four windows are then L-lists (stacked on
  the host: a stack in XLA compiled a program per L and shape).
  """
  flags = (jnp.asarray(remove), jnp.asarray(want_lower))
  p_pess, inf_pess, p_opt = _one_step(q, sigma, h, i_lo, rob, j0, start, n, *flags)
  layers = [_edges(p_pess, p_opt, st, h, i_lo, li, rob, j0, start, n, flags[1])
            for st, li in zip(np.atleast_2d(steps), np.atleast_2d(log_inv))]
  windows = layers[0] if np.ndim(steps) == 1 else tuple(zip(*layers))
  return (p_pess.reshape(-1), inf_pess, p_opt.reshape(-1)) + tuple(windows)


@persist.jit
def _one_step(q, sigma, h, i_lo, rob, j0, start, n, remove, want_lower):
  return _single_step(q, sigma, h, i_lo, _Rows(rob, j0, start, n), remove=remove,
                      want_lower=want_lower)


@persist.jit
def _edges(p_pess, p_opt, steps, h, i_lo, log_inv, rob, j0, start, n, want_lower):
  lay = _Rows(rob, j0, start, n)
  # Each PMF composes in its own window. The pessimistic one's is a function
  # of that PMF alone (both edges searched), so upper bounds alone
  # (want_lower False) compose exactly what the full evaluation composes;
  # the optimistic one's edges are taken at the pessimistic PMF's best
  # orders, one pass each (any order gives a valid Chernoff edge, so its
  # certified lower edge stays certified; the two PMFs are close: a search
  # of its own, 6 passes, found the same windows on benchmarks/pld.py's
  # batch, its bisection taking the same steps).
  edge = functools.partial(_chernoff_edges, steps=steps, h=h, lay=lay, log_inv=log_inv)
  hi_p, t_hi = edge(p_pess, upper=True)
  lo_p, t_lo = edge(p_pess, upper=False)
  # A PMF without mass (edges +inf below, -inf above: at the extremes, e.g.
  # σ = 0.06 on a 5-node grid, the optimistic construction can leave none)
  # composes to zeros in any window; a non-finite accuracy edge is replaced
  # by the certified one of the same PMF (more wrap on the sound side). A
  # certified edge that is +inf (pessimistic top) or -inf (optimistic
  # bottom) with mass present stays, and fails loudly downstream.
  empty_p = (lo_p == jnp.inf) & (hi_p == -jnp.inf)
  hi_p = jnp.where(empty_p, 0.0, hi_p)
  lo_p = jnp.where(empty_p, 0.0, jnp.where(jnp.isfinite(lo_p), jnp.minimum(lo_p, hi_p), hi_p))

  def optimistic_window():
    lo_o = edge(p_opt, upper=False, order=t_lo)[0]
    hi_o = edge(p_opt, upper=True, order=t_hi)[0]
    # +inf: no mass (K = -inf), any window serves. With mass present it can
    # only come from a failed search (a first version of the bisection gave
    # it, and the lower bound went above the exact value): the trivially
    # certified edge 0 then, never the uncertified pessimistic one.
    has_mass = lay.total(p_opt) > 0
    lo_o = jnp.where(lo_o == jnp.inf, jnp.where(has_mass, 0.0, lo_p), lo_o)
    hi_o = jnp.where(jnp.isfinite(hi_o), hi_o, hi_p)
    return lo_o, jnp.maximum(hi_o, lo_o)

  lo_o, hi_o = jax.lax.cond(want_lower, optimistic_window, lambda: (lo_p, hi_p))
  base = steps * i_lo
  return (base + jnp.floor(lo_p) - _EDGE_PAD, base + jnp.ceil(hi_p) + _EDGE_PAD,
          base + jnp.floor(lo_o) - _EDGE_PAD, base + jnp.ceil(hi_o) + _EDGE_PAD)


