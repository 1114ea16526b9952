"""Exponential tilting of the fast PLD kernel's compositions (host, NumPy).

Where round-off rather than the grid sets the width of the kernel's interval
(δ <= 1e-8 after many steps, δ = 1e-12), :mod:`jaxdp._src.pld.run` composes the
configuration a second time with every one-step PMF tilted towards the
query, x̃_{k,i} = x_{k,i} e^{g(i - c_k)} / D_k (i the loss index, g >= 0 per
index, c_k the tilted PMF's mode, D_k its computed mass). Convolution
commutes with tilting: the linear T-fold composition satisfies

  w(J) = w̃(J) · e^{E(J)},   E(J) = Σ_k T_k log D_k - g (J - C),  C = Σ_k T_k c_k,

so the composition's proven round-off bound B (per entry of w̃, whose mass
is ~1) becomes B·e^{E(J)} at node J: exponentially small above the tilt's
centre, where a small δ is read, instead of uniform (docs/mathematics.md,
"Round-off of the fast kernel").

Cyclic wrap-around. The computed cyclic entry at window node j holds
Σ_m w̃(a + j + m n); untilted, the terms m != 0 become
w(a + j + m n)·e^{g m n} >= 0. The pessimistic (upper) read may keep them
(extra mass only raises δ). The optimistic (lower) read subtracts a bound:
mass from below the window (m < 0) is attenuated (e^{-g|m|n} <= 1), so the
untilted budget ``wrap`` still bounds it; mass from above (m >= 1) is
amplified and bounded by Chernoff, for any t > g,

  Σ_{m>=1} e^{g m n} P(S >= a + j0 + m n) <= M(t)^T e^{-t(a + j0)} / (e^{(t-g) n} - 1),

M(t) = Π_k (Σ_i x_{k,i} e^{t i})^{T_k} the optimistic PMFs' MGF (index
units), j0 the first node read; :func:`above_wrap` takes the best t of a
few.

Exactness. g is rounded to 20 significant bits, so g·k is exact for integer
|k| < 2^33; exp and log are NumPy's (glibc: at most 1 ulp, documented), so a
tilted entry carries a relative error of at most 8u against the exact tilt
by the computed D_k (u = 2^-53): the composition's bound takes it as an
input perturbation (``input_rel`` of :func:`jaxdp._src.pld.compose._compose_group`).
E(J) is evaluated with an explicit error bound (:func:`node_factors`).
"""

from __future__ import annotations

import math

import numpy as np

_U = 2.0 ** -53
# Relative error of a tilted entry: two exps (1 ulp = 2u each), two
# products and a division.
INPUT_REL = 8.0 * _U
_NEWTON = 12


def round_g(g):
  """g rounded down to 20 significant bits (g·k exact for |k| < 2^33)."""
  if not g > 0 or not math.isfinite(g):
    return 0.0
  m, e = math.frexp(g)
  return math.ldexp(math.floor(m * 2 ** 20) / 2 ** 20, e)


class Phases:
  """The live phases of one composition row, for the host's tilt choices:
  each phase's log-masses and loss indices on its support, and its step
  count (PMFs x >= 0 on indices lo + i)."""

  def __init__(self, pmfs, lo, steps):
    self.parts = []
    for x, l, t in zip(pmfs, lo, steps):
      nz = np.flatnonzero(np.asarray(x) > 0)
      if t > 0 and nz.size:
        logx = np.log(np.asarray(x)[nz])
        idx = (int(l) + nz).astype(np.float64)
        # magnitudes entering the exponents log x_i + t·i (their rounding)
        self.parts.append((logx, idx, float(t), nz.size,
                           float(np.max(np.abs(logx))), float(np.max(np.abs(idx)))))
    self._cache = {}

  def __bool__(self):
    return bool(self.parts)

  def _lse(self, t, want_var=False):
    """Per phase: (log Σ_i x_i e^{t i}, tilted mean index[, variance])."""
    out = []
    for logx, idx, *_ in self.parts:
      z = logx + t * idx
      top = float(np.max(z))
      wts = np.exp(z - top)
      s = float(np.sum(wts))
      mean = float(np.dot(wts, idx)) / s
      if want_var:
        d = idx - mean
        out.append((top + math.log(s), mean, float(np.dot(wts, d * d)) / s))
      else:
        out.append((top + math.log(s), mean))
    return out

  def mean(self, t, want_var=False):
    """Mean index of the t-tilted composition (and its variance)."""
    parts = self._lse(t, want_var)
    mean = sum(p[2] * r[1] for p, r in zip(self.parts, parts))
    if not want_var:
      return mean
    return mean, sum(p[2] * r[2] for p, r in zip(self.parts, parts))

  def log_mgf_up(self, t):
    """log M(t) = Σ_k T_k log Σ_i x_{k,i} e^{t i}, rounded up (cached)."""
    if t not in self._cache:
      log_m, err = 0.0, 0.0
      for (_, _, t_k, n, mag_log, mag_idx), (lm, _) in zip(self.parts, self._lse(t)):
        log_m += t_k * lm
        # log-sum-exp of n terms: the exponents log x_i + t·i within
        # 4u·(|log x_i| + |t·i|) (log: 1 ulp, product, sum), the subtraction
        # of the maximum, exp and the n-term sum within (n + 4)·2u, the final
        # log and addition within 4u·|value|.
        err += t_k * (4.0 * _U * (mag_log + abs(t) * mag_idx) + (n + 4) * 2.0 * _U
                      + 4.0 * _U * abs(lm))
      self._cache[t] = log_m + err + 8.0 * _U * abs(log_m)
    return self._cache[t]

  def top(self):
    """The composition's largest index."""
    return sum(t * idx[-1] for _, idx, t, *_ in self.parts)


