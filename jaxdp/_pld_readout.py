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


# Nodes per block of the coarse pass of :func:`epsilon_on_window` (at most
# 16 loss units: see :func:`_local_sums`).
_READ_BLOCK = 256


def _suffix_recursion(x, c):
  """I_i = x_i + c·I_{i+1} (I past the end = 0) for x >= 0, 0 <= c <= 1:
  sequentially in Python floats for short x (relative error <= 2·len(x)
  ulps; NumPy's calls cost more there), else
  :func:`jaxdp.pld_general.discounted_suffix_sums`."""
  if len(x) > 1024:
    return discounted_suffix_sums(x, c)
  out = x.tolist()
  acc = 0.0
  for i in range(len(out) - 1, -1, -1):
    acc = out[i] + c * acc
    out[i] = acc
  return np.array(out)


def _local_sums(w, h):
  """(D, S, I) on a block ``w`` spanning at most 16 loss units:
  I_j = Σ_{m>=j} w_m e^{-(m-j)h} = e^{jh} Σ_{m>=j} w_m e^{-mh} (one reverse
  cumulative sum; the powers' arguments jh <= 16 round within 17 ulps),
  S_j = e^{-h} I_{j+1} and D_j = Σ_{m>j} w_m (1 - e^{-(m-j)h}) =
  Σ_{i>j} (1 - e^{-h}) I_i (D_j - D_{j+1} = (1 - e^{-h}) I_{j+1}).  Every
  term is non-negative for w >= 0: relative error <= (2·len(w) + 40) ulps."""
  jh = np.arange(len(w)) * h
  incl = np.cumsum((w * np.exp(-jh))[::-1])[::-1] * np.exp(jh)
  nxt = _next(incl)
  d = np.cumsum((-math.expm1(-h) * nxt)[::-1])[::-1]
  return d, math.exp(-h) * nxt


def _block_values(w, h, b):
  """Coarse pass of :func:`epsilon_on_window`: D and I at the first node of
  every block of ``b`` nodes of ``w`` (the last one may be shorter).

  With c = e^{-h}, a block starting at node k0 and the next at k1:
  H = Σ_{block} w_m c^{m-k0} and A = Σ_{block} w_m (1 - c^{m-k0}) (one
  matrix product with the two power vectors), then I_{k0} = H + c^{k1-k0}
  I_{k1} (:func:`_suffix_recursion` over the blocks) and
  D_{k0} = A + (1 - c^{k1-k0}) I_{k1} + D_{k1}, a reverse cumulative sum.
  For w >= 0 every term is non-negative: relative error <= (b + 3·nb + 50)
  ulps (b·h <= 16 keeps the powers' argument rounding within 17 ulps).

  Returns:
    (D, I): (nb,) arrays, D_k = Σ_{m>k} w_m (1 - c^{m-k}) and
    I_k = Σ_{m>=k} w_m c^{m-k} at the blocks' first nodes.
  """
  n = w.shape[-1]
  nb_full, rest = divmod(n, b)
  powers = np.empty((b, 2))                                     # c^j, 1 - c^j
  jh = np.arange(b) * -h
  np.exp(jh, out=powers[:, 0])
  np.expm1(jh, out=powers[:, 1])
  powers[:, 1] *= -1.0
  parts = [w[:nb_full * b].reshape(nb_full, b) @ powers]
  if rest:
    parts.append((w[nb_full * b:] @ powers[:rest])[None])
  ha = np.concatenate(parts)                                    # (nb, 2): H, A
  i_blk = _suffix_recursion(ha[:, 0], math.exp(-b * h))
  tau = ha[:, 1] + -math.expm1(-b * h) * _next(i_blk)
  return np.cumsum(tau[::-1])[::-1], i_blk


def epsilon_on_window(w, start, h, inf_mass, targets, lower=False, per_node=0.0):
  """Smallest ε with δ(ε) <= target, for each target (exact on the
  piecewise-exponential δ of the discrete PMF).

  The largest node k with δ(ε_k) > target is found on the node values D_k,
  S_k (as in :func:`grid_deltas`); on (ε_k, ε_k + h], δ(ε_k + x) = δ(ε_k) -
  (e^x - 1) S_k, so x = log1p((δ(ε_k) - target) / S_k).  For the upper bound
  the node values are inflated by a relative ``64 · N · eps_machine``
  (summation round-off: the two passes below stay within (3N + 110) ulps
  for w >= 0) and the result nudged up; for the lower bound both go down.

  Two passes: δ at the first node of every block of ``_READ_BLOCK`` nodes
  (:func:`_block_values`: one matrix product over the window, then work on
  the blocks alone), then every node of the block where δ crosses the
  target (:func:`_local_sums` on that block, plus the blocks above it:
  D_k = D_local,k + D_{k1} + (1 - c^{k1-k}) I_{k1}, S_k = S_local,k +
  c^{k1-k} I_{k1}).  The exact D is non-increasing, so nodes above a block
  whose first node is at most the target are at most the target too (upper
  bound: D at a node is inflated above the exact value, so it bounds every
  node above it). For the lower bound any node whose lowered value exceeds
  the target gives a valid bound (the exact δ there exceeds it too), so a
  round-off bump of a higher node that the coarse pass skips costs at most
  tightness.  (Before: D and S at every node, ~0.6 ms per window of 2·10^4
  nodes against ~0.2 ms now, most of the host read-out's time.)

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
  w = np.asarray(w, np.float64)
  size = w.shape[-1]
  if not (np.all(np.isfinite(w)) and not np.isnan(inf_mass)):
    return np.full(targets.shape, np.nan)
  infl = 64.0 * size * _EPS

  def adjust(d, node):   # the node values' allowances (node: index in w)
    above = per_node * (size - 1 - node).astype(np.float64)
    d = d * (1.0 - infl) - above if lower else d * (1.0 + infl) + above
    return d + inf_mass

  b = max(1, min(_READ_BLOCK, int(16.0 // h)))
  d_raw, i_blk = _block_values(w, h, b)
  first = np.arange(len(d_raw)) * b
  d_blk = adjust(d_raw, first)
  k = np.full(targets.shape, -1, np.int64)
  dk = np.zeros(targets.shape)
  sk = np.zeros(targets.shape)
  # The last block whose first node is above each target (-1: none).
  kb = np.array([np.max(np.flatnonzero(d_blk > t), initial=-1) for t in targets], np.int64)
  for blk in np.unique(kb[kb >= 0]):
    k0 = int(first[blk])
    k1 = min(k0 + b, size)
    d_up, i_up = (d_raw[blk + 1], i_blk[blk + 1]) if blk + 1 < len(d_raw) else (0.0, 0.0)
    d_loc, s_loc = _local_sums(w[k0:k1], h)
    gap = (k1 - np.arange(k0, k1)) * h
    d = adjust(d_loc + d_up + -np.expm1(-gap) * i_up, np.arange(k0, k1))
    s = s_loc + np.exp(-gap) * i_up
    for i in np.flatnonzero(kb == blk):
      hit = np.flatnonzero(d > targets[i])
      j = int(hit[-1]) if len(hit) else 0
      k[i], dk[i], sk[i] = k0 + j, d[j], s[j]
  kk = np.maximum(k, 0)
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
