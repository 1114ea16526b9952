"""Where a one-step pair's loss crosses given levels: the bracketing search of
:func:`jaxdp._src.mechanisms.discretise.discretize` (and of
:mod:`jaxdp._src.mechanisms.pairs`).

:func:`_bisect_x` brackets x = sup{x in [a, b] : f(x) <= level} for many
levels at once (vectorised NumPy, float64): around an approximate inverse
when one is given, else from a dense table, then Illinois steps and
32-section; :func:`last_true_point` finds the largest grid point where a
predicate holds. Split out of :mod:`jaxdp._src.mechanisms.discretise`
(moves only).
"""

from __future__ import annotations

import numpy as np

_EPS = float(np.finfo(np.float64).eps)


def _bisect_x(f, level, a, b, iters=64, inverse=None):
  """x = sup{x in [a, b] : f(x) <= level} bracketed as (lo, hi) with f(lo) <= level
  < f(hi) (lo = hi at a clamp), vectorised. With ``inverse`` (an approximate
  x(level), e.g. a closed form), brackets of width ~1e-13·(b - a) around it
  are tried first and kept where f confirms them; the rest (and everything
  without ``inverse``) go through brackets from a dense table, then
  three Illinois steps (each with two probes just beside the secant point,
  which close the bracket where the secant is accurate), then 32-section for
  whatever has not converged (brackets straddling a kink of f)."""
  level = np.asarray(level, np.float64).ravel()
  if inverse is not None and level.size:
    return _bisect_x_near_inverse(f, level, a, b, iters, inverse)
  xs = np.linspace(a, b, 8193)
  fs = f(xs)
  i = np.clip(np.searchsorted(np.maximum.accumulate(fs), level, side="right") - 1, -1, xs.size - 1)
  lo = xs[np.maximum(i, 0)]
  hi = xs[np.minimum(i + 1, xs.size - 1)]
  flo, fhi = fs[np.maximum(i, 0)], fs[np.minimum(i + 1, xs.size - 1)]
  below_all, above_all = i < 0, i >= xs.size - 1
  lo[below_all] = hi[below_all] = a
  lo[above_all] = hi[above_all] = b
  act = ~(below_all | above_all)
  bad = act & ~((flo <= level) & (fhi > level))     # table not monotone here
  lo[bad], hi[bad] = a, b
  flo[bad], fhi[bad] = f(np.array([a]))[0], f(np.array([b]))[0]
  tol = 1e-13 * (b - a)
  side = np.zeros(level.shape)
  for it in range(iters):
    idx = np.flatnonzero(act & (hi - lo > tol) & (np.nextafter(lo, np.inf) < hi))
    if idx.size == 0:
      break
    if it < 3:                                         # Illinois (regula falsi)
      _illinois_step(f, level, lo, hi, flo, fhi, side, idx, it, tol)
    else:   # 32-section: the bracket shrinks 32x per (vectorised) evaluation
      _section_step(f, level, lo, hi, flo, fhi, idx)
  return lo, hi


def _bisect_x_near_inverse(f, level, a, b, iters, inverse):
  """:func:`_bisect_x` with ``inverse``: brackets of width ~1e-13·(b - a)
  around x0 = inverse(level), kept where f confirms them (and at the clamps);
  the rest go through :func:`_bisect_x` without ``inverse``."""
  fa, fb = f(np.array([a, b]))
  x0 = np.clip(np.asarray(inverse(level), np.float64).ravel(), a, b)
  d = np.maximum(2.5e-14 * (b - a), 4 * _EPS * np.abs(x0))
  lo, hi = np.maximum(x0 - d, a), np.minimum(x0 + d, b)
  fl, fh = f(np.concatenate([lo, hi])).reshape(2, -1)
  clamp_a, clamp_b = fa > level, fb <= level
  lo[clamp_a] = hi[clamp_a] = a
  lo[clamp_b] = hi[clamp_b] = b
  done = clamp_a | clamp_b | ((fl <= level) & (fh > level))
  if not done.all():
    rest = np.flatnonzero(~done)
    lo[rest], hi[rest] = _bisect_x(f, level[rest], a, b, iters)
  return lo, hi


