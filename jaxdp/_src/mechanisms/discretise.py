"""Certified discretisation of one-step pairs: :func:`discretize` and its machinery.

Re-exported by :mod:`jaxdp.pairs`, whose module docstring states the method.
Here: :class:`LossPMF` (what :func:`discretize` returns); the cells of the fine
grid with certified P- and Q-mass bounds (bisection of loss levels,
:mod:`jaxdp._src.mechanisms.loss_levels`, and log-CDF differences); the pessimistic "connect the dots"
spread (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi, PETS 2022) and the
optimistic merge-and-borrow pass onto the grid e_k = k·h; and the choice of
the optimistic grid's offset.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxdp._src.mechanisms.loss_levels import _bisect_x, last_true_point
from jaxdp._src.mechanisms.pair_types import DiscretePair, MixturePair, MonotonePair, SymmetrizedPair, _split


_EPS = float(np.finfo(np.float64).eps)
_CDF_ULPS = 16          # assumed accuracy of a log-CDF: ulps × (1 + |log F|)
_SUBDIV_NO_Q = 8        # finer cells when Q's CDFs are not given
_MAX_CELLS = 2 ** 22    # largest one-step fine grid (memory: ~10 arrays of this size)


class LossPMF(NamedTuple):
  """Discretised loss law: mass ``p[i]`` at loss offset + (lo + i)·h, ``inf`` at +inf."""
  lo: int
  p: np.ndarray
  inf: float
  tau: float
  offset: float = 0.0


# --------------------------------------------------------------------------
# cells: (fine index j, mass bounds, u-moment bounds); content losses in (g_{j-1}, g_j]
# --------------------------------------------------------------------------


class _Cells(NamedTuple):
  """Cells of one pass ("p" pessimistic or "o" optimistic): content losses of
  cell i in (g_{j_i - 1}, g_{j_i}], P-mass in [m_lo, m_hi], Q-mass in [u_lo, u_hi]."""
  j: np.ndarray
  m_lo: np.ndarray
  m_hi: np.ndarray
  u_lo: np.ndarray
  u_hi: np.ndarray
  inf_lo: float    # true +inf mass (kept by the optimistic pass)
  inf_hi: float    # +inf mass, pessimistic (incl. truncated tails)
  tau: float


def _cdf_mass(lf, ls):
  """Interval masses between consecutive edges from log CDF / log SF, with an
  absolute error bound (``_CDF_ULPS`` ulps of ``1 + |log|``, times the values)."""
  f, s = np.exp(lf), np.exp(ls)
  with np.errstate(invalid="ignore"):
    ef = np.where(f > 0, _CDF_ULPS * _EPS * (1.0 + np.abs(lf)) * f, 0.0)
    es = np.where(s > 0, _CDF_ULPS * _EPS * (1.0 + np.abs(ls)) * s, 0.0)
  low = lf[1:] <= math.log(0.5)        # both edges in the lower half: use F
  high = ls[:-1] <= math.log(0.5)      # both edges in the upper half: use S
  with np.errstate(invalid="ignore", over="ignore"):
    via_f = f[1:] * -np.expm1(np.minimum(lf[:-1] - lf[1:], 0.0))
    via_s = s[:-1] * -np.expm1(np.minimum(ls[1:] - ls[:-1], 0.0))
  mid = 1.0 - f[:-1] - s[1:]
  m = np.where(low, via_f, np.where(high, via_s, mid))
  err = np.where(low, ef[1:] + ef[:-1], np.where(high, es[1:] + es[:-1], ef[:-1] + es[1:] + _EPS))
  err = err + 4 * _EPS * np.abs(m)
  m = np.nan_to_num(np.maximum(m, 0.0))
  return np.maximum(m - err, 0.0), m + err


def _monotone_cells(pair, hf, zeta, off, side):
  f = lambda x: np.asarray(pair.loss(np.asarray(x, np.float64)), np.float64)
  x_lo, x_hi = float(pair.x_lo), float(pair.x_hi)
  lz = math.log(zeta)
  xa = last_true_point(lambda x: np.asarray(pair.log_p_cdf(x)) <= lz, x_lo, x_hi)
  xb = x_hi - last_true_point(lambda t: np.asarray(pair.log_p_sf(x_hi - t)) <= lz, 0.0, x_hi - xa)
  la, lb = (float(v) for v in f(np.array([xa, xb])))
  ja, jb = math.floor((la - off) / hf), math.ceil((lb - off) / hf)
  if jb - ja > _MAX_CELLS:
    raise _GridTooLarge(jb - ja, _MAX_CELLS)
  g = off + np.arange(ja, jb + 1) * hf
  e_lo, e_hi = _bisect_x(f, g, xa, xb, inverse=pair.loss_inverse)
  # Pessimistic cells (lo_{j-1}, lo_j] (l(lo) <= g: content <= g_j); optimistic
  # (hi_{j-1}, hi_j] (l(hi) > g: content > g_{j-1}).
  edges = e_lo if side == "p" else e_hi
  lpf, lps = np.asarray(pair.log_p_cdf(edges)), np.asarray(pair.log_p_sf(edges))
  m_lo, m_hi = _cdf_mass(lpf, lps)
  if pair.log_q_cdf is not None:
    u_lo, u_hi = _cdf_mass(np.asarray(pair.log_q_cdf(edges)), np.asarray(pair.log_q_sf(edges)))
  else:
    u_lo, u_hi = m_lo * np.exp(-g[1:]), m_hi * np.exp(-g[:-1])
  j = np.arange(ja + 1, jb + 1)
  above_hi = math.exp(lps[-1]) * (1 + 1e-12)
  if side == "p":   # P-mass below xa rounds up to la; above xb goes to +inf
    below = math.exp(lpf[0]) * (1 + 1e-12)
    extra = ([math.ceil((la - off) / hf)], [0.0], [below], [below * math.exp(-la)], [below])
  else:             # below xa is dropped; above xb sits at lb
    above_lo = math.exp(lps[-1]) * (1 - 1e-12)
    extra = ([math.ceil((lb - off) / hf)], [above_lo], [0.0], [0.0], [above_lo * math.exp(-lb)])
  cat = lambda a, b: np.concatenate([a, np.asarray(b)])
  tau = pair.loss_tol if pair.loss_tol is not None else 64 * _EPS * (1 + max(abs(la), abs(lb)))
  return _Cells(cat(j, extra[0]).astype(np.int64), cat(m_lo, extra[1]), cat(m_hi, extra[2]),
                cat(u_lo, extra[3]), cat(u_hi, extra[4]), 0.0, above_hi, float(tau))


def _discrete_cells(pair, hf, off):
  p, q = np.asarray(pair.p, np.float64).ravel(), np.asarray(pair.q, np.float64).ravel()
  keep = p > 0
  p, q = p[keep], q[keep]
  fin = q > 0
  inf = float(p[~fin].sum())
  p, q = p[fin], q[fin]
  loss = np.log(p) - np.log(q)
  if loss.size and (np.ptp(loss) / hf > _MAX_CELLS):
    raise _GridTooLarge(np.ptp(loss) / hf, _MAX_CELLS)
  j = np.ceil((loss - off) / hf).astype(np.int64)
  u = p * np.exp(-loss)
  tau = 8 * _EPS * float(np.max(np.abs(np.log(p)) + np.abs(np.log(q)), initial=1.0))
  return _Cells(j, p, p, u, u, inf, inf + float(pair.p_inf), tau)


def _cells(pair, hf, zeta, off, side):
  if isinstance(pair, DiscretePair):
    return _discrete_cells(pair, hf, off)
  if isinstance(pair, MonotonePair):
    return _monotone_cells(pair, hf, zeta, off, side)
  if isinstance(pair, MixturePair):
    w = [float(x) for x in (pair.weights if side == "p" or pair.weights_lower is None
                            else pair.weights_lower)]
    parts = [_cells(_split(sub)[0 if side == "p" else 1], hf, zeta, off, side) for sub in pair.pairs]
    cat = lambda k: np.concatenate([getattr(c, k) * (wi if k != "j" else 1)
                                    for wi, c in zip(w, parts)])
    return _Cells(cat("j"), cat("m_lo"), cat("m_hi"), cat("u_lo"), cat("u_hi"),
                  sum(wi * c.inf_lo for wi, c in zip(w, parts)),
                  sum(wi * c.inf_hi for wi, c in zip(w, parts)), max(c.tau for c in parts))
  if isinstance(pair, SymmetrizedPair):
    assert off == 0.0, "a symmetrized pair lives on the grid through 0"
    c = _cells(pair.base, hf, zeta, 0.0, side)
    pos = c.j >= 1                                   # content losses > 0
    z = lambda a: a[pos]
    if side == "p":   # base cell (g_{j-1}, g_j] mirrors to [g_{-j}, g_{-j+1}): index 1 - j
      jm = 1 - z(c.j)
      m0 = max(1.0 - z(c.m_lo).sum() - z(c.u_lo).sum(), 0.0) * (1 + 1e-12)
    else:             # optimistic: index -j (content at or above the claimed range)
      jm = -z(c.j)
      m0 = max(1.0 - (z(c.m_hi).sum() + z(c.u_hi).sum() + 2 * c.inf_hi) * (1 + 1e-12), 0.0)
    cat = lambda *a: np.concatenate([np.asarray(x, np.float64) for x in a])
    return _Cells(np.concatenate([z(c.j), jm, [0]]).astype(np.int64),
                  cat(z(c.m_lo), z(c.u_lo), [m0]), cat(z(c.m_hi), z(c.u_hi), [m0]),
                  cat(z(c.u_lo), z(c.m_lo), [m0]), cat(z(c.u_hi), z(c.m_hi), [m0]),
                  c.inf_lo, c.inf_hi, c.tau)
  raise TypeError(f"unknown pair type {type(pair).__name__}.")


class _GridTooLarge(Exception):
  """A one-step grid would exceed the memory budget (the engine coarsens h or
  raises): ``args = (cells needed, cap)``; the general engine re-raises it
  as its ``TooLarge`` with the same arguments."""


# --------------------------------------------------------------------------
# aggregation onto the coarse grid
# --------------------------------------------------------------------------


def _bins(k, *values):
  if k.size == 0:
    return 0, [np.zeros(1) for _ in values]
  k0 = int(k.min())
  n = int(k.max()) - k0 + 1
  return k0, [np.bincount(k - k0, weights=v, minlength=n) for v in values]


def _pessimistic(c, h, s, off=0.0):
  k = -((-c.j) // (2 * s))                      # bucket (e_{k-1}, e_k]
  k0, (m, u) = _bins(k, c.m_hi, c.u_lo)
  e = off + (k0 + np.arange(m.size)) * h
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    rho = np.exp(np.log(u) - np.log(m) + e)     # U / (M e^{-e_k}), in [1, e^h]
  rho = np.clip(np.nan_to_num(rho, nan=1.0, posinf=math.exp(h)), 1.0, math.exp(h))
  em1 = math.expm1(h)
  alpha = m * (rho - 1.0) / em1 - m * 8 * _EPS * (2 + np.abs(e)) / em1
  alpha = np.clip(alpha, 0.0, m)
  out = np.zeros(m.size + 1)
  out[1:] += m - alpha
  out[:-1] += alpha
  return k0 - 1, out


def _optimistic(c, h, s, off=0.0):
  k = -((-(c.j - s)) // (2 * s))                # group (e_k - h/2, e_k + h/2]
  k0, (m, u) = _bins(k, c.m_lo, c.u_hi)
  e = off + (k0 + np.arange(m.size)) * h
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    r = np.log(m) - np.log(u) - e               # merged loss minus e_k
  r = np.clip(np.nan_to_num(r, nan=0.0), -h / 2, h / 2)
  down = (r >= 0) | (m <= 0)
  # Borrow from the merged atom of group k+1 (at e_{k+1} + r_{k+1} > e_k + h/2)
  # the mass a that makes the merged loss >= e_k; over-borrowing is harmless.
  r_next = np.append(r[1:], 0.0)
  m_next = np.append(m[1:], 0.0)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    a = m * np.expm1(-r) / -np.expm1(-(h + r_next)) * (1 + 1e-9)
  a = np.where(down, 0.0, np.nan_to_num(a, nan=np.inf))
  feas = ~down & (a <= m_next)
  a = np.where(feas, a, 0.0)
  out = np.zeros(m.size + 2)                    # nodes k0-1 .. k0+size
  at = np.where(down | feas, 1, 0)              # offset within out: 1 = node k
  lent = np.append(0.0, a[:-1])                 # what group k lent to group k-1
  np.add.at(out, np.arange(m.size) + at, m - lent + a)
  # Groups above their node (r > 0), bottom-up: take from the atom already at
  # e_{k-1} the mass that brings the merged loss down to e_k (under-taking is
  # harmless: the rest is lowered to e_k); each node has one taker, so the
  # pass-1 node mass bounds what is available.
  own = np.where(down, m - lent, 0.0)
  b = own * -np.expm1(-r) / math.expm1(h) * (1 - 1e-9)
  b = np.where(down & (r > 0) & (b <= out[:-2]), b, 0.0)
  out[1:-1] += b
  out[:-2] -= b
  return k0 - 1, np.maximum(out, 0.0)


def discretize(pair, h, *, zeta=1e-30, offset=None, optimistic=True, align_heaviest=True):
  """Pessimistic and optimistic :class:`LossPMF` of ``pair`` on a grid of width h.

  The pessimistic grid is k·h. The optimistic grid is ``offset`` + k·h; by
  default (None) it is aligned so that a node sits just below the merged loss
  of the heaviest group (a pile-up against the top of the loss range, as in
  the add direction of a subsampled mechanism, cannot borrow from above and
  would otherwise lose a whole h), and 0 for pairs containing a
  :class:`SymmetrizedPair` (their negative losses mirror the grid).

  Args:
    pair: a pair of this module.
    h: grid interval > 0.
    zeta: P-mass per tail of a :class:`MonotonePair` left to the tail rules.
    offset: optimistic grid offset in [0, h), or None (automatic).
    optimistic: False skips the optimistic PMF (returned as None).
    align_heaviest: with ``offset=None``, also try the offset that aligns the
      heaviest group (a root search, ~10 ms); False tries the top loss of a
      monotone pair instead (where a pile-up sits, e.g. 1/b of Laplace).

  Returns:
    ``(pessimistic, optimistic)``; ``pessimistic.inf`` includes truncated
    tails and ``p_inf``, ``optimistic.inf`` only mass at a true +inf loss.
  """
  s = 1 if _has_q(pair) else _SUBDIV_NO_Q
  hf = h / (2 * s)
  c = _cells(pair, hf, zeta, 0.0, "p")
  pk, pp = _pessimistic(c, h, s)
  pess = LossPMF(pk, pp, c.inf_hi, c.tau)
  if not optimistic:
    return pess, None
  if offset is None and not _has_symmetrized(pair):
    offset = _choose_offset(pair, c, h, s, align_heaviest)
  offset = 0.0 if offset is None else float(offset)
  c = _cells(pair, hf, zeta, offset, "o")
  ok, op = _optimistic(c, h, s, offset)
  return pess, LossPMF(ok, op, c.inf_lo, c.tau, offset)


def _merged(pair, a, b):
  """(P-mass, Q-mass) arrays of the outcomes with loss in (a_i, b_i] (None if unknown)."""
  a, b = np.atleast_1d(np.asarray(a, np.float64)), np.atleast_1d(np.asarray(b, np.float64))
  if isinstance(pair, DiscretePair):
    p, q = np.asarray(pair.p, np.float64).ravel(), np.asarray(pair.q, np.float64).ravel()
    ok = (p > 0) & (q > 0)
    p, q = p[ok], q[ok]
    loss = np.log(p) - np.log(q)
    sel = (loss > a[:, None]) & (loss <= b[:, None])
    return (sel * p).sum(1), (sel * q).sum(1)
  if isinstance(pair, MonotonePair):
    if pair.log_q_cdf is None:
      return None
    f = lambda x: np.asarray(pair.loss(np.asarray(x, np.float64)), np.float64)
    x, _ = _bisect_x(f, np.concatenate([a, b]), pair.x_lo, pair.x_hi, inverse=pair.loss_inverse)
    fp, fq = np.exp(pair.log_p_cdf(x)), np.exp(pair.log_q_cdf(x))
    n = a.size
    return fp[n:] - fp[:n], fq[n:] - fq[:n]
  if isinstance(pair, MixturePair):
    w = pair.weights if pair.weights_lower is None else pair.weights_lower
    tot_p, tot_q = 0.0, 0.0
    for wi, sub in zip(w, pair.pairs):
      r = _merged(_split(sub)[1], a, b)
      if r is None:
        return None
      tot_p, tot_q = tot_p + wi * r[0], tot_q + wi * r[1]
    return tot_p, tot_q
  return None


def _align(pair, centre, h, merged):
  """A node e just below the merged loss ℓ̄(e) of its group (e - h/2, e + h/2]:
  the root of ℓ̄(e) - e near the heaviest group, by a scan of 33 nodes across
  [ℓ̄ - h, ℓ̄ + h] and bisection (vectorised; one bracket search per step)."""
  margin = 1e-3 * h      # >> the mass bounds' effect on merged losses
  es = merged + np.linspace(-h, h, 33)

  def gap(e):
    r = _merged(pair, e - h / 2, e + h / 2)
    if r is None:
      return None
    with np.errstate(divide="ignore", invalid="ignore"):
      g = np.log(r[0]) - np.log(r[1]) - e
    return np.where((r[0] > 0) & (r[1] > 0), g, np.nan)

  g = gap(es)
  if g is None or not np.any(g >= margin):
    return centre if merged < centre else merged - margin
  ok = np.flatnonzero(g >= margin)
  i = ok[np.argmin(g[ok])]                       # smallest non-negative gap
  if i + 1 < es.size and np.isfinite(g[i + 1]) and g[i + 1] < margin:
    lo, hi = es[i], es[i + 1]                    # gap(lo) >= margin > gap(hi)
    for _ in range(10):
      mid = 0.5 * (lo + hi)
      gm = gap(np.array([mid]))[0]
      lo, hi = (mid, hi) if gm >= margin else (lo, mid)
    return float(lo)
  return float(es[i])


def top_loss(pair):
  """The largest finite privacy loss of a pair (loss(x_hi) for a monotone one)."""
  if isinstance(pair, DiscretePair):
    p, q = np.asarray(pair.p, np.float64).ravel(), np.asarray(pair.q, np.float64).ravel()
    ok = (p > 0) & (q > 0)
    return float(np.max(np.log(p[ok]) - np.log(q[ok]))) if ok.any() else math.inf
  if isinstance(pair, MonotonePair):
    return float(np.asarray(pair.loss(np.array([float(pair.x_hi)]))).ravel()[0])
  if isinstance(pair, SymmetrizedPair):
    return top_loss(pair.base)
  return max(top_loss(p) for sub in pair.pairs for p in _split(sub))


def _choose_offset(pair, c, h, s, align_heaviest=True):
  """Optimistic grid offset with the least rounding debt at the edges of the loss
  law (the lowest group cannot take from below, the highest cannot borrow from
  above: a pile-up there costs up to h per unit of mass), among 32 offsets and
  the one that aligns the heaviest group (:func:`_align`; or, without
  ``align_heaviest``, the one that puts a monotone pair's top loss on a node)."""
  k0, (m, u) = _bins(-((-(c.j - s)) // (2 * s)), c.m_hi, c.u_lo)   # a guess suffices
  i = int(np.argmax(m))
  if not (m[i] > 0 and u[i] > 0):
    return 0.0
  if align_heaviest:
    # log m - log u: the ratio itself overflows where u underflows (σ ≈ 0.026, δ = 1e-12)
    node = _align(pair, (k0 + i) * h, h, math.log(m[i]) - math.log(u[i]))
  elif isinstance(pair, MonotonePair):
    node = top_loss(pair)
    node = node if math.isfinite(node) else 0.0
  else:
    node = 0.0
  cands = np.append(np.arange(32) * h / 32, node - math.floor(node / h) * h)
  live = np.flatnonzero(m > 1e-9 * m.sum())
  lo_l, hi_l = (k0 + live[0]) * h, (k0 + live[-1]) * h
  steps = np.arange(-2, 3) * h                                       # 5 groups at each edge
  bot = (cands + np.round((lo_l - cands) / h) * h)[:, None] + steps
  top = (cands + np.round((hi_l - cands) / h) * h)[:, None] + steps
  e = np.concatenate([bot, top], axis=1)                             # (n_cands, 10)
  r = _merged(pair, (e - h / 2).ravel(), (e + h / 2).ravel())
  if r is None:
    return float(cands[-1])
  mm, uu = (x.reshape(e.shape) for x in r)
  with np.errstate(divide="ignore", invalid="ignore"):
    gap = np.clip(np.log(mm) - np.log(uu) - e, -h / 2, h / 2)
  # Each group borrows from the one above (r < 0) or takes from the one below
  # (r >= 0); beyond the edge there is nothing, towards the interior plenty.
  inner = np.full((cands.size, 1), np.inf)
  none = np.zeros((cands.size, 1))
  above = np.concatenate([mm[:, 1:5], inner, mm[:, 6:], none], axis=1)
  below = np.concatenate([none, mm[:, :4], inner, mm[:, 5:9]], axis=1)
  with np.errstate(invalid="ignore"):
    need_up = mm * np.expm1(-gap) / -math.expm1(-h)
    need_dn = mm * -np.expm1(-gap) / math.expm1(h)
    debt = np.where(gap < 0, np.where(need_up <= above, 0.0, mm * (h + gap)),
                    np.where(need_dn <= below, 0.0, mm * gap))
  debt = np.nan_to_num(debt).sum(axis=1)
  return float(cands[int(np.argmin(debt))])


def _has_symmetrized(pair):
  if isinstance(pair, SymmetrizedPair):
    return True
  if isinstance(pair, MixturePair):
    return any(_has_symmetrized(p) for sub in pair.pairs for p in _split(sub))
  return False


def _has_q(pair):
  if isinstance(pair, MonotonePair):
    return pair.log_q_cdf is not None and pair.log_q_sf is not None
  if isinstance(pair, SymmetrizedPair):
    return _has_q(pair.base)
  if isinstance(pair, MixturePair):
    return all(_has_q(p) for sub in pair.pairs for p in _split(sub))
  return True
