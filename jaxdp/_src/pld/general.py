"""General PLD engine: heterogeneous composition of dominating pairs, certified bounds.

``phases`` is a sequence of ``(Mechanism, count)`` (:mod:`jaxdp.pairs`). Add/remove
neighbours keep one direction for every step, so all ``remove`` pairs are
composed together and all ``add`` pairs together, and the answer is the worse of
the two (one direction only when every mechanism has ``remove is add``). The
hockey-stick divergence of a composition is read off the composed privacy-loss
distribution (PLD) ω of the pair (Zhu, Dong & Wang, AISTATS 2022, Thm 10;
Koskela, Jälkö & Honkela 2020 for the FFT):

    δ(ε) = Σ_{ℓ > ε} ω(ℓ) (1 - e^{ε-ℓ}) + ω(+∞).

Bounds. Each pair is discretised on the grid ℓ = k·h twice (:func:`jaxdp.pairs.discretize`):
a pessimistic PMF whose composed δ is >= the true δ for every ε and an optimistic one
whose composed δ is <= it. Both stay bounds through composition because δ_T is
monotone in every mass and, per coordinate, convex and non-increasing in u = e^{-ℓ}.
The returned upper bound uses the pessimistic side, ``return_bounds=True`` also
returns the optimistic one. Losses are assumed accurate to the pairs' ``tau``; the
composed loss is shifted by Σ count·tau in the safe direction.

Composition. Each phase's ``count``-fold power by repeated squaring (about
2·log2(count) linear convolutions by real FFT in float64), then the phases are
convolved together. After every convolution the result is cut to a window from
Chernoff bounds, P(S > a) <= E[e^{λS}] e^{-λa} (and the lower tail alike), with
the log-MGF of the partial product (Σ count·log M_j(λ) over the phases it
contains, each one-step M_j bounded from a 4096-block summary of the
pessimistic PMF): the pessimistic side drops both cut tails and books their
certified mass κ each at +∞ (a dropped unit of mass adds at most one unit to
any later δ); the optimistic side drops both (dropping mass only lowers δ).
κ = ``_KAPPA`` (or 1e-6·min δ when smaller) divided by the number of cuts.

Round-off. The PMFs are exponentially tilted, w_ℓ e^{λℓ} scaled to max 1, with
the λ >= 0 of the Chernoff bound at the query (tilting commutes with
convolution). Negative FFT outputs are clipped to 0 (that only moves entries
toward the exact non-negative values). Each convolution of a, b by FFTs of
length n adds an L1 error (in tilted units) of at most
2√n [L η (‖a‖₂‖b‖₁ + ‖a‖₁‖b‖₂ + ‖a*b‖₂) + 3u ‖a‖₁‖b‖₂], L = log₂ n, η = 4u
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., Thm 24.2,
with the unnormalised DFT's ‖Fx‖₂ = √n‖x‖₂); errors of the inputs propagate
with the other factor's mass. A tilted L1 error E is worth at most
E·e^{logc - λε} of δ at ε (only losses above ε count): relative to δ near the
query, which the pessimistic δ adds and the optimistic δ subtracts. Suffix
sums carry a relative (n + 4)·2u margin.

ε from δ: the smallest ε >= 0 with δ_upper(ε) <= δ, solved exactly on each grid
interval from discounted suffix sums D_i = Σ_{m>=i} ω_m e^{-(ℓ_m - ℓ_i)} (no
e^{+ℓ}, no overflow; the allowance taken at the interval's left end); +∞ where
the +∞ mass and the allowance alone reach δ. The lower bound is the last ε
whose optimistic δ still exceeds the target.

Grid interval (``value_discretization_interval=None``). Both discretisations are
second order: a bucket's split or merge changes the per-step loss variance by
O(h²), against the per-step variance v of the loss, so the relative error of ε is
about c·h²·T/V with V = Σ count·v (the composed variance). We take
h = sqrt(rtol·V / (2 Σ count)) (v measured on a trial discretisation), clipped to
[1e-7, 0.05]: the optimistic side needs half the interval of the pessimistic
one (a steep edge of the loss law, e.g. the add direction of a subsampled
mechanism near -log(1-q), has no mass above to borrow from). h is then shrunk
(at most 2x) so that the smallest top loss of the pairs (an atom or a pile-up:
ε0 of pure DP, 1/b of Laplace, -log(1-q) of the add direction of subsampling)
is a grid point. The measured upper - lower gap is below rtol·ε/2 on DP-SGD
configurations (q 1e-3..0.1, σ 0.5..5, T up to 1e5; tests/test_pld_general.py).
When a one-step grid would exceed 2^22 cells or the composed window 2^22
points, an automatic h is doubled (up to ``_H_AUTO_LIMIT`` = 1, beyond which
:class:`GridTooLarge`, a ``ValueError`` naming ``phases``, says that this
engine cannot answer: callers fall back to a certified bound); a user-given h
raises ``ValueError`` naming ``value_discretization_interval``.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
from scipy import special as sps

from jaxdp._src.kernels import guards as _guards
from jaxdp._src.core import numerics as nx
from jaxdp._src.mechanisms import discretise as _pairs_discretise
from jaxdp._src.mechanisms import pairs as _pairs

__all__ = ["epsilon", "delta", "grid_interval", "loss_variance", "GridTooLarge"]

_EPS = float(np.finfo(np.float64).eps)
_KAPPA = 1e-22           # total Chernoff-certified tail mass sent to +inf
_MAX_WINDOW = 2 ** 22    # largest composed window
_H_MIN, _H_MAX = 1e-7, 0.05
_LAMBDAS = np.geomspace(1e-4, 1e6, 160)


class _Dist(NamedTuple):
  lo: int               # loss index of p[0]
  p: np.ndarray         # tilted weights, max 1: w_i = p_i e^{logc - λ ℓ_i}
  logc: float
  err: float            # L1 round-off allowance, in the units of p
  cvec: np.ndarray      # composition counts per phase
  off: float = 0.0      # loss of index i is off + (lo + i)·h


def _validate(phases):
  try:
    items = list(phases)
  except TypeError:
    raise ValueError(f"phases must be a sequence of (Mechanism, count); found {phases!r}.") from None
  out = []
  for i, item in enumerate(items):
    if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], _pairs.Mechanism)):
      raise ValueError(f"phases[{i}] must be a (Mechanism, count) tuple; found {item!r}.")
    mech, count = item
    nx.check_array(f"phases[{i}] count", count, low=0.0, integer=True)
    _pairs.validate_pair(mech.remove, f"phases[{i}].remove")
    if mech.add is not mech.remove:
      _pairs.validate_pair(mech.add, f"phases[{i}].add")
    if int(count) > 0:
      out.append((mech, int(count)))
  return out


# --------------------------------------------------------------------------
# discretisation and grid choice
# --------------------------------------------------------------------------


class _TooLarge(Exception):
  pass


class GridTooLarge(ValueError):
  """The automatic grid cannot represent the composition within the memory
  budget, even at the coarsest interval (:data:`_H_AUTO_LIMIT`): this engine
  cannot answer the question (callers fall back to a certified RDP bound)."""


# Largest automatic grid interval, in loss units. The interval grows (doubling)
# while a grid exceeds the memory caps. Coarser grids would still be
# certified, but the inputs that need them (losses of 1e7-1e9: σ <= 1e-3)
# take this engine tens of seconds per doubling, where the batched kernel
# (jaxdp.pld) answers in about one; failing fast lets callers fall back.
_H_AUTO_LIMIT = 1.0


def _discretize(pair, h, zeta, cache, optimistic=True):
  key = (id(pair), h, optimistic)
  if key not in cache:
    try:
      cache[key] = (_pairs.discretize(pair, h, zeta=zeta, optimistic=optimistic), pair)
    except _pairs_discretise._GridTooLarge as e:  # pylint: disable=protected-access
      raise _TooLarge(str(e)) from None
  return cache[key][0]


def _moments(pmf, h):
  p = pmf.p
  m = p.sum()
  if m <= 0:
    return 0.0
  x = pmf.offset + (pmf.lo + np.arange(p.size)) * h
  mu = float((p * x).sum() / m)
  return float((p * (x - mu) ** 2).sum() / m)


def loss_variance(mech, cache=None):
  """One-step privacy-loss variance of a ``pairs.Mechanism`` (max over its
  directions), from pessimistic discretisations refined until h <= sd/4."""
  cache = {} if cache is None else cache
  v = 0.0
  for pair in {id(mech.remove): mech.remove, id(mech.add): mech.add}.values():
    hc, var = 1e-2, 1.0
    for _ in range(4):
      try:
        var = _moments(_discretize(pair, hc, 1e-30, cache, optimistic=False)[0], hc)
      except _TooLarge:
        break
      if var >= 16 * hc * hc or hc <= _H_MIN:
        break
      hc = max(math.sqrt(var) / 4, _H_MIN)
    v = max(v, var)
  return v


def grid_interval(phases, rtol=1e-3):
  """The automatic grid interval h for ``phases`` (see the module docstring)."""
  phases = _validate(phases)
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if not phases:
    return _H_MAX
  cache = {}
  total_v, total_c = 0.0, 0
  for mech, count in phases:
    total_v += count * loss_variance(mech, cache)
    total_c += count
  h = float(np.clip(math.sqrt(0.5 * rtol * total_v / total_c), _H_MIN, _H_MAX))
  # Put the smallest top loss (an atom or pile-up: ε0 of pure DP, 1/b of
  # Laplace, -log(1-q) in the add direction of subsampling) on the grid.
  tops = [t for mech, _ in phases for pair in (mech.remove, mech.add)
          for t in [_pairs_discretise.top_loss(pair)] if h <= t <= 100.0]
  if tops:
    top = min(tops)
    h = top / math.ceil(top / h * (1 - 1e-12))
  return h


# --------------------------------------------------------------------------
# composition
# --------------------------------------------------------------------------


class _Ctx:
  """Per-direction composition context: one-step log-MGFs, κ per cut, the tilt λ."""

  def __init__(self, pess, h, kappa_cut):
    self.h = h
    self.log_kappa = math.log(kappa_cut)
    self.kappa_cut = kappa_cut
    self.cut_mass = 0.0
    lm_pos, lm_neg, lo, hi = [], [], [], []
    for pmf in pess:
      p, n = pmf.p, pmf.p.size
      b = max(1, -(-n // 4096))
      nb = -(-n // b)
      pad = np.zeros(nb * b)
      pad[:n] = p
      mass = pad.reshape(nb, b).sum(1)
      top = (pmf.lo + np.minimum(np.arange(nb) * b + b - 1, n - 1)) * h
      bot = (pmf.lo + np.arange(nb) * b) * h
      with np.errstate(divide="ignore"):
        lmass = np.log(mass)
      lm_pos.append(sps.logsumexp(lmass + _LAMBDAS[:, None] * top, axis=1))
      lm_neg.append(sps.logsumexp(lmass - _LAMBDAS[:, None] * bot, axis=1))
      lo.append(pmf.lo)
      hi.append(pmf.lo + n - 1)
    self.lm_pos, self.lm_neg = np.array(lm_pos), np.array(lm_neg)
    self.lo, self.hi = np.array(lo), np.array(hi)
    self.lam = 0.0

  def window(self, cvec, off):
    """Index window (grid off + i·h) outside which the exact partial product
    of the pessimistic PMFs has <= κ per tail (Chernoff)."""
    a = np.min((_dot(cvec, self.lm_pos) - self.log_kappa) / _LAMBDAS)
    b = np.max((self.log_kappa - _dot(cvec, self.lm_neg)) / _LAMBDAS)
    top = math.ceil((a - off) / self.h) if math.isfinite(a) else 2 ** 62
    bot = math.floor((b - off) / self.h) - 1 if math.isfinite(b) else -2 ** 62
    return bot, max(top, bot)

  def choose_tilt(self, cvec, max_lam, log_delta=None, eps=None):
    """λ >= 0 of the Chernoff bound at the focus: round-off in the tilted PMF
    becomes relative to δ there (see :func:`_conv`). λ·(window width) stays
    below 600 so that the tilted window does not underflow."""
    lm = _dot(cvec, self.lm_pos)
    if log_delta is not None:
      score = (lm - log_delta) / _LAMBDAS     # Chernoff ε at the target δ
    elif math.isfinite(eps):
      score = lm - _LAMBDAS * eps             # Chernoff log δ at the smallest ε
    else:
      score = np.full(lm.shape, np.inf)
    score = np.where(np.isfinite(score) & (_LAMBDAS <= max_lam), score, np.inf)
    i = int(np.argmin(score))
    self.lam = float(_LAMBDAS[i]) if (np.isfinite(score[i]) and (log_delta is not None or score[i] < 0)) else 0.0


def _l2(x):
  return math.sqrt(float(np.sum(x * x)))   # no BLAS: threads fight on shared cores


def _dot(c, m):
  return np.sum(np.asarray(c)[:, None] * m, axis=0) if np.ndim(m) == 2 else float(np.sum(c * m))


def _tilted(pmf, lam, h, cvec):
  """One-step PMF as a tilted, max-normalised array: w_i = p_i e^{logc - λ ℓ_i}."""
  ell = pmf.offset + (pmf.lo + np.arange(pmf.p.size)) * h
  with np.errstate(divide="ignore"):
    lt = np.log(pmf.p) + lam * ell
  top = float(lt.max()) if np.isfinite(lt.max()) else 0.0
  p = np.exp(lt - top)
  return _Dist(pmf.lo, p, top, 4 * _EPS * float(p.sum()), cvec, pmf.offset)  # exp rounding


def _conv(a, b, pess, ctx):
  """Linear convolution by real FFT, round-off bound, window cut, renormalisation.

  Exponential tilting commutes with convolution, (a e^{λℓ}) * (b e^{λℓ}) =
  (a*b) e^{λℓ}, so the arrays are the tilted PMFs scaled to max 1 and the L1
  error bound ``err`` lives in those units: at ε it is worth
  err·e^{logc - λε} of δ, tiny next to δ near the focus of the tilt.
  """
  n = a.p.size + b.p.size - 1
  nfft = _next_fast_len(n)
  if nfft > 2 * _MAX_WINDOW:
    raise _TooLarge(nfft)
  fa = np.fft.rfft(a.p, nfft)
  fb = fa if b is a else np.fft.rfft(b.p, nfft)
  z = np.fft.irfft(fa * fb, nfft)[:n]
  ma, mb = a.p.sum(), b.p.sum()
  l2a, l2b = _l2(a.p), _l2(b.p)
  lg = math.ceil(math.log2(nfft))
  err = 2 * math.sqrt(nfft) * (lg * 4 * _EPS * (l2a * mb + ma * l2b + _l2(z))
                               + 3 * _EPS * ma * l2b)
  err += a.err * (mb + b.err) + b.err * ma + n * 1e-300   # + underflowed entries
  z = np.maximum(z, 0.0)
  cvec = a.cvec + b.cvec
  lo = a.lo + b.lo
  off = a.off + b.off
  bot, top = ctx.window(cvec, off)
  bot, top = max(bot, lo), min(top, lo + n - 1)
  if top < bot:
    bot = top = min(max(bot, lo), lo + n - 1)
  i0, i1 = bot - lo, top - lo
  if pess:   # both cut tails dropped; their exact mass (<= κ each) goes to +inf
    ctx.cut_mass += ctx.kappa_cut * ((i0 > 0) + (i1 < n - 1))
  kept = z[i0:i1 + 1]
  mx = float(kept.max()) if kept.size and kept.max() > 0 else 1.0
  return _Dist(bot, kept / mx, a.logc + b.logc + math.log(mx), err / mx, cvec, off)


def _power(base, count, pess, ctx):
  result = None
  while True:
    if count & 1:
      result = base if result is None else _conv(result, base, pess, ctx)
    count >>= 1
    if not count:
      return result
    base = _conv(base, base, pess, ctx)


def _n_convs(counts):
  return sum(c.bit_length() - 1 + bin(c).count("1") - 1 for c in counts) + len(counts) - 1


class _Composed(NamedTuple):
  dist: _Dist
  inf: float
  lam: float


def _inf_mass(pmfs, counts, side):
  """+inf mass of the full product: Π (M_j + inf_j)^c - Π M_j^c (M finite mass)."""
  lm = sum(c * math.log(max(pp[side].p.sum(), 1e-300)) for pp, c in zip(pmfs, counts))
  lr = sum(c * math.log1p(pp[side].inf / max(pp[side].p.sum(), 1e-300)) for pp, c in zip(pmfs, counts))
  return math.exp(lm) * math.expm1(lr)


def _compose(pmfs, counts, h, kappa, focus, sides=(0, 1)):
  """Composes one direction; ``pmfs`` are (pessimistic, optimistic) per phase.

  ``sides`` picks the pessimistic (0) and/or optimistic (1) composition; a
  side left out comes back as None. The pessimistic result does not depend on
  whether the optimistic side is composed (same grid, tilt and cuts)."""
  k = len(counts)
  ctx = _Ctx([pp for pp, _ in pmfs], h, kappa / max(1, 2 * _n_convs(counts)))
  cv = np.asarray(counts, np.float64)
  bot, top = ctx.window(cv, 0.0)
  bot, top = max(bot, int(_dot(cv, ctx.lo))), min(top, int(_dot(cv, ctx.hi)))
  if top - bot + 1 > _MAX_WINDOW:
    raise _TooLarge(top - bot + 1)
  ctx.choose_tilt(cv, max_lam=600.0 / max((top - bot + 1) * h, 1e-300), **focus)

  def one(side):   # only the pessimistic side writes to ctx (its cut mass)
    total = None
    for j, (pmf_pair, count) in enumerate(zip(pmfs, counts)):
      base = _tilted(pmf_pair[side], ctx.lam, h, np.eye(k)[j])
      part = _power(base, count, side == 0, ctx)
      total = part if total is None else _conv(total, part, side == 0, ctx)
    inf = _inf_mass(pmfs, counts, side)
    # a dropped tail meets later factors of total mass 1 + O(1e-9): x1.01 covers it
    inf = (inf * (1 + 1e-12) + 1.01 * ctx.cut_mass) if side == 0 else inf * (1 - 1e-12)
    return _Composed(total, min(inf, 1.0), ctx.lam)

  out = [None, None]
  for side, comp in zip(sides, nx.thread_map(one, sides, jax_work=False)):
    out[side] = comp
  shift = float(sum(c * pp.tau for (pp, _), c in zip(pmfs, counts)))
  return out[0], out[1], shift


# --------------------------------------------------------------------------
# δ(ε) and ε(δ) on a composed PMF
# --------------------------------------------------------------------------


def _smooth_lengths(limit=1 << 26):
  """Sorted 5-smooth numbers (2^a 3^b 5^c) up to ``limit``: fast FFT lengths."""
  out = []
  p5 = 1
  while p5 <= limit:
    p35 = p5
    while p35 <= limit:
      p = p35
      while p <= limit:
        out.append(p)
        p *= 2
      p35 *= 3
    p5 *= 5
  return np.array(sorted(out), np.int64)


_FAST_LENGTHS = _smooth_lengths()


def _next_fast_len(n):
  """Smallest 5-smooth length >= n (NumPy's pocketfft is fastest there)."""
  i = int(np.searchsorted(_FAST_LENGTHS, n))
  return int(_FAST_LENGTHS[i]) if i < _FAST_LENGTHS.size else n


_BLOCK = 16


def discounted_suffix_sums(w, c):
  """D_i = Σ_{m>=i} w_m c^{m-i} for w >= 0 and 0 <= c <= 1, in NumPy.

  The first-order recursion D_i = w_i + c·D_{i+1} in blocks of 16: a block's
  own part is one product with the triangular matrix of powers c^k, and the
  carries between blocks (factor c^16) are the same problem, 16 times
  shorter, solved recursively. Every term is non-negative and every power is
  computed directly (exp(k·log c)), so the relative rounding error stays
  below (log_16(n) + 3)·16 ulps, well inside the (n + 4)·2u margin that
  :func:`_suffix` applies for sequential summation.

  Args:
    w: 1-D float64 array of non-negative weights.
    c: discount factor in [0, 1].

  Returns:
    Float64 array D of w's shape.
  """
  w = np.asarray(w, np.float64)
  n = w.size
  if n <= 1:
    return w.copy()
  b = _BLOCK
  nb = -(-n // b)
  x = np.zeros(nb * b)
  x[:n] = w
  x = x.reshape(nb, b)
  k = np.arange(b)
  with np.errstate(divide="ignore", under="ignore", invalid="ignore"):
    log_c = math.log(c) if c > 0 else -np.inf
    gap = k[None, :] - k[:, None]            # m - i within a block
    tri = np.where(gap >= 0, np.exp(np.where(gap >= 0, gap, 0) * log_c), 0.0)
    tri = np.where((gap == 0), 1.0, tri)
    local = x @ tri.T                        # D within each block, no carry
    tail = np.exp((b - k) * log_c) if c > 0 else (k == b).astype(np.float64)
  # carry[j] = D at the first element of block j + 1 (0 for the last block).
  heads = local[:, 0]
  carry = np.zeros(nb)
  if nb > 1:
    carry[:-1] = discounted_suffix_sums(heads[1:], c**b if c > 0 else 0.0)
  return (local + carry[:, None] * tail[None, :]).reshape(-1)[:n]


def _suffix(comp, h, pess):
  """Original-scale weights' suffix sums S1_i = Σ_{m>=i} w_m and discounted
  D_i = Σ_{m>=i} w_m e^{-(ℓ_m - ℓ_i)}, with a relative (n + 4)·2u margin."""
  d = comp.dist
  n = d.p.size
  ell = d.off + (d.lo + np.arange(n)) * h
  with np.errstate(divide="ignore", over="ignore"):
    w = np.exp(np.log(d.p) + d.logc - comp.lam * ell)
  s1 = np.append(np.cumsum(w[::-1])[::-1], 0.0)
  dd = np.append(discounted_suffix_sums(w, math.exp(-h)), 0.0)
  g = 2 * (n + 4) * _EPS
  return ((s1 * (1 + g), dd * (1 - g)) if pess else (s1 * (1 - g), dd * (1 + g))), ell


def _allowance(comp, eps):
  """Round-off allowance of δ at ε: Σ_{ℓ>ε} e^{logc - λℓ}|err_ℓ| <= err·e^{logc - λε} (λ >= 0).

  An error bound that overflowed (err = +inf, e.g. renormalising by a
  subnormal maximum) stays +inf where the exponential underflows (inf·0
  was NaN: the guards then rejected the answer)."""
  with np.errstate(over="ignore", invalid="ignore"):
    out = comp.dist.err * np.exp(comp.dist.logc - comp.lam * np.asarray(eps, np.float64))
  return np.where(np.isnan(out), np.inf, out)


def _finite_delta(comp, h, eps, pess, suffix=None):
  (s1, d), _ = _suffix(comp, h, pess) if suffix is None else suffix
  dist = comp.dist
  n = dist.p.size
  # The first node strictly above ε; a node within 1e-9 h of ε contributes
  # ~0 either way: kept by the pessimistic side, dropped by the optimistic.
  i = np.clip(np.floor((eps - dist.off) / h - dist.lo + (-1e-9 if pess else 1e-9)).astype(np.int64) + 1,
              0, n)
  li = dist.off + (dist.lo + i) * h
  with np.errstate(over="ignore", invalid="ignore"):
    fin = np.where(i < n, s1[i] - np.exp(np.minimum(eps - li, 0.0)) * d[i], 0.0)
  return np.nan_to_num(np.maximum(fin, 0.0), nan=np.inf)


def _delta_of(comp, h, eps, pess, shift):
  e = eps - shift if pess else eps + shift
  fin = _finite_delta(comp, h, np.where(np.isinf(e), 0.0, e), pess)
  fin = np.where(np.isinf(e), 0.0, fin)
  al = np.where(np.isinf(e), 0.0, _allowance(comp, np.where(np.isinf(e), 0.0, e)))
  if pess:
    return np.minimum(fin + comp.inf + al, 1.0)
  return np.clip(fin + comp.inf - al, 0.0, 1.0)


def _epsilon_of(comp, h, target, pess, shift):
  """ε bound at δ = ``target`` on one composed side.

  On grid interval i, ε in [left_i, ℓ_i] with left_i = max(ℓ_{i-1}, 0), the
  allowance is taken at left_i (its maximum there). Pessimistic: the upper
  function U(ε) = fin(ε) + inf + A is non-increasing, so the first ε with
  U <= δ is an upper bound on ε. Optimistic: L(ε) = fin(ε) + inf - A <= true
  δ, and every ε with L(ε) > δ lies below the true ε, so the last crossing is
  a lower bound.
  """
  suffix = _suffix(comp, h, pess)
  (s1, d), ell = suffix
  n = ell.size
  tt = target.ravel()
  left = np.maximum(np.append(-np.inf, ell[:-1]), 0.0)
  with np.errstate(invalid="ignore", over="ignore"):
    node = s1[1:] - math.exp(-h) * d[1:]                 # finite δ at ε = ℓ_i
    fin_left = np.append(_finite_delta(comp, h, np.array([0.0]), pess, suffix), node[:-1])
    fin_left = np.where(np.append(True, ell[:-1] <= 0), fin_left[0], fin_left)
    a_left = _allowance(comp, left)
    if pess:
      val = np.nan_to_num(fin_left + comp.inf + a_left, nan=np.inf)      # U at left_i
      need = comp.inf + a_left
    else:
      val = np.nan_to_num(fin_left + comp.inf - a_left, nan=-np.inf)     # L at left_i
      need = comp.inf - a_left
  valid = ell > 0                                          # intervals meeting ε >= 0
  if pess:
    # first interval whose right end is already <= δ (U non-increasing)
    right = np.where(valid, np.nan_to_num(node + need, nan=np.inf), np.inf)
    nm = np.minimum.accumulate(right)
    i = np.minimum(np.searchsorted(-nm, -tt, side="left"), n - 1)
    found = nm[i] <= tt
  else:
    # last interval whose left end is still > δ (L may not be monotone)
    vmax = np.maximum.accumulate(np.where(valid, val, -np.inf)[::-1])[::-1]
    i = np.searchsorted(-vmax, -tt, side="left") - 1       # last i with vmax[i] > tt
    i = np.clip(i, 0, n - 1)
    found = (vmax[0] > tt) if n else np.zeros(tt.shape, bool)
    beyond = comp.inf - _allowance(comp, ell[-1]) > tt       # L past the window
  ti = tt - need[i]
  with np.errstate(divide="ignore", invalid="ignore"):
    e = ell[i] + np.log(np.maximum(s1[i] - ti, 0.0) / d[i])
  e = np.where(d[i] > 0, np.nan_to_num(e, nan=-np.inf), ell[i])
  e = np.minimum(np.maximum(e, left[i]), ell[i])
  if pess:
    out = np.where(found, e, np.inf)
    if valid.any():
      out = np.where(found & (val[np.argmax(valid)] <= tt), left[np.argmax(valid)], out)
    else:   # no finite loss above 0: δ(ε >= 0) is the +inf mass (and allowance)
      out = np.where(comp.inf + _allowance(comp, 0.0) <= tt, 0.0, np.inf)
    out = out.reshape(target.shape) + shift
    for _ in range(4):
      out = np.nextafter(out, np.inf)
    return out
  out = np.where(found, e, 0.0)
  out = np.where(beyond | (comp.inf > tt), np.inf, out).reshape(target.shape) - shift
  for _ in range(4):
    out = np.where(np.isfinite(out), np.nextafter(out, -np.inf), out)
  return np.maximum(out, 0.0)


# --------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------


def _run(phases, h, automatic, kappa, fn, focus, sides=(0, 1)):
  """Discretises and composes both directions; retries coarser h when automatic.

  ``sides`` as in :func:`_compose` (the optimistic PMFs are not built without 1)."""
  while True:
    try:
      cache = {}
      total = sum(c for _, c in phases)
      zeta = kappa / total
      dirs = ["remove"] if all(m.remove is m.add for m, _ in phases) else ["remove", "add"]

      def one(name, h=h):
        pmfs = [_discretize(getattr(m, name), h, zeta, cache, optimistic=1 in sides)
                for m, _ in phases]
        # fn reads the composed PMFs on this attempt's grid h (grown from the
        # caller's when automatic)
        return fn(*_compose(pmfs, [c for _, c in phases], h, kappa, focus, sides), h)

      # the add and remove directions side by side (0.55 -> 0.3 s for MNIST on 2 cores)
      return nx.thread_map(one, dirs, jax_work=False)
    except _TooLarge as e:
      if not automatic:
        raise ValueError(
            f"value_discretization_interval={h!r} needs a grid beyond the memory budget "
            f"({e} points; at most {_MAX_WINDOW} composed); use a larger interval.") from None
      if h >= _H_AUTO_LIMIT:
        raise GridTooLarge(
            f"phases: the tight (PLD) accountant cannot compose these phases within its "
            f"memory budget ({e} grid points at the coarsest automatic interval, at most "
            f"{_MAX_WINDOW}): the privacy loss spans too wide a range (very small noise "
            "or very many steps); use an RDP accountant for this question.") from None
      h = min(2.0 * h, _H_AUTO_LIMIT)


def _prepare(phases, value, name, check, value_discretization_interval, rtol):
  phases = _validate(phases)
  nx.check_array(name, value, **check)
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if value_discretization_interval is not None:
    nx.check_array("value_discretization_interval", value_discretization_interval,
                   low=0.0, low_open=True)
  value = np.asarray(value, np.float64)
  if not phases or value.size == 0:
    return [], value, None
  h = (grid_interval(phases, rtol) if value_discretization_interval is None
       else float(value_discretization_interval))
  return phases, value, h


def delta(phases, epsilon, *, value_discretization_interval=None, rtol=1e-3, return_bounds=False):
  """δ(ε) of the composition of ``phases`` (max over add/remove).

  Args:
    phases: sequence of ``(jaxdp.pairs.Mechanism, count)``, count a whole number >= 0.
    epsilon: ε >= 0 (array; +inf allowed), evaluated on one composed PLD.
    value_discretization_interval: grid interval h > 0; None picks
      :func:`grid_interval`.
    rtol: target relative accuracy of the automatic h, in (0, 0.1].
    return_bounds: return ``(lower, upper)`` instead of the upper bound.

  Returns:
    Certified upper bound on δ(ε) (float64 NumPy), or ``(lower, upper)``.

  Raises:
    ValueError: naming the argument on bad input, or when a user-given h needs
      a grid beyond the memory budget.
  """
  phases, eps, h = _prepare(phases, epsilon, "epsilon", dict(low=0.0, allow_inf=True),
                            value_discretization_interval, rtol)
  if not phases:
    z = np.zeros(eps.shape)
    return nx.to_host((z, z)) if return_bounds else nx.to_host(z)
  res = _run(phases, h, value_discretization_interval is None, _KAPPA,
             lambda pe, op, sh, hr: (_delta_of(op, hr, eps, False, sh),
                                     _delta_of(pe, hr, eps, True, sh)),
             dict(eps=float(np.min(eps[np.isfinite(eps)], initial=np.inf))))
  lo = np.max([r[0] for r in res], axis=0)
  up = np.max([r[1] for r in res], axis=0)
  lo, up = _guard("delta", phases, eps, lo, up)
  return nx.to_host((lo, up)) if return_bounds else nx.to_host(up)


def _epsilon_bounds(phases, target, h, automatic, sides=(0, 1)):
  """(lower, upper) ε at the δ's ``target``, each the max over the directions
  (None for a side not in ``sides``). κ and the tilt's focus depend on the
  target alone, so a bound computed alone equals the one computed with both."""
  kappa = min(_KAPPA, 1e-6 * float(target.min()))
  res = _run(phases, h, automatic, max(kappa, 1e-300),
             lambda pe, op, sh, hr: tuple(
                 _epsilon_of((pe, op)[s], hr, target, s == 0, sh) if s in sides else None
                 for s in (1, 0)),
             dict(log_delta=math.log(float(target.min()))), sides=sides)
  lo, up = (np.max([r[i] for r in res], axis=0) if s in sides else None
            for i, s in ((0, 1), (1, 0)))
  return lo, up


def epsilon(phases, delta, *, value_discretization_interval=None, rtol=1e-3, return_bounds=False):  # pylint: disable=redefined-outer-name
  """Smallest ε with δ(ε) <= ``delta`` for the composition of ``phases``.

  Args:
    phases: as in :func:`delta`.
    delta: target δ in (0, 1] (array), all on one composed PLD.
    value_discretization_interval, rtol, return_bounds: as in :func:`delta`.

  Returns:
    Certified upper bound on ε (+inf where the +∞ mass alone exceeds δ), or
    ``(lower, upper)`` with ``return_bounds=True``.

  Raises:
    ValueError: as in :func:`delta`.
  """
  phases, target, h = _prepare(phases, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
                               value_discretization_interval, rtol)
  if not phases:
    z = np.zeros(target.shape)
    return nx.to_host((z, z)) if return_bounds else nx.to_host(z)
  lo, up = _epsilon_bounds(phases, target, h, value_discretization_interval is None)
  lo, up = _guard("epsilon", phases, target, lo, up)
  return nx.to_host((lo, up)) if return_bounds else nx.to_host(up)


def epsilon_side(phases, delta, *, upper=True, rtol=1e-3):  # pylint: disable=redefined-outer-name
  """One bound of :func:`epsilon`'s interval, at about half its cost.

  The upper bound is bit-identical to :func:`epsilon`'s (the pessimistic
  composition does not depend on the optimistic one) and the lower bound to
  the lower end of ``epsilon(..., return_bounds=True)`` before its
  ``lower <= upper`` guard, which needs both. One exception: where the grid
  of the side not built alone would exceed the memory cap (one-step grids of
  ~4·10⁶ cells), :func:`epsilon` doubles h and this does not; both results
  are certified bounds. The upper bound keeps the
  one-step guard (δ_1(ε_upper) <= δ). Calibration probes use this
  (:mod:`jaxdp._src.solvers.tight`).

  Args:
    phases, delta, rtol: as in :func:`epsilon` (automatic grid interval).
    upper: True for the certified upper bound, False for the lower one.

  Returns:
    The bound (float64 NumPy, the shape of ``delta``).
  """
  phases, target, h = _prepare(phases, delta, "delta", dict(low=0.0, high=1.0, low_open=True),
                               None, rtol)
  if not phases:
    return nx.to_host(np.zeros(target.shape))
  lo, up = _epsilon_bounds(phases, target, h, True, sides=(0,) if upper else (1,))
  out = up if upper else lo
  if upper:
    _, out = _guard("epsilon", phases, target, np.zeros(out.shape), out)
  elif np.any(np.isnan(out)):
    out = np.where(np.isnan(out), 0.0, out)
  return nx.to_host(out)


def one_step_delta(phases, epsilon):  # pylint: disable=redefined-outer-name
  """Largest exact one-step δ(ε) over the phases' mechanisms and directions (a
  lower bound on the composed δ), or None where a pair has no closed form."""
  eps = np.asarray(epsilon, np.float64)
  best = np.zeros(eps.shape)
  for mech, _ in phases:
    for pair in {id(mech.remove): mech.remove, id(mech.add): mech.add}.values():
      v = _pairs.hockey_stick(pair, np.where(np.isinf(eps), 0.0, eps))
      if v is None:
        return None
      best = np.maximum(best, np.where(np.isinf(eps), 0.0, v))
  return best


def _guard(name, phases, value, lo, up):
  """lower <= upper; δ_upper >= one-step δ; one-step δ(ε_upper) <= target."""
  tol = 1e-9
  bad = lo > up * (1 + tol) + 1e-300
  if name == "delta":
    one = one_step_delta(phases, value)
    if one is not None:
      bad = bad | (up < one * (1 - tol))
      lo = np.maximum(lo, one * (1 - 1e-6))
  else:
    fin = np.isfinite(up)
    one = one_step_delta(phases, np.where(fin, up, 0.0))
    if one is not None:
      bad = bad | (fin & (one > value * (1 + tol) + 1e-300))
  bad = bad | np.isnan(up)
  if np.any(bad):
    i = int(np.flatnonzero(bad)[0])
    msg = (f"general PLD {name} failed a soundness guard at flat index {i}: lower="
           f"{np.ravel(lo)[i]!r}, upper={np.ravel(up)[i]!r}. This is a jaxdp bug; the trivial "
           "bound is returned instead.")
    if _guards.strict():
      raise _guards.GuardViolation(msg)
    warnings.warn(msg, _guards.GuardWarning, stacklevel=3)
    up = np.where(bad, np.inf if name == "epsilon" else 1.0, up)
  return np.minimum(lo, up), up