def _illinois_step(f, level, lo, hi, flo, fhi, side, idx, it, tol):
  """One Illinois (regula falsi) step of :func:`_bisect_x` on the brackets
  ``idx``, with two probes just beside the secant point; updates ``lo``,
  ``hi``, ``flo``, ``fhi`` and ``side`` in place."""
  l0, h0, f0, f1, g = lo[idx], hi[idx], flo[idx], fhi[idx], level[idx]
  w0 = np.where(side[idx] < -1, 0.5, 1.0)
  w1 = np.where(side[idx] > 1, 0.5, 1.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    t = (g - f0) * w1 / ((g - f0) * w1 + (f1 - g) * w0)
  t = np.clip(np.nan_to_num(t, nan=0.5), 1e-3 if it % 4 == 3 else 0.0, 1.0)
  mid = np.clip(l0 + t * (h0 - l0), np.nextafter(l0, np.inf), np.nextafter(h0, -np.inf))
  # Also evaluate just below and above the secant point: where it is
  # accurate (a linear or smooth piece) the bracket closes at once.
  d = np.maximum(0.25 * tol, 4 * _EPS * np.abs(mid))
  xs = np.stack([mid, mid - d, mid + d])
  fx = f(xs.ravel()).reshape(xs.shape)
  ok = fx[0] <= g
  lo[idx[ok]], flo[idx[ok]] = mid[ok], fx[0][ok]
  hi[idx[~ok]], fhi[idx[~ok]] = mid[~ok], fx[0][~ok]
  side[idx] = np.where(ok, np.minimum(side[idx], 0) - 1, np.maximum(side[idx], 0) + 1)
  for x, fv in zip(xs[1:], fx[1:]):        # a probe inside the new bracket tightens it
    inside = (x > lo[idx]) & (x < hi[idx])
    up, dn = inside & (fv <= g), inside & ~(fv <= g)
    lo[idx[up]], flo[idx[up]] = x[up], fv[up]
    hi[idx[dn]], fhi[idx[dn]] = x[dn], fv[dn]


def _section_step(f, level, lo, hi, flo, fhi, idx):
  """One 32-section step of :func:`_bisect_x` on the brackets ``idx`` (each
  shrinks 32x per vectorised evaluation); updates ``lo``, ``hi``, ``flo``,
  ``fhi`` in place."""
  l0, h0, g = lo[idx], hi[idx], level[idx]
  xs = l0[:, None] + (h0 - l0)[:, None] * (np.arange(1, 32) / 32.0)[None, :]
  xs = np.clip(xs, np.nextafter(l0, np.inf)[:, None], np.nextafter(h0, -np.inf)[:, None])
  fx = f(xs.ravel()).reshape(xs.shape)
  # the last point whose running max is <= g has f <= g, the next one f > g
  k = (np.maximum.accumulate(fx, axis=1) <= g[:, None]).sum(axis=1)
  r = np.arange(k.size)
  has_lo, has_hi = k > 0, k < 31
  lo[idx[has_lo]] = xs[r[has_lo], k[has_lo] - 1]
  flo[idx[has_lo]] = fx[r[has_lo], k[has_lo] - 1]
  hi[idx[has_hi]] = xs[r[has_hi], k[has_hi]]
  fhi[idx[has_hi]] = fx[r[has_hi], k[has_hi]]


def last_true_point(pred, a, b, n=4097):
  """A point x of [a, b] with pred(x) true, as large as a grid of n points finds
  (pred vectorised, true then false); a when pred(a) is false."""
  xs = np.linspace(a, b, n)
  ok = np.asarray(pred(xs), bool)
  if not ok[0]:
    return a
  return float(xs[np.argmin(ok) - 1]) if not ok.all() else float(b)
