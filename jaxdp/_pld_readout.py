"""Host read-out of the composed windows of :mod:`jaxdp.pld`: δ(ε) and ε(δ)
bounds from the pessimistic and optimistic composed PMFs (NumPy, float64).

The FFT composition runs in XLA (:func:`jaxdp._pld_compose._compose_group`);
the read-out runs here, on the host, for every window whatever its length.
It compiles nothing: a configuration whose composed window has a length no
earlier call used costs one small composition program instead of the
composition plus two read-out programs (~0.16 s instead of ~0.8 s of XLA
compilation, measured on the 2-core CPU), and its answer does not depend on
what else was computed before (the same code serves every window).

The mathematics is in the docstring of :mod:`jaxdp.pld`: on a window of
loss nodes ℓ_k = (start + k)·h with composed masses w_k,

  δ(ε) = Σ_{ℓ_k > ε} w_k (1 - e^{ε - ℓ_k}) + p_∞

(Balle, Barthe & Gaboardi 2018, Thm 1: the hockey-stick divergence of the
composed PLD), and ε(δ) = min{ε : δ(ε) <= δ} is solved in closed form on the
grid interval where δ crosses the target.
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp.pld_general import discounted_suffix_sums

_EPS = float(np.finfo(np.float64).eps)


def _next(x):
  """x shifted one node down: x_{k+1}, 0 at the top."""
  return np.append(x[1:], 0.0)


def grid_deltas(w, h):
  """(D, S) on the window nodes of one composed PMF ``w`` (1-D).

  D_k = Σ_{m>k} w_m (1 - e^{-(m-k)h}) is δ at node k without the infinity
  atom and S_k = Σ_{m>k} w_m e^{-(m-k)h}.  Since D_k - D_{k+1} =
  (1 - e^{-h})(w_{k+1} + S_{k+1}), D is a reverse cumulative sum of
  non-negative terms when w >= 0 (no cancellation), and S comes from the
  blocked first-order recursion :func:`jaxdp.pld_general.discounted_suffix_sums`
  (relative error a few dozen ulps for any length and any h; every power is
  <= 1, so nothing overflows however many loss units the window spans).

  Args:
    w: (N,) composed masses.  h: grid interval (> 0).
  Returns:
    (D, S): float64 arrays of shape (N,).
  """
  w = np.asarray(w, np.float64)
  s = math.exp(-h) * _next(discounted_suffix_sums(w, math.exp(-h)))
  t = -math.expm1(-h) * (_next(w) + _next(s))   # finite for every h
  d = np.cumsum(t[::-1])[::-1]
  return d, s


def epsilon_on_window(w, start, h, inf_mass, targets, lower=False, per_node=0.0):
  """Smallest ε with δ(ε) <= target, for each target (exact on the
  piecewise-exponential δ of the discrete PMF).

  The largest node k with δ(ε_k) > target is found on the node values of
  :func:`grid_deltas`; on (ε_k, ε_k + h], δ(ε_k + x) = δ(ε_k) - (e^x - 1) S_k,
  so x = log1p((δ(ε_k) - target) / S_k).  For the upper bound the node values
  are inflated by a relative ``64 · N · eps_machine`` (summation round-off,
  above the N ulps of a sequential sum) and the result nudged up; for the
  lower bound both go down.

  Args:
    w: (N,) composed PMF.  start: loss index of w[0].  h: grid interval.
    inf_mass: mass at +∞.
    targets: (K,) δ's.  lower: read the lower bound (optimistic PMF).
    per_node: round-off allowance per node (>= 0): δ at a node is raised
      (lower: lowered) by it times the number of nodes above that node, the
      nodes whose masses enter its sum.
  Returns:
    (K,) ε's: +∞ where ``inf_mass`` alone exceeds the target; the first
    node (upper) or -∞ (lower) where δ at the first node is already <= the
    target; NaN where w is not finite (the guards then reject it).
  """
  targets = np.asarray(targets, np.float64)
  size = w.shape[-1]
  if not (np.all(np.isfinite(w)) and not np.isnan(inf_mass)):
    return np.full(targets.shape, np.nan)
  d, s = grid_deltas(w, h)
  infl = 64.0 * size * _EPS
  above = per_node * np.arange(size - 1, -1, -1, dtype=np.float64)
  d = d * (1.0 - infl) - above if lower else d * (1.0 + infl) + above
  d = d + inf_mass
  # The last node above each target (D is non-increasing only up to
  # round-off; -1 when none is).
  k = np.array([np.max(np.flatnonzero(d > t), initial=-1) for t in targets], np.int64)
  kk = np.maximum(k, 0)
  dk, sk = d[kk], s[kk]
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = (dk - targets) / np.where(sk > 0, sk, 1.0)
    x = np.where(sk > 0, np.log1p(np.maximum(ratio, 0.0)), h)
  eps = (start + kk) * h + np.clip(x, 0.0, h)
  nudge = 4.0 * _EPS * np.maximum(np.abs(eps), 1.0)
  eps = eps - nudge if lower else eps + nudge
  eps = np.where(k < 0, -np.inf if lower else start * h, eps)
  return np.where(inf_mass > targets, np.inf, eps)


def delta_on_window(w, start, h, inf_mass, eps, per_node=0.0):
  """δ(ε) = Σ_{ℓ_k > ε} (w_k (1 - e^{ε - ℓ_k}) + per_node) + inf_mass for
  each ε in ``eps`` (direct sums over the window: no cancellation, since
  every term is a product of w_k with a factor in [0, 1)); ``per_node``: the
  round-off allowance of each node that enters the sum (negative for a lower
  bound)."""
  loss = (start + np.arange(w.shape[-1])) * h
  out = np.empty(np.shape(eps))
  for i, e in enumerate(np.asarray(eps, np.float64)):
    sel = loss > e
    out[i] = np.sum(w[sel] * -np.expm1(e - loss[sel])) + per_node * np.count_nonzero(sel) + inf_mass
  return out


def _read_range(start, h, length, floor):
  """First node k0 of a window that a read-out needs: nodes k0 .. length - 1
  are read, up to the window's certified top (``length`` = b - a + 1 nodes:
  the ones above hold at most the truncated mass, already booked at +∞ in
  the pessimistic result, plus mass wrapped from below the window, which
  sits at losses below every node read), and from one node below the loss
  ``floor`` (δ at ε >= floor sums only nodes above ε)."""
  top = max(int(length) - 1, 0)
  if not math.isfinite(floor):   # ε = +inf reads no node; NaN: all of them
    return top if floor > 0 else 0
  return int(min(max(math.floor(floor / h) - 1 - start, 0), top))


def _cyclic_slice(row, rot, k0, k1):
  """Window nodes k0 .. k1 - 1 of a cyclic composed row whose node j sits at
  entry (rot + j) mod N: a view, or two pieces joined where it wraps."""
  n = row.shape[-1]
  lo = (int(rot) + int(k0)) % n
  count = max(int(k1) - int(k0), 0)
  if lo + count <= n:
    return row[lo:lo + count]
  return np.concatenate([row[lo:], row[:lo + count - n]])


def answer(w, power_err, level, start, h, inf_mass, queries, wrap, shift, length, want_epsilon,
           lower=False, rot=None):
  """Bounds of a group's queries from composed windows of one kind.

  Args:
    w: (m, N) composed windows (NumPy), all pessimistic (upper bounds) or all
      optimistic (``lower``); power_err, level: (m,) the composition's
      round-off terms (:func:`jaxdp._pld_compose._compose_group`).
    start: (m,) window starts.  h, inf_mass: (m,).  queries: (m, K).
    wrap: (m,) the Chernoff mass that may have wrapped from below the window
      to its top (the tail budget per phase; lower bounds).  shift: (m,) loss
      shifts of host-discretised phases (:mod:`jaxdp._pld_extra`): the
      pessimistic composed losses may be up to the shift above their nodes,
      the optimistic ones are at least the shift above theirs.
    length: (m,) nodes of each certified window (<= N).
    rot: (m,) rotation of each cyclic row: window node j is ``w[r, (rot_r + j)
      mod N]`` (None: 0).
    want_epsilon: queries are target δ's (else ε's).
    lower: read lower bounds from optimistic windows (else upper bounds
      from pessimistic ones; ``inf_mass`` applies to those).
  Returns:
    (m, K) NumPy array.

  Only the nodes a query can read are summed (:func:`_read_range`): up to
  the certified window's top, and from the node loss that reports ε = 0 (ε
  queries: a negative ε is reported as 0) or the smallest queried ε (δ
  queries), each less the PMF's loss shift. Dropping nodes only lowers
  both δ's: the pessimistic one loses nothing that is not booked at +∞, and
  a lower bound may always drop mass.

  Round-off, per node of the window: the empirical FFT allowance
  ``4 · level`` (level = the larger of the most negative entry and
  eps_machine times the largest one: clipping the negative FFT noise to zero
  can otherwise drop up to |noise| per node) plus the powers' amplification
  ``power_err / N`` (``power_err`` bounds Σ_f |Δspec_f|, the spectrum's
  summed error, and by the triangle inequality on the inverse DFT every
  node's error is at most that over N). δ at ε sums the nodes above ε only,
  so it carries the allowance of those nodes: added to the pessimistic δ,
  subtracted (with ``wrap``) from the optimistic one. (Booking N nodes'
  allowance at every ε, as before, made the upper ε +∞ at δ <= ~1e-10
  after ~10⁵ steps, where ``jaxdp.epsilon`` then reported the RDP bound.)
  """
  m = len(start)
  size = w.shape[-1]
  per_node = 4.0 * np.asarray(level) + np.asarray(power_err) / size
  rot = np.zeros(m, np.int64) if rot is None else np.asarray(rot)
  out = np.empty(queries.shape)
  for r in range(m):
    # The smallest ε read: 0 for ε queries (a negative ε is reported as 0),
    # else the smallest queried ε; in node losses, less the PMF's shift.
    least = 0.0 if want_epsilon else float(np.min(queries[r]))
    k0 = _read_range(start[r], h[r], length[r], least - shift[r])
    w_r = _cyclic_slice(w[r], rot[r], k0, length[r])
    if not lower:
      w_p = np.maximum(w_r, 0.0)
      if want_epsilon:
        out[r] = epsilon_on_window(w_p, start[r] + k0, h[r], inf_mass[r], queries[r],
                                   per_node=per_node[r]) + shift[r]
      else:
        out[r] = delta_on_window(w_p, start[r] + k0, h[r], inf_mass[r], queries[r] - shift[r],
                                 per_node=per_node[r])
    elif want_epsilon:
      out[r] = epsilon_on_window(w_r, start[r] + k0, h[r], 0.0, queries[r] + wrap[r], lower=True,
                                 per_node=per_node[r]) + shift[r]
    else:
      out[r] = delta_on_window(w_r, start[r] + k0, h[r], 0.0, queries[r] - shift[r],
                               per_node=-per_node[r]) - wrap[r]
  return out
