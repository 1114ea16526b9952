"""Certified one-epoch privacy-loss laws of random allocation (balls-in-bins).

One epoch of balls-in-bins with k steps allocates the differing example to one
step chosen uniformly at random; each step is the Gaussian mechanism with noise
σ (sensitivity 1, add/remove). Its dominating pair (Chua et al., "Balls-and-bins
sampling for DP-SGD", AISTATS 2025; Feldman & Shenfeld 2026) is
P = (1/k)·Σ_i N(e_i, σ²I_k) against Q = N(0, σ²I_k), with privacy loss

    L(x) = log((1/k)·Σ_i W_i),     W_i = exp((2x_i − 1)/(2σ²)).

Under Q the log W_i are i.i.d. N(−1/(2σ²), 1/σ²); under P one of them (say the
first) is replaced by log W'_1 ~ N(+1/(2σ²), 1/σ²). A partial epoch of m < k
steps is the m-coordinate marginal: P = (1/k)·Σ_{i≤m} N(e_i, σ²I_m) + (1 − m/k)·Q,
L = log(1 − m/k + (1/k)·Σ_{i≤m} W_i), so under P the law of L is the mixture
(1 − m/k)·[law of L under Q] + (m/k)·[law with one shifted term].

Remove direction: pair (P, Q), δ(ε) = E_P[(1 − e^{ε−L})_+]. Add direction: pair
(Q, P), whose loss is −L under Q. δ of a composition of independent epochs is
E[(1 − e^{ε − Σ_t ℓ_t})_+] over the laws ``under the first distribution'' of
the per-epoch losses ℓ_t; it is non-decreasing in every ℓ_t and in every mass.
Hence (stochastic dominance, by coupling) a law whose loss is pointwise
rounded up and whose masses are inflated gives an upper bound on every
composed δ, and rounded down / deflated masses / dropped mass a lower bound.

Computing the law (all on the grid ℓ = j·η, one law per rounding "mode"):
  * ``up`` mode: every value rounded up (ceil), truncated upper tails at +∞,
    truncated lower tails moved up to the lowest kept atom;
  * ``down`` mode: every value rounded down (floor), truncated lower tails at
    −∞, truncated upper tails moved down to the highest kept atom.
  1. log W and log W' are Gaussian; each grid cell's mass (log-CDF differences)
     goes to its upper edge (up) or lower edge (down).
  2. The law of log(e^A + e^B) for independent A, B is built from the laws of A
     and B: for atoms a = iη, b = jη, log(e^a + e^b) = max(a, b) +
     log1p(e^{−|i−j|η}), so the rounded result is max(i, j) + H(|i−j|) with
     H(d) = ceil (up) / floor (down) of log1p(e^{−dη})/η, computed with a
     floating-point error margin so that the rounding is in the certified
     direction. The map is non-decreasing in both arguments, so rounded inputs
     give a result that is still rounded the same way (each level adds at most
     η). Repeated doubling gives the laws of log Σ_{i≤2^t} W_i; the binary digits
     of the number of terms are combined the same way.
  3. The law under P is built directly (no tilting): log(e^{log W'_1} + Σ_{i≥2} W_i)
     is one more combination, of the shifted term with the sum of m − 1 terms.
  4. Finally a ↦ log(e^a + k − m) − log k (non-decreasing), rounded once more.
The up law of L under P is the remove direction's upper law and the down law
its lower law; the add direction negates L under Q: its upper law is the down
law of L under Q (−∞ becomes a +∞ loss), its lower law the up law (+∞ becomes
a −∞ loss, dropped).

Masses: every operation sums non-negative terms (sliding-window sums by a
doubling table, never differences of cumulative sums), so the computed mass of
each atom is within a relative factor (1 + ρ) of the exact mass of the rounded
law; ρ is tracked and the upper laws are multiplied by (1 + ρ), the lower laws
divided by it. Log-CDF values are assumed accurate to 16 ulps of 1 + |log F|
(as in :mod:`jaxdp._src.mechanisms.discretise`).

The rounding error is systematic: at most (number of combinations + 2)·η per
epoch in the loss, so the certified width of ε after E epochs is about
E·(2·log₂k + 2)·η.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special as sps

__all__ = ["Law", "gaussian_law", "combine", "epoch_laws", "EpochLaws", "law_size"]

_U = float(np.finfo(np.float64).eps)
_CDF_ULPS = 16
ZETA = 1e-25           # mass cut from each tail at every truncation


class Law(NamedTuple):
  """Discrete law on the grid: mass ``p[t]`` at loss (lo + t)·eta.

  ``tail`` is the mass at +∞ (mode "up") or −∞ (mode "down"); the exact masses
  of the rounded law are within a factor (1 + rho)^{±1} of ``p`` and ``tail``.
  """
  lo: int
  p: np.ndarray
  tail: float
  eta: float
  mode: str
  rho: float

  @property
  def hi(self):
    return self.lo + self.p.size - 1


# --------------------------------------------------------------------------
# 1. a Gaussian on the grid
# --------------------------------------------------------------------------


def _cell_masses(edges, mu, s):
  """Masses of N(mu, s²) between consecutive ``edges`` and their largest
  relative error (log-CDF differences taken on the smaller tail's side)."""
  z = (edges - mu) / s
  lf, ls = sps.log_ndtr(z), sps.log_ndtr(-z)
  f, sf = np.exp(lf), np.exp(ls)
  lower = z[1:] <= 0.0
  upper = z[:-1] >= 0.0
  with np.errstate(invalid="ignore", over="ignore"):
    via_f = f[1:] * -np.expm1(np.minimum(lf[:-1] - lf[1:], 0.0))
    via_s = sf[:-1] * -np.expm1(np.minimum(ls[1:] - ls[:-1], 0.0))
  mid = 1.0 - f[:-1] - sf[1:]
  m = np.where(lower, via_f, np.where(upper, via_s, mid))
  ef = _CDF_ULPS * _U * (1.0 + np.abs(lf)) * f
  es = _CDF_ULPS * _U * (1.0 + np.abs(ls)) * sf
  err = np.where(lower, ef[1:] + ef[:-1], np.where(upper, es[1:] + es[:-1], ef[:-1] + es[1:] + 2 * _U))
  m = np.maximum(np.nan_to_num(m), 0.0)
  pos = m > 0
  rel = float(np.max(err[pos] / m[pos], initial=0.0)) + 8 * _U
  return m, rel


def gaussian_law(mu, s, eta, mode, zeta=ZETA):
  """The law of X ~ N(mu, s²) rounded up (``mode="up"``) or down to the grid j·η.

  Cells ((j−1)η, jη] go to j (up) or [jη, (j+1)η) to j (down); the mass beyond
  mu ± z·s (each side <= ``zeta``) goes to the tail (±∞) on the side that the
  mode allows and to the extreme kept atom on the other side.

  Args:
    mu, s: mean and standard deviation (s > 0).
    eta: grid step.
    mode: "up" or "down".
    zeta: mass cut from each side.

  Returns:
    :class:`Law`.
  """
  zc = -sps.ndtri(zeta) + 0.5
  j0 = math.floor((mu - zc * s) / eta)
  j1 = math.ceil((mu + zc * s) / eta)
  edges = np.arange(j0, j1 + 1) * eta
  m, rel = _cell_masses(edges, mu, s)
  below = math.exp(float(sps.log_ndtr((edges[0] - mu) / s)))
  above = math.exp(float(sps.log_ndtr((mu - edges[-1]) / s)))
  rel += 1e-12    # the two tail masses (log-CDF accurate to ~1e-13 relative there)
  if mode == "up":   # cell (e_{t}, e_{t+1}] -> index j0 + t + 1
    m[0] += below
    return Law(j0 + 1, m, above, eta, mode, rel)
  m[-1] += above
  return Law(j0, m, below, eta, mode, rel)


# --------------------------------------------------------------------------
# 2. log(e^A + e^B)
# --------------------------------------------------------------------------


def _h_table(dmax, eta, mode):
  """H(d) for d = 0..dmax: log1p(e^{−dη})/η rounded up (up) or down (down),
  with a margin for the floating-point error of its evaluation."""
  d = np.arange(dmax + 1, dtype=np.float64)
  t = np.log1p(np.exp(-d * eta)) / eta
  err = 16 * _U * (t + 1.0)
  if mode == "up":
    return np.ceil(t + err).astype(np.int64)
  return np.maximum(np.floor(t - err), 0).astype(np.int64)


def _window_sums(p, length_max):
  """Doubling table T[k][s] = Σ_{t=s}^{s+2^k−1} p[t] (zero beyond), k <= log2(length_max)."""
  tables = [p]
  k = 0
  while (1 << (k + 1)) <= length_max:
    prev = tables[-1]
    nxt = prev.copy()
    step = 1 << k
    nxt[:-step] += prev[step:]
    tables.append(nxt)
    k += 1
  return tables


def _window(tables, start, length, n_out):
  """Σ_{t=s}^{s+length−1} p[t] for s = start .. start + n_out − 1 (zero outside p)."""
  n = tables[0].size
  out = np.zeros(n_out)
  pos = start
  k = 0
  rem = length
  while rem:
    if rem & 1:
      a, b = max(pos, 0), min(pos + n_out, n)    # valid table positions
      if a < b:
        out[a - pos:b - pos] += tables[k][a:b]
      pos += 1 << k
    rem >>= 1
    k += 1
  return out


def _half(out, out_lo, pa, lo_a, pb, lo_b, hval, d_from):
  """Adds, for pairs with j − i = d >= d_from (j: B's index, i: A's), the mass
  pb[j]·pa[i] at j + H(d); ``hval`` is H on 0..dmax, grouped by value."""
  if not pa.size or not pb.size:
    return
  dmax = hval.size - 1
  change = np.flatnonzero(np.diff(hval)) + 1
  starts = np.concatenate([[0], change])
  ends = np.concatenate([change - 1, [dmax]])
  lmax = max(1, int(np.max(ends - starts + 1)))
  # zeros on the left: a window piece that starts before pa still sums its part
  pa = np.concatenate([np.zeros(lmax), pa])
  lo_a -= lmax
  tables = _window_sums(pa, lmax)
  for d0, d1 in zip(starts, ends):
    d0 = max(int(d0), d_from)
    d1 = int(d1)
    if d1 < d0:
      continue
    # window of A's absolute indices [j − d1, j − d0] for every j of B
    w = _window(tables, (lo_b - d1) - lo_a, d1 - d0 + 1, pb.size)
    nz = np.flatnonzero(w)
    if not nz.size:
      continue
    a, b = nz[0], nz[-1] + 1
    c0 = lo_b + a + int(hval[d0]) - out_lo
    out[c0:c0 + (b - a)] += pb[a:b] * w[a:b]


def combine(la, lb, zeta=ZETA):
  """Law of log(e^A + e^B) for independent A ~ ``la``, B ~ ``lb`` (same mode and η).

  Each outcome is rounded in the law's mode (up: ceil, down: floor), see the
  module docstring; the tails combine exactly (+∞ absorbs, −∞ is neutral).

  Args:
    la, lb: :class:`Law` of one mode and one η.
    zeta: tail mass cut after the combination (each side).

  Returns:
    :class:`Law`.
  """
  if la.mode != lb.mode or la.eta != lb.eta:
    raise ValueError("combine: laws of different modes or grids")
  eta, mode = la.eta, la.mode
  dmax = max(la.hi - lb.lo, lb.hi - la.lo, 0)
  hval = _h_table(dmax, eta, mode)
  # (down mode: −∞ passes the other law through at its own indices)
  out_lo = min(la.lo, lb.lo) + (int(hval.min()) if mode == "up" else 0)
  out_hi = max(la.hi, lb.hi) + int(hval[0])
  out = np.zeros(out_hi - out_lo + 1)
  _half(out, out_lo, la.p, la.lo, lb.p, lb.lo, hval, 0)    # B >= A
  _half(out, out_lo, lb.p, lb.lo, la.p, la.lo, hval, 1)    # A > B
  ma, mb = float(np.sum(la.p)), float(np.sum(lb.p))
  if mode == "up":   # +∞ absorbs everything
    tail = la.tail * (mb + lb.tail) + ma * lb.tail
  else:              # −∞ is neutral: log(e^{−∞} + e^b) = b
    tail = la.tail * lb.tail
    _add_at(out, out_lo, lb, la.tail)
    _add_at(out, out_lo, la, lb.tail)
  ngroups = int(np.count_nonzero(np.diff(hval))) + 1
  n_add = 2 * ngroups + 4 + 2 * max(la.p.size, lb.p.size).bit_length()
  rho = (1 + la.rho) * (1 + lb.rho) * (1 + 1.01 * n_add * _U) - 1
  return truncate(Law(out_lo, out, tail, eta, mode, rho), zeta)


def _add_at(out, out_lo, law, weight):
  if weight > 0:
    out[law.lo - out_lo:law.hi - out_lo + 1] += weight * law.p


def truncate(law, zeta=ZETA):
  """Cuts tails of mass <= ``zeta`` each: toward the tail (±∞) on the mode's
  side, onto the extreme kept atom on the other (a move in the mode's direction)."""
  p = law.p
  cs = np.cumsum(p)
  rs = np.cumsum(p[::-1])
  i0 = int(np.searchsorted(cs, zeta, side="right"))      # p[:i0] sums to <= zeta
  i1 = p.size - int(np.searchsorted(rs, zeta, side="right"))  # p[i1:] sums to <= zeta
  i0 = min(i0, p.size - 1)
  i1 = max(i1, i0 + 1)
  low, high = math.fsum(p[:i0].tolist()), math.fsum(p[i1:].tolist())
  kept = p[i0:i1].copy()
  tail = law.tail
  if law.mode == "up":
    kept[0] += low
    tail += high
  else:
    kept[-1] += high
    tail += low
  return Law(law.lo + i0, kept, tail, law.eta, law.mode, law.rho * (1 + 4 * _U) + 4 * _U)


# --------------------------------------------------------------------------
# 3.-4. sums of many terms, the epoch laws
# --------------------------------------------------------------------------


def _powers(base, top_bit):
  """Laws of log Σ_{i≤2^t} W_i for t = 0..top_bit, by doubling."""
  out = [base]
  for _ in range(top_bit):
    out.append(combine(out[-1], out[-1]))
  return out


def _sum_law(powers, count):
  """Law of the log of a sum of ``count`` >= 1 i.i.d. terms from the powers of two."""
  res = None
  for t in range(count.bit_length()):
    if (count >> t) & 1:
      res = powers[t] if res is None else combine(res, powers[t])
  return res


def _finish(law, k, m):
  """a ↦ log(e^a + k − m) − log k on every atom, rounded in the law's mode.

  The lower tail −∞ (mode down) maps to log((k − m)/k) (−∞ when m = k)."""
  eta, up = law.eta, law.mode == "up"
  c = float(k - m)
  j = law.lo + np.arange(law.p.size)
  a = j * eta
  # g = log(1 + c·e^{−a}) − log k, so the value is a + g and its index j + g/η
  g = (np.logaddexp(0.0, math.log(c) - a) if c > 0 else np.zeros(a.shape)) - math.log(k)
  err = 16 * _U * (np.abs(g) + np.abs(a) + math.log(k) + 1.0) / eta
  gi = g / eta
  step = np.ceil(gi + err) if up else np.floor(gi - err)
  idx = j + step.astype(np.int64)
  tail = law.tail
  extra = []
  if not up and c > 0 and tail > 0:   # −∞ ↦ log(c/k), rounded down
    v = math.log(c / k) / eta
    extra = [math.floor(v - 16 * _U * (1 + abs(v)))]
  lo = int(min(idx.min(), *extra)) if extra else int(idx.min())
  hi = int(max(idx.max(), *extra)) if extra else int(idx.max())
  p = np.bincount(idx - lo, weights=law.p, minlength=hi - lo + 1)
  if extra:
    p[extra[0] - lo] += tail
    tail = 0.0
  rho = (1 + law.rho) * (1 + 1.01 * (law.p.size + 2) * _U) - 1
  return Law(lo, p, tail, eta, law.mode, rho)


def _mixture(la, wa, lb, wb):
  """wa·la + wb·lb (same mode and grid); weights exact up to the returned rho."""
  lo = min(la.lo, lb.lo)
  hi = max(la.hi, lb.hi)
  p = np.zeros(hi - lo + 1)
  p[la.lo - lo:la.hi - lo + 1] += wa * la.p
  p[lb.lo - lo:lb.hi - lo + 1] += wb * lb.p
  rho = max(la.rho, lb.rho) * (1 + 4 * _U) + 8 * _U
  return Law(lo, p, wa * la.tail + wb * lb.tail, la.eta, la.mode, rho)


class EpochLaws(NamedTuple):
  """Certified laws of one (possibly partial) epoch, each a :class:`Law` of the
  loss in the direction named (the loss under the pair's first distribution).

  ``remove_up``/``add_up``: losses rounded up, masses inflated, tail at +∞
  (upper bounds on every composed δ). ``remove_low``/``add_low``: losses
  rounded down, masses deflated, −∞ mass dropped (lower bounds)."""
  remove_up: Law
  remove_low: Law
  add_up: Law
  add_low: Law


def _scaled(law, factor):
  return law._replace(p=law.p * factor, tail=law.tail * factor, rho=0.0)


def _negate(law):
  """The law of −X: mass of X at j·η goes to −j·η (the tail flips side)."""
  return Law(-law.hi, law.p[::-1].copy(), law.tail, law.eta,
             "down" if law.mode == "up" else "up", law.rho)


def _mode_laws(sigma, k, m, eta, mode, cache):
  """(law of L under P, law of L under Q) of an m-step epoch, one mode."""
  s = 1.0 / sigma
  mu = 0.5 / (sigma * sigma)
  key = (sigma, eta, mode, m.bit_length())
  if key not in cache:
    cache[key] = _powers(gaussian_law(-mu, s, eta, mode), m.bit_length() - 1)
  powers = cache[key]
  shifted = gaussian_law(mu, s, eta, mode)
  q_sum = _sum_law(powers, m)
  p_sum = shifted if m == 1 else combine(shifted, _sum_law(powers, m - 1))
  q_law = _finish(q_sum, k, m)
  p_one = _finish(p_sum, k, m)
  if m == k:
    p_law = p_one
  else:
    wa, wb = (k - m) / k, m / k     # each exact up to one rounding
    if mode == "up":
      wa, wb = wa * (1 + 4 * _U), wb * (1 + 4 * _U)
    else:
      wa, wb = wa * (1 - 4 * _U), wb * (1 - 4 * _U)
    p_law = _mixture(q_law, wa, p_one, wb)
  return p_law, q_law


def law_size(sigma, k, eta, zeta=ZETA):
  """Estimated number of atoms of the largest law (for the memory check): the
  widest Gaussian range (±z/σ, and the P-side's shift 1/σ²) plus log k, over η."""
  zc = -sps.ndtri(zeta) + 1.0
  return int((2 * zc / sigma + 1.0 / sigma ** 2 + math.log(max(k, 1)) + 2.0) / eta) + 8


def epoch_laws(sigma, k, m, eta, cache=None):
  """Certified laws of one epoch of random allocation restricted to its first m steps.

  Args:
    sigma: noise multiplier σ > 0.
    k: steps per epoch (the sampler's), k >= 1.
    m: steps of this epoch, 1 <= m <= k (m = k: a whole epoch).
    eta: grid step of the loss.
    cache: optional dict shared between calls with the same σ, η (powers of two).

  Returns:
    :class:`EpochLaws` (the module docstring proves their directions).
  """
  if not (1 <= m <= k):
    raise ValueError(f"m must be in [1, k={k}]; found {m}.")
  cache = {} if cache is None else cache
  p_up, q_up = _mode_laws(sigma, k, m, eta, "up", cache)
  p_dn, q_dn = _mode_laws(sigma, k, m, eta, "down", cache)
  remove_up = _scaled(p_up, 1 + p_up.rho)
  remove_low = _scaled(p_dn, 1 / (1 + p_dn.rho))._replace(tail=0.0)
  add_up = _negate(_scaled(q_dn, 1 + q_dn.rho))
  add_low = _negate(_scaled(q_up, 1 / (1 + q_up.rho)))._replace(tail=0.0)
  return EpochLaws(remove_up, remove_low, add_up, add_low)


def delta_of_law(law, epsilon):
  """δ(ε) = Σ_j p_j (1 − e^{ε − jη})_+ + tail (tail counted only for mode up:
  a +∞ loss), a plain read-out of one law (tests and one-epoch answers)."""
  eps = np.asarray(epsilon, np.float64)
  ell = (law.lo + np.arange(law.p.size)) * law.eta
  d = np.where(ell[None, :] > eps.reshape(-1, 1),
               law.p[None, :] * -np.expm1(np.minimum(eps.reshape(-1, 1) - ell[None, :], 0.0)), 0.0)
  out = d.sum(1) + (law.tail if law.mode == "up" else 0.0)
  return out.reshape(eps.shape)