def saddle(phases, target):
  """g >= 0 (per index) with the g-tilted composition's mean ≈ ``target``
  (an index): the tilt that centres the composition at the query
  (safeguarded Newton; the tilted mean increases with g, its derivative
  is the tilted variance). 0 where the
  untilted mean is already at or above the target; an uncertified choice
  (any g >= 0 is valid)."""
  if not phases or not math.isfinite(target) or phases.mean(0.0) >= target:
    return 0.0
  if target >= phases.top():
    return 0.0
  hi = 1e-6
  while phases.mean(hi) < target and hi < 1e6:
    hi *= 4.0
  lo_g = hi / 4.0 if hi > 1e-6 else 0.0
  g = math.sqrt(max(lo_g, 1e-12) * hi)
  for _ in range(_NEWTON):   # safeguarded Newton: d mean / dg = variance
    mean, var = phases.mean(g, want_var=True)
    if abs(mean - target) <= 1e-3 * math.sqrt(var) + 1.0:
      break
    if mean < target:
      lo_g = g
    else:
      hi = g
    step = g + (target - mean) / var if var > 0 else math.nan
    g = step if lo_g < step < hi else 0.5 * (lo_g + hi)
  lo_g = g
  return round_g(lo_g)


def tilt_row(pp, lo, steps, g):
  """Tilts the phases of one composition row in place.

  Args:
    pp: (phases, width) one-step PMFs of the row (entries >= 0), entry i of
      phase k at loss index ``lo[k] + i``; modified in place.
    lo, steps: (phases,) integer starts and step counts.
    g: the tilt per index (20 significant bits, :func:`round_g`).
  Returns:
    ``(log_d, c)``: Σ_k T_k log D_k (float) and its error bound, and
    C = Σ_k T_k c_k (int).
  """
  width = pp.shape[-1]
  log_d, log_d_err, c_all = 0.0, 0.0, 0
  for k in range(pp.shape[0]):
    x = pp[k]
    if steps[k] <= 0 or not np.any(x > 0):
      continue
    nz = np.flatnonzero(x > 0)
    idx = int(lo[k]) + nz
    x = x[nz]
    c = int(idx[np.argmax(np.log(x) + g * idx.astype(np.float64))])
    # e^{g k} = e^{g k1} e^{g k2}, k1 = k // 2 (exact arguments): where
    # x_i > 0, x_i e^{g k} <= x_c <= 1 bounds g k by 745, so neither factor
    # overflows; entries x_i = 0 stay 0 (only the support is tilted).
    off = idx - c
    half = off // 2
    with np.errstate(over="ignore", invalid="ignore"):
      y = (x * np.exp(g * half.astype(np.float64))) * np.exp(g * (off - half).astype(np.float64))
    d = float(np.sum(y))
    pp[k, nz] = y / d
    ld = math.log(d)
    log_d += float(steps[k]) * ld
    log_d_err += float(steps[k]) * abs(ld)
    c_all += int(steps[k]) * c
  return log_d, 8.0 * _U * (log_d_err + abs(log_d)) + 1e-300, c_all


def node_factors(log_d, log_d_err, c_all, g, nodes, upper):
  """e^{E(J)} at loss indices ``nodes``, rounded up (``upper``) or down.

  E(J) = log_d - g (J - C): J - C is an exact integer and g·(J - C) exact
  (20-bit g); the sum with log_d is within u·|E|, log_d within
  ``log_d_err``; exp within 1 ulp (and 2^-1075 where subnormal)."""
  gj = g * (np.asarray(nodes, np.int64) - c_all).astype(np.float64)
  e = log_d - gj
  err = log_d_err + 2.0 * _U * (np.abs(e) + np.abs(gj))
  # Subnormal results: exp is within half a subnormal ulp (2^-1075) absolutely.
  sub = 4.0 * 2.0 ** -1074
  with np.errstate(over="ignore"):
    if upper:
      return np.exp(e + err) * (1.0 + 4.0 * _U) + sub
    return np.maximum(np.exp(e - err) * (1.0 - 4.0 * _U) - sub, 0.0)


def above_wrap(phases, g, first, size):
  """Bound on the untilted mass that wraps from above the window onto nodes
  >= ``first`` (an index) of a g-tilted composition of cycle length
  ``size`` (module docstring; ``phases``: its untilted one-step PMFs, a
  :class:`Phases`), rounded up: the best of 8 orders t = g + 4^k / size."""
  best = math.inf
  for k in range(0, 16, 2):
    t = g + 2.0 ** k / size
    log_m = phases.log_mgf_up(t)
    x = (t - g) * size
    log_expm1 = x + math.log1p(-math.exp(-x)) if x > 30.0 else math.log(math.expm1(x))
    expo = log_m - t * first - log_expm1
    expo += 8.0 * _U * (abs(log_m) + abs(t * first) + abs(log_expm1) + 1.0)
    best = min(best, math.exp(min(expo, 700.0)))
  return best
