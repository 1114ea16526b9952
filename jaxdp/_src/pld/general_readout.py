"""δ(ε) and ε(δ) of the general PLD engine, read off a composed PMF.

δ(ε) = Σ_{ℓ > ε} ω(ℓ) (1 - e^{ε-ℓ}) + ω(+∞) from discounted suffix sums
D_i = Σ_{m>=i} ω_m e^{-(ℓ_m - ℓ_i)} (no e^{+ℓ}, no overflow), with the
composition's round-off allowance; ε from δ solved exactly on each grid
interval (see :mod:`jaxdp._src.pld.general`'s docstring, "ε from δ"). Split
out of :mod:`jaxdp._src.pld.general` (moves only).
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp._src.pld.general_compose import _EPS


# --------------------------------------------------------------------------
# δ(ε) and ε(δ) on a composed PMF
# --------------------------------------------------------------------------


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


def delta_of(comp, h, eps, pess, shift):
  e = eps - shift if pess else eps + shift
  fin = _finite_delta(comp, h, np.where(np.isinf(e), 0.0, e), pess)
  fin = np.where(np.isinf(e), 0.0, fin)
  al = np.where(np.isinf(e), 0.0, _allowance(comp, np.where(np.isinf(e), 0.0, e)))
  if pess:
    return np.minimum(fin + comp.inf + al, 1.0)
  return np.clip(fin + comp.inf - al, 0.0, 1.0)


def epsilon_of(comp, h, target, pess, shift):
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
