"""Second-order certified laws of random allocation by convex order (issue 38).

Notation of :mod:`jaxdp._src.mechanisms.allocation`. Write S = k·e^L = (k − m) +
Σ_{i≤m} W_i for an epoch of m steps; under Q the W_i are i.i.d. log-normal,
log W ~ N(−1/(2σ²), 1/σ²), mean 1. The δ of T composed epochs, in either
direction, is an expectation under Q only:

    remove:  δ(ε) = E_Q[(Π_t S_t/k − e^ε)_+]        (H_{e^ε}(P‖Q) = E_Q[(dP/dQ − e^ε)_+]),
    add:     δ(ε) = E_Q[(1 − e^ε Π_t S_t/k)_+]      (H_{e^ε}(Q‖P) = E_Q[(1 − e^ε dP/dQ)_+]),

and both integrands are convex in each S_t (the others fixed, non-negative).
So (Shaked & Shanthikumar, "Stochastic Orders", Thm 3.A.12: convex order is
closed under sums of independent variables and mixtures):

  * if S'_t ≥_cx S_t (same mean, more spread) for every epoch, the pair
    (P', Q') with Q' the law of S'_t and dP'/dQ' = S'/k (a probability measure:
    E[S'/k] = 1) has a larger δ in both directions, for every composition;
  * if S''_t ≤_cx S_t, a smaller one.

Upper laws (``spread``): atoms only at the grid points e^{jη}. Each Gaussian
cell of log W, and each pairwise sum a + b of two atoms in a doubling step
(log(e^a + e^b) = max + log1p(e^{−dη}) falls between two grid points), is
replaced by the two-point law on its cell's endpoints with the same mass and
mean: a mean-preserving spread, ≥_cx. Lower laws (``merge``): each cell's mass
sits at its conditional mean (exact positions, not grid points); the
pairwise sums falling in one cell are merged to their mean: Jensen, ≤_cx.
Both lose only O(η²) per step (a spread adds at most η²·S²/4 of variance),
where rounding to a grid loses O(η).

Tails: the lower laws drop mass (δ is non-decreasing in mass); the upper laws
drop mass beyond ±z standard deviations of log W (z from the cut ζ, on the
Q-side law N(−1/(2σ²), 1/σ²) below and on the P-side law N(+1/(2σ²), 1/σ²)
above) and, at every sum, each tail of Q-mass <= ζ and first moment <=
ζ·terms, and book it: a dropped Q-mass μ and first moment M add at most μ
(add) and M/k (remove: the P-mass) to any composed δ, and are carried at +∞
(δ ≤ the kept part's δ + P[some part dropped]). What is booked is these
bounds (ζ, ζ·terms per tail), not the amounts dropped, so that the +∞ masses
(~4·k·ζ per epoch, both directions) do not depend on σ or η.
Round-off: masses are sums of products of non-negative numbers (relative
error tracked as ρ, from the cells' log-CDF error bounds; upper masses
inflated by 1 + ρ, lower deflated). A split's weights w (the upper part's
share) carry round-off, and so do the base cells' partial moments:

  * base cells: the two-point law of a cell sits at the computed mean M̂/μ̂
    (masses μ̂, up to ρ): it is the exact spread of an atom whose log is off by
    at most e^η·err(M)/M + err(μ)/μ (+ the grid's exp rounding) from the
    cell's true conditional mean: a position error, ``bad`` of the base law,
    kept (max) through the sums;
  * pairwise sums and ``+ (k − m)``: the two computed masses v(1 − w̃), v·w̃ add
    up to v (up to ρ) and have the mean t̃ = g_f + w̃(g_{f+1} − g_f): they are the
    exact mean-preserving spread of an atom at t̃ in place of the exact sum t.
    t̃ is computed in the log domain (log1p, expm1 of numbers below 1 + |log k|
    + 40), so |log t̃ − log t| ≤ a few ulps of 1 + |log S|, far below the 1e-12
    (``_TAU``) booked per operation. So the computed law is the exact spread of
    sums S̃ with |log S̃ − log S| ≤ α per epoch, α = ``tau`` (the base atoms'
    ``bad`` plus all operations of the epoch, log-sum-exp being 1-Lipschitz
    in each argument).

So one spread chain serves both directions (the remove hinge is increasing
convex in each S_t, the add hinge decreasing convex: both convex, and the
spread is ≥_cx with the mean kept).

Such a position error α is a loss shift. Remove: with S ≤ e^α·S̃ per epoch,
E[(Π S_t/k − e^ε)_+] ≤ e^{Tα}·E[(Π S̃_t/k − e^{ε−Tα})_+], i.e. the δ of the
spread law read at ε − Tα with its P-masses inflated by e^α per epoch (done
here, on ``q_up``). Add: with S ≥ e^{−α}·S̃, E[(1 − e^ε Π S_t/k)_+] ≤
E[(1 − e^{ε−Tα} Π S̃_t/k)_+], the δ read at ε − Tα. The composition applies
the shift (``tau`` per epoch, :class:`jaxdp._src.mechanisms.discretise.LossPMF`'s
``tau``) to both sides: reading the pessimistic side at ε − Tα, the optimistic
at ε + Tα. A position of the merged law is likewise off by its base log-ratio
error (``bad`` of a merged law) and ≤ 1e-12 relative per operation, the
same shift by the same argument with the inequalities reversed: remove, with
S ≥ e^{−α}S̃, E[(Π S_t/k − e^ε)_+] ≥ e^{−Tα}·E[(Π S̃_t/k − e^{ε+Tα})_+] (the
merged Q-masses deflated by e^{−α} per epoch, which is sound for add too:
fewer Q-mass, smaller add δ); add, with S ≤ e^α·S̃, E[(1 − e^ε Π S_t/k)_+] ≥
E[(1 − e^{ε+Tα} Π S̃_t/k)_+]. Nothing of the round-off is booked as
mass at +∞, so a δ down to the truncated tails' ~1e-17 is readable.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
from scipy import special as sps

__all__ = ["CxLaw", "base_law", "combine", "epoch_pairs", "EpochPairs"]

_U = float(np.finfo(np.float64).eps)
ZETA = 1e-18            # mass cut from each tail at every truncation (booked or dropped)
_TAU = 1e-12             # relative accuracy of S assumed per operation (loss shift)
_BLOCK = 1 << 16         # pairs per block of the dense merge


class CxLaw(NamedTuple):
  """Law of a sum of ``terms`` W's plus nothing else: Q-mass ``p[t]`` at
  e^{x_t}, x_t = θ + (lo + t)·η (``pos`` None: a spread law) or ``pos[t]``
  (a merge law, pos[t] in [(lo+t)η, (lo+t+1)η]).

  ``dq``/``dm``: bounds on the dropped Q-mass and first moment (spread);
  ``bad``: bound on the relative mass moved by one cell by round-off;
  ``rho``: relative error of the masses; ``ops``: operations so far (``tau``)."""
  lo: int
  p: np.ndarray
  pos: Optional[np.ndarray]
  eta: float
  terms: int
  dq: float
  dm: float
  bad: float
  rho: float
  ops: int
  theta: float = 0.0

  @property
  def hi(self):
    return self.lo + self.p.size - 1


def _norm_cdf_pair(a, b):
  """Φ(b) − Φ(a) for arrays a < b, computed on the smaller tail's side, and an
  absolute error bound (log-CDFs accurate to 16 ulps of 1 + |log F|, as in
  :mod:`jaxdp._src.mechanisms.discretise`)."""
  lower = b <= 0
  upper = a >= 0
  with np.errstate(divide="ignore", invalid="ignore"):
    lf_a, lf_b = sps.log_ndtr(a), sps.log_ndtr(b)
    ls_a, ls_b = sps.log_ndtr(-a), sps.log_ndtr(-b)
    via_f = np.exp(lf_b) * -np.expm1(np.minimum(lf_a - lf_b, 0.0))
    via_s = np.exp(ls_a) * -np.expm1(np.minimum(ls_b - ls_a, 0.0))
  mid = 1.0 - np.exp(lf_a) - np.exp(ls_b)
  m = np.maximum(np.nan_to_num(np.where(lower, via_f, np.where(upper, via_s, mid))), 0.0)
  e = lambda l: 16 * _U * (1.0 + np.abs(l)) * np.exp(l)
  err = np.where(lower, e(lf_a) + e(lf_b), np.where(upper, e(ls_a) + e(ls_b),
                                                    e(lf_a) + e(ls_b) + 2 * _U))
  return m, np.nan_to_num(err) + 4 * _U * m


def base_law(sigma, eta, spread, zeta=None, theta=0.0):
  """The law of one W (log W ~ N(−1/(2σ²), 1/σ²)) on the grid e^{θ + jη}.

  spread: each cell's mass μ and first moment M (log-normal partial moments)
  go to its endpoints with the same mass and mean; else to the point M/μ.
  Either way an atom (or a two-point law) sits at the computed mean M̂/μ̂,
  whose log is off by at most err(M)/M + err(μ)/μ (and, for the spread, the
  grid's exp rounding and e^η on err(M)): ``bad``, a position error that
  :func:`epoch_pairs` books as a loss shift (module docstring).
  """
  mu, s = -0.5 / sigma ** 2, 1.0 / sigma
  zc = -sps.ndtri(ZETA if zeta is None else zeta) + 0.5
  # the upper end covers zc standard deviations of the P-side (moment) law
  # N(mu + s², s²) as well: its tail, booked at +inf, is then <= ZETA too
  j0, j1 = math.floor((mu - zc * s - theta) / eta), math.ceil((mu + s * s + zc * s - theta) / eta)
  e = theta + np.arange(j0, j1 + 1) * eta
  mass, err_mass = _norm_cdf_pair((e[:-1] - mu) / s, (e[1:] - mu) / s)
  # E[W; cell] = e^{mu + s²/2}·(Φ(b') − Φ(a')), shifted by s² (mean of W is 1)
  mom, err_mom = _norm_cdf_pair((e[:-1] - mu - s * s) / s, (e[1:] - mu - s * s) / s)
  pos_m = mass > 0
  rho = float(np.max(err_mass[pos_m] / mass[pos_m], initial=0.0)) + 1e-14
  below = math.exp(float(sps.log_ndtr((e[0] - mu) / s)))
  above_m = math.exp(float(sps.log_ndtr((mu - e[-1]) / s)))
  above_mom = math.exp(float(sps.log_ndtr((mu + s * s - e[-1]) / s)))
  if not spread:
    ok = mass > 0
    ratio = np.where(ok, mom / np.where(ok, mass, 1.0), 1.0)
    pos = np.clip(np.log(np.maximum(ratio, 1e-300)), e[:-1], e[1:])
    # ``bad`` of a merged law: the largest error of a position (log M/μ), a loss shift
    pos_err = float(np.max((err_mom[pos_m] / np.maximum(mom[pos_m], 1e-300)
                            + err_mass[pos_m] / mass[pos_m]), initial=0.0)) * 1.01 + 4 * _U
    return CxLaw(j0, mass, pos, eta, 1, 0.0, 0.0, pos_err, rho, 1)
  g0, g1 = np.exp(e[:-1]), np.exp(e[1:])
  # the two-point law's mean is μ̂·g0 + (M̂ − μ̂·g0)·(G1 − G0)/(ĝ1 − ĝ0): M̂ up to the
  # relative rounding of g (|e|·u, amplified 1/η in ĝ1 − ĝ0 but multiplied by
  # ~η back), so its log is off by err(M)/M·e^η + err(μ)/μ + 1e-13 at most;
  # the clip to [0, μ̂] only moves it toward the exact split
  hi_part = np.clip((mom - mass * g0) / (g1 - g0), 0.0, mass)
  bad = float(np.max(math.exp(eta) * err_mom[pos_m] / np.maximum(mom[pos_m], 1e-300)
                     + err_mass[pos_m] / mass[pos_m], initial=0.0)) * 1.01 + 1e-13
  lo_part = mass - hi_part
  p = np.zeros(mass.size + 1)
  p[:-1] += lo_part
  p[1:] += hi_part
  # booked as their bounds (σ-free, see truncate): each tail's Q-mass and moment
  # is < Φ(−zc) < zeta (e[0] <= mu − zc·s < 0, e[-1] >= mu + s² + zc·s)
  zeta = ZETA if zeta is None else zeta
  dq = max(2 * zeta, below + above_m) * (1 + 1e-9)
  dm = max(2 * zeta, below * math.exp(e[0]) + above_mom) * (1 + 1e-9)
  return CxLaw(j0, p, None, eta, 1, dq, dm, bad, rho, 1, theta)


# --------------------------------------------------------------------------
# sums of two independent laws
# --------------------------------------------------------------------------


def _spread_half(out, out_lo, x, y, dmin, dmax, eta, twice):
  """Adds to ``out`` the pairs (x_i, y_j) with d = i − j in [dmin, dmax] (x the
  larger atom): x_i·y_j·(1 − w_d) to cell i + f(d), x_i·y_j·w_d to i + f(d) + 1,
  where log(e^{iη} + e^{jη}) = (i + f(d) + t)η, f(d) = ⌊log1p(e^{−dη})/η⌋, and
  w_d = (e^{tη} − 1)/(e^η − 1) keeps the pair's mean. f takes ~log 2/η values,
  each on a run of consecutive d; on a run the pairs are one direct (not FFT)
  convolution of y with the weights, Σ_d y_{i−d}·c_d, a sum of non-negative
  products (relative error <= its number of terms times u), so the cost is
  ~log 2/η NumPy calls rather than one per d (twice: d > 0 counted twice, the
  doubling's (i, j) and (j, i))."""
  if dmax < dmin:
    return
  dd = np.arange(dmin, dmax + 1)
  tau = np.log1p(np.exp(-dd * eta)) / eta
  fl = np.floor(tau).astype(np.int64)
  w = np.clip(np.expm1((tau - fl) * eta) / math.expm1(eta), 0.0, 1.0)
  c_hi = w if not twice else np.where(dd > 0, 2.0 * w, w)
  c_lo = (1.0 - w) if not twice else np.where(dd > 0, 2.0 * (1.0 - w), 1.0 - w)
  # f is non-increasing in d: runs of equal f are contiguous
  cuts = np.flatnonzero(np.diff(fl)) + 1
  starts = np.concatenate(([0], cuts))
  ends = np.concatenate((cuts, [dd.size]))
  xp, xlo = x.p, x.lo
  yp, ylo = y.p, y.lo
  for s, e in zip(starts.tolist(), ends.tolist()):
    f, dlo = int(fl[s]), int(dd[s])
    # conv[n] = Σ_m y[n − m]·c[dlo + m]: the pairs with x index ylo + n + dlo
    lo_c = np.convolve(yp, c_lo[s:e])
    hi_c = np.convolve(yp, c_hi[s:e])
    n0 = ylo + dlo                       # x index of conv[0]
    a0, a1 = max(xlo, n0), min(xlo + xp.size, n0 + lo_c.size)
    if a1 <= a0:
      continue
    xs = xp[a0 - xlo:a1 - xlo]
    base = a0 + f - out_lo
    out[base:base + xs.size] += xs * lo_c[a0 - n0:a1 - n0]
    out[base + 1:base + 1 + xs.size] += xs * hi_c[a0 - n0:a1 - n0]


def _spread_sum(la, lb):
  """Mean-preserving spread of A + B onto the grid, for every pair of atoms."""
  eta = la.eta
  out_lo = min(la.lo, lb.lo)
  fmax = int(math.floor(math.log(2.0) / eta)) + 1
  out = np.zeros(max(la.hi, lb.hi) + fmax + 3 - out_lo)
  if la is lb:     # doubling: pairs (i, j) and (j, i) land alike; d >= 0, twice for d > 0
    _spread_half(out, out_lo, la, la, 0, la.hi - la.lo, eta, True)
  else:            # B the larger (d = j − i >= 0), then A the larger (d >= 1)
    _spread_half(out, out_lo, lb, la, max(0, lb.lo - la.hi), lb.hi - la.lo, eta, False)
    _spread_half(out, out_lo, la, lb, max(1, la.lo - lb.hi), la.hi - lb.lo, eta, False)
  return out_lo, out

def _merge_block(ea, pa, eb, pb, lo, eta, mass, mom, weight=None):
  """Adds the pairs of a block (rows ``ea``/``pa`` of A, columns ``eb``/``pb`` of
  B, S-space) to the cells' masses and moments (``weight``: pair factors)."""
  s = ea[:, None] + eb[None, :]
  c = np.log(s)
  c *= 1.0 / eta
  np.floor(c, out=c)
  idx = c.astype(np.intp).ravel()
  idx -= lo
  m = pa[:, None] * pb[None, :]
  if weight is not None:
    m *= weight
  mass += np.bincount(idx, weights=m.ravel(), minlength=mass.size)
  m *= s
  mom += np.bincount(idx, weights=m.ravel(), minlength=mass.size)


def _merge_sum(la, lb):
  """A + B with the pairs that fall in one cell merged to their mean.

  Computed in S-space (e^a + e^b, exact but for one rounding; positions are
  within ±750 of 0): a pair's cell is ⌊log(S)/η⌋, the cell's mean is its
  moment over its mass. Any grouping of the pairs is a valid merge (Jensen), so
  a rounding that puts a pair in a neighbouring cell costs no soundness; the
  clip to the cell then moves a position by O(u), inside ``_TAU``. Blocks of
  <= 2^16 pairs (cache-sized temporaries); doubling: only j >= i, the pairs
  j > i twice (a triangular weight on the diagonal blocks only)."""
  eta = la.eta
  lo = math.floor(float(np.logaddexp(la.pos.min(), lb.pos.min())) / eta) - 1
  hi = math.floor(float(np.logaddexp(la.pos.max(), lb.pos.max())) / eta) + 1
  mass = np.zeros(hi - lo + 1)
  mom = np.zeros(hi - lo + 1)
  ea, eb = np.exp(la.pos), np.exp(lb.pos)
  na, nb = la.p.size, lb.p.size
  rows = max(1, _BLOCK // max(nb, 1))
  if la is lb:
    pb2 = 2.0 * lb.p
    tri = np.triu(np.ones((rows, rows)), 1) + 0.5 * np.eye(rows)
    for r0 in range(0, na, rows):
      r1 = min(r0 + rows, na)
      w = tri[:r1 - r0, :r1 - r0]
      _merge_block(ea[r0:r1], la.p[r0:r1], eb[r0:r1], pb2[r0:r1], lo, eta, mass, mom, w)
      if r1 < nb:
        _merge_block(ea[r0:r1], la.p[r0:r1], eb[r1:], pb2[r1:], lo, eta, mass, mom)
  else:
    for r0 in range(0, na, rows):
      _merge_block(ea[r0:r0 + rows], la.p[r0:r0 + rows], eb, lb.p, lo, eta, mass, mom)
  ok = mass > 0
  cells = lo + np.arange(mass.size)
  with np.errstate(divide="ignore"):
    rel = np.where(ok, np.log(np.where(ok, mom, 1.0)) - np.log(np.where(ok, mass, 1.0)), cells * eta)
  pos = np.clip(rel, cells * eta, (cells + 1) * eta)
  return lo, mass, pos


def combine(la, lb, zeta=None):
  """Law of A + B (independent), spread or merged like the inputs, truncated."""
  n_add = la.p.size + lb.p.size + 4
  # a cell sums <= 2·n_add non-negative products (two per run of f, each a sum)
  rho = (1 + la.rho) * (1 + lb.rho) * (1 + 2.02 * n_add * _U) - 1
  terms = la.terms + lb.terms
  ops = max(la.ops, lb.ops) + 1
  if la.pos is None:
    if la.theta != lb.theta:
      raise ValueError("combine: spread laws on different grids")
    lo, p = _spread_sum(la, lb)
    # dropped parts: E[(A+B); A or B dropped] <= dm_a + dq_a·E[B] + dm_b + dq_b·E[A]
    dq = la.dq + lb.dq
    dm = la.dm + la.dq * lb.terms + lb.dm + lb.dq * la.terms
    out = CxLaw(lo, p, None, la.eta, terms, dq, dm, max(la.bad, lb.bad), rho, ops, la.theta)
  else:
    lo, p, pos = _merge_sum(la, lb)
    out = CxLaw(lo, p, pos, la.eta, terms, 0.0, 0.0, max(la.bad, lb.bad), rho, ops)
  return truncate(out, zeta)


def truncate(law, zeta=None):
  """Drops each tail whose Q-mass is <= ``zeta`` and whose first moment is <=
  ``zeta``·terms (so its P-mass, moment/k with k >= terms, is <= ``zeta`` too).

  A spread law books the bounds, not the dropped amounts: ``zeta`` of Q-mass
  and ``zeta``·terms of moment per tail, whatever was dropped (sums of <= n
  non-negative numbers: rounding inside the 1e-9 margin). So the +∞ masses
  depend on the doubling structure (k, m) and ``zeta`` only, never on σ or η,
  and the upper δ keeps the finite part's monotonicity in σ."""
  zeta = ZETA if zeta is None else zeta
  p = law.p
  x = law.theta + (law.lo + np.arange(p.size)) * law.eta
  mom = p * np.exp(x + law.eta)          # >= the atoms' moments
  cs, rs = np.cumsum(p), np.cumsum(p[::-1])
  cm, rm = np.cumsum(mom), np.cumsum(mom[::-1])
  i0 = min(int(np.searchsorted(cs, zeta, side="right")),
           int(np.searchsorted(cm, zeta * law.terms, side="right")), p.size - 1)
  n_up = min(int(np.searchsorted(rs, zeta, side="right")),
             int(np.searchsorted(rm, zeta * law.terms, side="right")))
  i1 = max(p.size - n_up, i0 + 1)
  dq = law.dq + 2 * zeta * (1 + 1e-9)
  dm = law.dm + 2 * zeta * law.terms * (1 + 1e-9)
  pos = None if law.pos is None else law.pos[i0:i1]
  return law._replace(lo=law.lo + i0, p=p[i0:i1].copy(), pos=pos, dq=dq, dm=dm)


def _sum_law(base, count, cache, zeta=None):
  """Law of a sum of ``count`` >= 1 W's (powers of two by doubling, cached)."""
  key = ("pow", id(base))
  powers = cache.setdefault(key, [base])
  while len(powers) < count.bit_length():
    powers.append(combine(powers[-1], powers[-1], zeta))
  res = None
  for t in range(count.bit_length()):
    if (count >> t) & 1:
      res = powers[t] if res is None else combine(res, powers[t], zeta)
  return res


def _plus_constant(law, c):
  """Law of X + c (c >= 0): spread (two grid points) or moved (exact position)."""
  if c <= 0:
    return law
  eta = law.eta
  th = law.theta if law.pos is None else 0.0
  x = th + (law.lo + np.arange(law.p.size)) * eta if law.pos is None else law.pos
  s = np.logaddexp(x, math.log(c)) - th
  cell = np.floor(s / eta).astype(np.int64)
  lo = int(cell.min())
  if law.pos is not None:
    p = np.bincount(cell - lo, weights=law.p)
    mom = np.bincount(cell - lo, weights=law.p * np.exp(s - cell * eta))
    cells = lo + np.arange(p.size)
    ok = p > 0
    rel = np.where(ok, mom / np.where(ok, p, 1.0), 1.0)
    pos = np.clip(cells * eta + np.log(np.maximum(rel, 1e-300)), cells * eta, (cells + 1) * eta)
    return law._replace(lo=lo, p=p, pos=pos, rho=law.rho + 2 * law.p.size * _U, ops=law.ops + 1)
  w = np.clip(np.expm1(s - cell * eta) / math.expm1(eta), 0.0, 1.0)
  p = np.bincount(cell - lo, weights=law.p * (1 - w), minlength=int(cell.max()) - lo + 2)
  p[1:] += np.bincount(cell - lo, weights=law.p * w, minlength=p.size - 1)[:p.size - 1]
  dm = law.dm + c * law.dq
  return law._replace(lo=lo, p=p, dm=dm, rho=law.rho + 2 * law.p.size * _U, ops=law.ops + 1)


class EpochPairs(NamedTuple):
  """One epoch's certified laws of the loss L = log(S/k), as arrays:

  upper (spread): Q-masses ``q_up`` at L = (lo_up + t)·η (for remove: the
  spread law's masses times (1 + ρ)·e^τ) and ``q_up_add`` at (lo_up_add + t)·η
  (for add: times 1 + ρ; the same grid), with the extra mass at +∞
  ``inf_remove`` (P-side) and ``inf_add`` (Q-side); lower (merged): Q-masses
  ``q_low`` at L = ``loss_low`` (exact positions). ``tau``: the loss accuracy
  to book per epoch."""
  lo_up: int
  q_up: np.ndarray
  inf_remove: float
  inf_add: float
  q_low: np.ndarray
  loss_low: np.ndarray
  log_k: float
  eta: float
  tau: float
  lo_up_add: int
  q_up_add: np.ndarray


def _spread_chain(sigma, k, m, eta, theta, cache, zeta):
  key = ("base", True, zeta)
  if key not in cache:
    cache[key] = base_law(sigma, eta, True, zeta=zeta, theta=theta)
  return _plus_constant(_sum_law(cache[key], m, cache, zeta), float(k - m))


def epoch_pairs(sigma, k, m, eta_up, eta_low=None, cache=None, zeta=None):
  """Certified upper (spread) and lower (merged) laws of an m-step epoch.

  Args:
    sigma: σ > 0; k: steps per epoch; m: steps, 1 <= m <= k.
    eta_up, eta_low: grid steps of the two laws (eta_low None: eta_up).
    cache: dict shared by calls with the same σ and grids.
    zeta: mass cut from each tail at every truncation (None: :data:`ZETA`); the
      +∞ masses are about 4·k·zeta at most (the base cells of the m W's and the
      doubling levels' cuts, each doubled by the later levels).

  Returns:
    :class:`EpochPairs`.
  """
  if not 1 <= m <= k:
    raise ValueError(f"m must be in [1, k={k}]; found {m}.")
  eta_low = eta_up if eta_low is None else eta_low
  cache = {} if cache is None else cache
  log_k = math.log(k)
  # the spread grid e^{θ + jη} puts L = log(S/k) on multiples of η
  theta = log_k - eta_up * math.floor(log_k / eta_up)
  zeta = ZETA if zeta is None else zeta
  if ("base", False, zeta) not in cache:
    cache[("base", False, zeta)] = base_law(sigma, eta_low, False, zeta=zeta)
  sr = _spread_chain(sigma, k, m, eta_up, theta, cache, zeta)   # both directions' upper law
  sl = _plus_constant(_sum_law(cache[("base", False, zeta)], m, cache, zeta), float(k - m))
  q_r = q_a = sr.p * (1 + sr.rho)
  # the dropped tails (their P-mass dm/k for remove, Q-mass dq for add) at +inf;
  # the round-off of the splits is a position error within tau (module docstring)
  inf_remove = (sr.dm / k) * (1 + 1e-9)
  inf_add = sr.dq * (1 + 1e-9)
  tau = _TAU * (sr.ops + sl.ops + 4) * (1 + abs(log_k)) + max(sr.bad, sl.bad)
  q_r = q_r * math.exp(tau) * (1 + 4 * _U)    # e^{±α} per epoch on the P-masses (docstring)
  q_low = sl.p / (1 + sl.rho) * math.exp(-tau) * (1 - 4 * _U)
  shift = math.floor(log_k / eta_up)       # L = (lo + t − shift)·η
  return EpochPairs(sr.lo - shift, q_r, inf_remove, inf_add, q_low, sl.pos - log_k, log_k,
                    eta_up, tau, sr.lo - shift, q_a)
