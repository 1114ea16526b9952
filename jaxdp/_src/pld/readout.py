"""Host read-out of the composed windows of :mod:`jaxdp.pld`: δ(ε) and ε(δ)
bounds from the pessimistic and optimistic composed PMFs (NumPy, float64).

The FFT composition runs in XLA (:func:`jaxdp._src.pld.compose._compose_group`);
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

from jaxdp._src.pld import tilt as _pld_tilt
from jaxdp._src.pld.general_readout import discounted_suffix_sums

_EPS = float(np.finfo(np.float64).eps)


# Nodes per block of the coarse pass of :func:`epsilon_on_windows`.
_READ_BLOCK = 256


def _read_block(h):
  """Nodes per coarse block at grid interval h: ``_READ_BLOCK``, fewer where
  that many nodes would span more than 16 loss units (:func:`_local_sums`)."""
  return max(1, min(_READ_BLOCK, int(16.0 // h)))


def _suffix_recursion(x, g, n):
  """I_i = x_i + c_r·I_{i+1} (I past the end = 0) along the rows of x (m, N),
  for x >= 0 and c = e^{-g}, g >= 0 (m,); row r's entries at i >= n_r are
  zero (padding).  Each row's method depends on that row alone (so that a
  window reads the same whatever else is read with it: upper bounds alone
  and full evaluations agree bit for bit): where n_r·g_r <= 16 (a DP-SGD
  window: ~80 blocks, 6 loss units) in closed form as in :func:`_local_sums`
  (relative error <= (n + 40) ulps), else with
  :func:`jaxdp.pld_general.discounted_suffix_sums` (a few dozen ulps)."""
  closed = g * n <= 16.0
  # Past a row's n_r the exponent is held (its entries are zero there).
  jg = np.minimum(np.arange(x.shape[-1])[None, :], n[:, None]) * g[:, None]
  out = _revcumsum(x * np.exp(-jg)) * np.exp(np.where(closed[:, None], jg, 0.0))
  for r in np.flatnonzero(~closed):
    out[r, :n[r]] = discounted_suffix_sums(x[r, :n[r]], math.exp(-g[r]))
    out[r, n[r]:] = 0.0
  return out


def _revcumsum(x):
  """Reverse cumulative sums along the last axis."""
  return np.cumsum(x[..., ::-1], axis=-1)[..., ::-1]


def _local_sums(w, h):
  """(D, S) on blocks w (..., b) that span at most 16 loss units (h: (...)
  or a scalar): I_j = Σ_{m>=j} w_m e^{-(m-j)h} = e^{jh} Σ_{m>=j} w_m e^{-mh}
  (one reverse cumulative sum; the powers' arguments jh <= 16 round within
  17 ulps), S_j = e^{-h} I_{j+1} and D_j = Σ_{m>j} w_m (1 - e^{-(m-j)h}) =
  Σ_{i>j} (1 - e^{-h}) I_i (D_j - D_{j+1} = (1 - e^{-h}) I_{j+1}).  Every
  term is non-negative for w >= 0: relative error <= (2b + 40) ulps."""
  h = np.asarray(h, np.float64)[..., None]
  jh = np.arange(w.shape[-1]) * h
  incl = _revcumsum(w * np.exp(-jh)) * np.exp(jh)
  nxt = np.concatenate([incl[..., 1:], np.zeros(incl.shape[:-1] + (1,))], axis=-1)
  return _revcumsum(-np.expm1(-h) * nxt), np.exp(-h) * nxt


def _last_true_index(x):
  """Index of the last True along the last axis (-1 where none is)."""
  n = x.shape[-1]
  return np.where(x.any(axis=-1), n - 1 - np.argmax(x[..., ::-1], axis=-1), -1)


def _coarse(x, h, length):
  """Coarse pass of :func:`epsilon_on_windows`: D and I at the first node of
  every block of x (m, nb, b) (zero at and beyond each row's ``length``).

  Each row's values depend on that row alone, bit for bit (not on the
  other rows or the padding: upper bounds alone and full evaluations read
  different batches and must agree exactly).  Hence H and A by NumPy's
  per-row pairwise sums rather than a matrix product, whose BLAS results
  depend on the operands' shapes, and a per-row choice of method in
  :func:`_suffix_recursion`.

  Returns:
    (D, I): (m, nb) arrays.
  """
  m, _, b = x.shape
  jh = np.arange(b) * -h[:, None, None]
  h_sum = np.sum(x * np.exp(jh), axis=-1)                     # (m, nb)
  a_sum = np.sum(x * -np.expm1(jh), axis=-1)
  i_blk = _suffix_recursion(h_sum, b * h, -(-length // b))
  i_next = np.concatenate([i_blk[:, 1:], np.zeros((m, 1))], axis=1)
  return _revcumsum(a_sum + -np.expm1(-b * h)[:, None] * i_next), i_blk


def epsilon_on_windows(w, length, start, h, inf_mass, targets, lower=False, per_node=0.0):
  """Smallest ε with δ(ε) <= target, for each target of each of m windows
  (exact on the piecewise-exponential δ of the discrete PMFs).

  The largest node k with δ(ε_k) > target is found on the node values
  D_k = Σ_{m>k} w_m (1 - e^{-(m-k)h}) (δ at node k without the infinity
  atom) and S_k = Σ_{m>k} w_m e^{-(m-k)h}; on (ε_k, ε_k + h], δ(ε_k + x) =
  δ(ε_k) - (e^x - 1) S_k, so x = log1p((δ(ε_k) - target) / S_k).  For the upper bound
  the node values are inflated by a relative ``64 · N · eps_machine`` (N the
  window's length; summation round-off: the two passes below stay within
  (3N + 110) ulps for w >= 0) and the result nudged up; for the lower bound
  both go down.

  Two passes, every window at once.  First δ and I_k = Σ_{m>=k} w_m
  e^{-(m-k)h} at the first node k0 of every block of b nodes: with the
  next block at k1, H = Σ_{block} w_m c^{m-k0} and A = Σ_{block} w_m
  (1 - c^{m-k0}) (c = e^{-h}; products with the power vectors, summed
  per block), I_{k0} = H + c^b I_{k1} (:func:`_suffix_recursion` over the
  blocks) and D_{k0} = A + (1 - c^b) I_{k1} + D_{k1}.  Then every node of
  the block where δ crosses each target (:func:`_local_sums`, plus the
  blocks above it: D_k = D_local,k + D_{k1} + (1 - c^{k1-k}) I_{k1},
  S_k = S_local,k + c^{k1-k} I_{k1}).  The exact D is non-increasing, so
  nodes above a block whose first node is at most the target are at most
  the target too (upper bound: D at a node is inflated above the exact
  value, so it bounds every node above it). For the lower bound any node
  whose lowered value exceeds the target gives a valid bound (the exact δ
  there exceeds it too), so a round-off bump of a higher node that the
  coarse pass skips costs at most tightness.  (Before: D and S at every
  node, one window at a time: ~0.6 ms per window of 2·10^4 nodes.)

  Args:
    w: (m, L) composed PMFs, zero at and beyond each row's ``length``.
    length: (m,) nodes of each window.  start: (m,) loss index of w[:, 0].
    h: (m,) grid intervals.  inf_mass: (m,) masses at +∞.
    targets: (m, K) δ's.  lower: read lower bounds (optimistic PMFs).
    per_node: (m,) or scalar round-off allowance per node (>= 0): δ at a
      node is raised (lower: lowered) by it times the number of nodes above
      that node, the nodes whose masses enter its sum.
  Returns:
    (m, K) ε's: +∞ where ``inf_mass`` alone exceeds the target; the first
    node (upper) or -∞ (lower) where δ at the first node is already <= the
    target; NaN where w is not finite (the guards then reject it).
  """
  w = np.asarray(w, np.float64)
  m, n_cols = w.shape
  length, start = (np.asarray(a, np.int64) for a in (length, start))
  h, inf_mass = (np.broadcast_to(np.asarray(a, np.float64), (m,)) for a in (h, inf_mass))
  per_node = np.broadcast_to(np.asarray(per_node, np.float64), (m,))
  targets = np.asarray(targets, np.float64).reshape(m, -1)
  bad = ~np.all(np.isfinite(w), axis=1) | np.isnan(inf_mass)
  if np.any(bad):   # answered NaN below (the guards then reject it)
    w = np.where(bad[:, None], 0.0, w)
  b = min(_read_block(x) for x in h)
  nb = -(-n_cols // b)
  if nb * b != n_cols:
    w = np.concatenate([w, np.zeros((m, nb * b - n_cols))], axis=1)
  x = w.reshape(m, nb, b)
  sign = -1.0 if lower else 1.0
  infl = 64.0 * length * _EPS

  def adjust(d, node, shape):   # the node values' allowances; node: index in w
    col = (m,) + (1,) * (len(shape) - 1)
    above = per_node.reshape(col) * (length.reshape(col) - 1 - node)
    return d * (1.0 + sign * infl.reshape(col)) + sign * above + inf_mass.reshape(col)

  d_raw, i_blk = _coarse(x, h, length)
  first = np.arange(nb) * b
  d_blk = np.where(first < length[:, None], adjust(d_raw, first, (m, nb)), -np.inf)
  kb = _last_true_index(np.swapaxes(d_blk[:, :, None] > targets[:, None, :], 1, 2))   # (m, K)
  # Fine pass: every node of each target's block.
  kbc = np.maximum(kb, 0)
  rows = np.arange(m)[:, None]
  up = np.minimum(kbc + 1, nb - 1)
  has_up = kbc + 1 < nb
  d_up = np.where(has_up, d_raw[rows, up], 0.0)[..., None]
  i_up = np.where(has_up, i_blk[rows, up], 0.0)[..., None]
  d_loc, s_loc = _local_sums(x[rows, kbc], h[:, None])                # (m, K, b)
  gap = (b - np.arange(b)) * h[:, None, None]                         # k1 - k, in loss
  node = kbc[..., None] * b + np.arange(b)
  d = adjust(d_loc + d_up + -np.expm1(-gap) * i_up, node, node.shape)
  s = s_loc + np.exp(-gap) * i_up
  j = np.maximum(_last_true_index((d > targets[..., None]) & (node < length[:, None, None])), 0)
  k = np.where(kb >= 0, kbc * b + j, -1)
  dk = np.take_along_axis(d, j[..., None], axis=-1)[..., 0]
  sk = np.take_along_axis(s, j[..., None], axis=-1)[..., 0]
  hh = h[:, None]
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = (dk - targets) / np.where(sk > 0, sk, 1.0)
    x_in = np.where(sk > 0, np.log1p(np.maximum(ratio, 0.0)), hh)
  eps = (start[:, None] + np.maximum(k, 0)) * hh + np.clip(x_in, 0.0, hh)
  eps = eps + sign * 4.0 * _EPS * np.maximum(np.abs(eps), 1.0)
  eps = np.where(k < 0, -np.inf if lower else (start * h)[:, None], eps)
  eps = np.where(inf_mass[:, None] > targets, np.inf, eps)
  return np.where(bad[:, None], np.nan, eps)


def epsilon_on_window(w, start, h, inf_mass, targets, lower=False, per_node=0.0):
  """:func:`epsilon_on_windows` for one window ``w`` (N,) and targets (K,)."""
  w = np.asarray(w, np.float64)
  return epsilon_on_windows(w[None], [w.shape[-1]], [start], [h], [inf_mass],
                            np.asarray(targets, np.float64)[None], lower, per_node)[0]


def delta_on_window(w, start, h, inf_mass, eps, per_node=0.0, want_raw=False):
  """δ(ε) = Σ_{ℓ_k > ε} (w_k (1 - e^{ε - ℓ_k}) + per_node) + inf_mass for
  each ε in ``eps`` (direct sums over the window: no cancellation, since
  every term is a product of w_k with a factor in [0, 1)); ``per_node``: the
  round-off allowance of each node that enters the sum (negative for a lower
  bound).  The node losses ℓ_k = (start + k)·h are non-decreasing (rounding
  is monotone), so the nodes above ε are a suffix of the window, found by
  binary search and summed as a view (the same terms in the same order as
  a mask selects them).  With ``want_raw`` also the same δ's without the
  allowance (``per_node`` = 0), from the same sums: ``(delta, raw)``."""
  loss = (start + np.arange(w.shape[-1])) * h
  eps = np.asarray(eps, np.float64)
  first = np.searchsorted(loss, eps.reshape(-1), side="right")
  out, raw = np.empty(eps.shape), np.empty(eps.shape)
  n = w.shape[-1]
  for i, (e, j) in enumerate(zip(eps.reshape(-1), first)):
    total = np.sum(w[j:] * -np.expm1(e - loss[j:]))
    out.flat[i] = total + per_node * (n - j) + inf_mass
    raw.flat[i] = total + inf_mass
  return (out, raw) if want_raw else out


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


def _tilted_values(w_r, node_err, first_node, params, lower):
  """Untilted node values of a tilted composition's nodes (:mod:`jaxdp._src.pld.tilt`),
  with the round-off bound folded in: upper min((max(ŵ, 0) + B)·e^{E}, 1)
  (a mass is at most 1), lower max(ŵ - B, 0)·e^{E} with the nodes below the
  kept index dropped. Returns (values, extra wrap to subtract)."""
  log_d, log_d_err, c_all, g, above, keep = params
  nodes = first_node + np.arange(w_r.shape[-1], dtype=np.int64)
  f = _pld_tilt.node_factors(log_d, log_d_err, c_all, g, nodes, upper=not lower)
  with np.errstate(invalid="ignore", over="ignore"):
    if not lower:
      return np.minimum((np.maximum(w_r, 0.0) + node_err) * f, 1.0), 0.0
    vals = np.maximum(w_r - node_err, 0.0) * f
  vals = np.where(nodes >= keep, np.nan_to_num(vals, nan=0.0, posinf=0.0), 0.0)
  return vals, above


def answer(w, node_err, start, h, inf_mass, queries, wrap, shift, length, want_epsilon,
           lower=False, rot=None, rows=None, tilt=None, want_raw=False):
  """Bounds of a group's queries from composed windows of one kind.

  Args:
    w: (M, N) composed windows (NumPy; the m read are ``rows``), all
      pessimistic (upper bounds) or all optimistic (``lower``);
      node_err: (m,) the composition's proven bound on every composed
      entry's round-off (:func:`jaxdp._src.pld.compose._compose_group`).
    start: (m,) window starts.  h, inf_mass: (m,).  queries: (m, K).
    wrap: (m,) the Chernoff mass that may have wrapped from below the window
      to its top (the tail budget per phase; lower bounds).  shift: (m,) loss
      shifts of host-discretised phases (:mod:`jaxdp._src.pld.extra`): the
      pessimistic composed losses may be up to the shift above their nodes,
      the optimistic ones are at least the shift above theirs.
    length: (m,) nodes of each certified window (<= N).
    rot: (m,) rotation of each cyclic row: window node j is ``w[r, (rot_r + j)
      mod N]`` (None: 0).
    rows: (m,) the rows of ``w`` to read (None: all, in order): ``w`` may
      hold more rows than are read, not copied.
    want_epsilon: queries are target δ's (else ε's).
    lower: read lower bounds from optimistic windows (else upper bounds
      from pessimistic ones; ``inf_mass`` applies to those).
    tilt: None, or (m,) per row None or the tilt parameters of a tilted
      composition (:func:`jaxdp._src.pld.run._tilt_row`): its nodes are
      untilted with the round-off bound folded in (:func:`_tilted_values`).
    want_raw: also return the upper read without the round-off bound (the
      second pass's tilt centre and trigger) where that bound may move the
      answer (NaN elsewhere).
  Returns:
    (m, K) NumPy array (and the raw read, ``want_raw``).

  Only the nodes a query can read are summed (:func:`_read_range`): up to
  the certified window's top, and from the node loss that reports ε = 0 (ε
  queries: a negative ε is reported as 0) or the smallest queried ε (δ
  queries), each less the PMF's loss shift. Dropping nodes only lowers
  both δ's: the pessimistic one loses nothing that is not booked at +∞, and
  a lower bound may always drop mass.

  Round-off, per node of the window: ``node_err``, the composition's proven
  bound on |ŵ_j - w_j| (docs/mathematics.md, "Round-off of the fast
  kernel"; clipping a negative entry to 0 only moves it closer to the exact
  w_j >= 0). δ at ε sums the nodes above ε only, so it carries the bound of
  those nodes: added to the pessimistic δ, subtracted (with ``wrap``) from
  the optimistic one. (Booking N nodes' allowance at every ε made the upper
  ε +∞ at δ <= ~1e-10 after ~10⁵ steps.)
  """
  m = len(start)
  node_b = np.broadcast_to(np.asarray(node_err, np.float64), (m,))
  tilt = [None] * m if tilt is None else list(tilt)
  # Tilted rows fold the bound into their untilted node values.
  per_node = np.where([t is not None for t in tilt], 0.0, node_b)
  extra_wrap = np.zeros(m)
  wrap = np.asarray(wrap, np.float64)

  def values(r, w_r, first_node):
    if tilt[r] is None:
      return w_r
    vals, extra_wrap[r] = _tilted_values(w_r, node_b[r], first_node, tilt[r], lower)
    return vals
  rot = np.zeros(m, np.int64) if rot is None else np.asarray(rot)
  rows = np.arange(m) if rows is None else np.asarray(rows)
  start, length = np.asarray(start, np.int64), np.asarray(length, np.int64)
  # The smallest ε read: 0 for ε queries (a negative ε is reported as 0),
  # else the smallest queried ε; in node losses, less the PMF's shift.
  least = np.zeros(m) if want_epsilon else np.min(queries, axis=1)
  k0 = np.array([_read_range(start[r], h[r], length[r], least[r] - shift[r]) for r in range(m)],
                np.int64)
  out = np.empty(queries.shape)
  raw = np.full(queries.shape, np.nan)   # the raw read, where computed
  if want_epsilon:
    # All windows of one coarse block length at once (padded with zeros).
    blocks = np.array([_read_block(x) for x in h])
    for b in np.unique(blocks):
      sel = np.flatnonzero(blocks == b)
      n_read = length[sel] - k0[sel]
      win = np.zeros((len(sel), -(-int(n_read.max()) // b) * b))
      for i, r in enumerate(sel):
        win[i, :n_read[i]] = values(r, _cyclic_slice(w[rows[r]], rot[r], k0[r], length[r]),
                                    start[r] + k0[r])
      if not lower:
        np.maximum(win, 0.0, out=win)
      args = (win, n_read, start[sel] + k0[sel], h[sel], 0.0 if lower else inf_mass[sel],
              queries[sel] + ((wrap[sel] + extra_wrap[sel])[:, None] if lower else 0.0))
      out[sel] = epsilon_on_windows(*args, lower=lower, per_node=per_node[sel]) + shift[sel, None]
      if want_raw:
        # Only where the bound may matter: the nodes above the answer carry
        # more than 1e-4 of the target δ (or the answer is +inf).
        node = np.floor((out[sel] - shift[sel, None]) / h[sel, None]) - (start[sel] + k0[sel])[:, None]
        above = per_node[sel, None] * np.clip(n_read[:, None] - node, 0, n_read[:, None])
        need = np.any((above > 1e-4 * queries[sel]) | ~np.isfinite(out[sel]), axis=1)
        if np.any(need):
          sub = (a[need] if np.ndim(a) else a for a in args)
          raw[sel[need]] = epsilon_on_windows(*sub, lower=lower, per_node=0.0) + shift[sel[need], None]
    return (out, raw) if want_raw else out
  for r in range(m):
    w_r = values(r, _cyclic_slice(w[rows[r]], rot[r], k0[r], length[r]), start[r] + k0[r])
    if not lower:
      args = (np.maximum(w_r, 0.0), start[r] + k0[r], h[r], inf_mass[r], queries[r] - shift[r])
      out[r], raw_r = delta_on_window(*args, per_node=per_node[r], want_raw=True)
      if want_raw and per_node[r] * (length[r] - k0[r]) > 1e-4 * np.min(out[r]):
        raw[r] = raw_r
    else:
      out[r] = delta_on_window(w_r, start[r] + k0[r], h[r], 0.0, queries[r] - shift[r],
                               per_node=-per_node[r]) - wrap[r] - extra_wrap[r]
  return (out, raw) if want_raw else out
