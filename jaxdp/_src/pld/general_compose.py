"""Composition of the general PLD engine (:mod:`jaxdp._src.pld.general`).

Each phase's ``count``-fold power by repeated squaring (linear convolutions
by real FFT in float64), the phases convolved together, every result cut to
a window from Chernoff bounds of the partial product's log-MGF, the PMFs
exponentially tilted at the query's λ, and each convolution's FFT round-off
carried as a certified L1 allowance (Higham 2002, Thm 24.2). The method and
its proof are in :mod:`jaxdp._src.pld.general`'s docstring ("Composition",
"Round-off"); split out of it (moves only).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import special as sps

from jaxdp._src.core import numerics as nx


_EPS = float(np.finfo(np.float64).eps)


MAX_WINDOW = 2 ** 22    # largest composed window


_LAMBDAS = np.geomspace(1e-4, 1e6, 160)


class _Dist(NamedTuple):
  lo: int               # loss index of p[0]
  p: np.ndarray         # tilted weights, max 1: w_i = p_i e^{logc - λ ℓ_i}
  logc: float
  err: float            # L1 round-off allowance, in the units of p
  cvec: np.ndarray      # composition counts per phase
  off: float = 0.0      # loss of index i is off + (lo + i)·h


class TooLarge(Exception):
  """A grid would exceed the memory budget: ``args = (points needed, cap)``."""

  @property
  def overshoot(self) -> float:
    """points needed / cap (> 1), or 0 where unknown (no arguments)."""
    return float(self.args[0]) / float(self.args[1]) if len(self.args) == 2 else 0.0

  def __str__(self):
    return str(self.args[0]) if self.args else ""


# --------------------------------------------------------------------------
# composition
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


class _Ctx:
  """Per-direction composition context: one-step log-MGFs, κ per cut, the tilt λ."""

  def __init__(self, pess, h, kappa_cut, lambdas=_LAMBDAS):
    self.h = h
    self.lambdas = lambdas
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
      lm_pos.append(sps.logsumexp(lmass + lambdas[:, None] * top, axis=1))
      lm_neg.append(sps.logsumexp(lmass - lambdas[:, None] * bot, axis=1))
      lo.append(pmf.lo)
      hi.append(pmf.lo + n - 1)
    self.lm_pos, self.lm_neg = np.array(lm_pos), np.array(lm_neg)
    self.lo, self.hi = np.array(lo), np.array(hi)
    self.lam = 0.0

  def window(self, cvec, off):
    """Index window (grid off + i·h) outside which the exact partial product
    of the pessimistic PMFs has <= κ per tail (Chernoff)."""
    a = np.min((_dot(cvec, self.lm_pos) - self.log_kappa) / self.lambdas)
    b = np.max((self.log_kappa - _dot(cvec, self.lm_neg)) / self.lambdas)
    top = math.ceil((a - off) / self.h) if math.isfinite(a) else 2 ** 62
    bot = math.floor((b - off) / self.h) - 1 if math.isfinite(b) else -2 ** 62
    return bot, max(top, bot)

  def choose_tilt(self, cvec, max_lam, log_delta=None, eps=None):
    """λ >= 0 of the Chernoff bound at the focus: round-off in the tilted PMF
    becomes relative to δ there (see :func:`_conv`). λ·(window width) stays
    below 600 so that the tilted window does not underflow."""
    lm = _dot(cvec, self.lm_pos)
    if log_delta is not None:
      score = (lm - log_delta) / self.lambdas     # Chernoff ε at the target δ
    elif math.isfinite(eps):
      score = lm - self.lambdas * eps             # Chernoff log δ at the smallest ε
    else:
      score = np.full(lm.shape, np.inf)
    score = np.where(np.isfinite(score) & (self.lambdas <= max_lam), score, np.inf)
    i = int(np.argmin(score))
    self.lam = float(self.lambdas[i]) if (np.isfinite(score[i]) and (log_delta is not None or score[i] < 0)) else 0.0


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
  if nfft > 2 * MAX_WINDOW:
    raise TooLarge(nfft, 2 * MAX_WINDOW)
  fa = np.fft.rfft(a.p, nfft)
  fb = fa if b is a else np.fft.rfft(b.p, nfft)
  z = np.fft.irfft(fa * fb, nfft)[:n]
  ma, mb = a.p.sum(), b.p.sum()
  l2a, l2b = _l2(a.p), _l2(b.p)
  lg = math.ceil(math.log2(nfft))
  err = 2 * math.sqrt(nfft) * (lg * 4 * _EPS * (l2a * mb + ma * l2b + _l2(z))
                               + 3 * _EPS * ma * l2b)
  with np.errstate(over="ignore"):   # an infinite bound certifies nothing, soundly
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


def _full_window(pess, counts, h, kappa, lambdas=_LAMBDAS):
  """The context of a composition and the index window [bot, top] of the
  full product (Chernoff over ``lambdas``, clipped to the support) that
  :func:`compose` checks against ``MAX_WINDOW``."""
  ctx = _Ctx(pess, h, kappa / max(1, 2 * _n_convs(counts)), lambdas)
  cv = np.asarray(counts, np.float64)
  bot, top = ctx.window(cv, 0.0)
  return ctx, max(bot, int(_dot(cv, ctx.lo))), min(top, int(_dot(cv, ctx.hi)))


def window_width(pess, counts, h, kappa, every=1):
  """Width in loss units of the composed window of the pessimistic PMFs
  ``pess`` on grid h (what :func:`compose` would need, times h), with the
  Chernoff bounds taken over every ``every``-th λ of compose's grid (fewer
  λ: a cheaper, slightly wider window; every 4th, consecutive λ 1.34x
  apart, widens a Gaussian-like edge's deviation term by <= 4.5%)."""
  _, bot, top = _full_window(pess, counts, h, kappa, _LAMBDAS[::every])
  return (top - bot + 1) * h


def compose(pmfs, counts, h, kappa, focus, sides=(0, 1)):
  """Composes one direction; ``pmfs`` are (pessimistic, optimistic) per phase.

  ``sides`` picks the pessimistic (0) and/or optimistic (1) composition; a
  side left out comes back as None. The pessimistic result does not depend on
  whether the optimistic side is composed (same grid, tilt and cuts)."""
  k = len(counts)
  ctx, bot, top = _full_window([pp for pp, _ in pmfs], counts, h, kappa)
  cv = np.asarray(counts, np.float64)
  if top - bot + 1 > MAX_WINDOW:
    raise TooLarge(top - bot + 1, MAX_WINDOW)
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
