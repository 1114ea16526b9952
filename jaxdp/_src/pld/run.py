"""Host orchestration of :mod:`jaxdp.pld`'s batched pipeline: one-step PMFs
of every configuration and direction in packed chunks (:mod:`jaxdp._src.pld.step`),
composition windows grouped by FFT length (:mod:`jaxdp._src.pld.compose`), host
read-out of the composed windows (:mod:`jaxdp._src.pld.readout`), and the memory
caps.  The mathematics is in the docstring of :mod:`jaxdp.pld`.
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp._src.pld import extra as _pld_extra
from jaxdp._src.pld import readout as _pld_readout
from jaxdp._src.pld import tilt as _pld_tilt
from jaxdp._src.pld.compose import _compose_group, power_bits
from jaxdp._src.pld.step import (_MAX_ELEMS, _MAX_FFT, _MAX_STEP_GRID, _TAIL, _grid_range,
                                 _stage1)
from jaxdp._src.pld.step_layout import _chunks, _pack, _pow2


def _fft_size(n, least=2 ** 12):
  """Smallest power of two >= max(n, least): the FFT length of a window."""
  return _pow2(max(int(n), least))


# Rows per composition call, a function of the FFT length alone: short
# windows (<= _BATCHED_MAX points) in batches of _ROWS (the last one padded
# with copies: cheap at that length), longer ones one configuration per call.
# One compiled program per FFT length, whatever the number of configurations
# sharing it, so new configurations and calibration rounds reuse programs.
_ROWS = 8
_BATCHED_MAX = 2 ** 15


def _row_batches(idx, cap, size):
  """Index batches of one FFT length ``size``: (padded indices, real count)
  pairs (``cap``: the memory cap in configuration slots, two windows each)."""
  rows = 2 * (1 if size > _BATCHED_MAX else max(1, min(_ROWS, _pow2(cap + 1, least=1) // 2)))
  out = []
  for c0 in range(0, len(idx), rows):
    sel = idx[c0:c0 + rows]
    out.append((np.concatenate([sel, np.full(rows - len(sel), sel[0])]), len(sel)))
  return out


_U = 2.0 ** -53   # unit round-off of float64

# The second pass's cycle is long enough that the mass wrapping from above
# onto the read nodes, amplified by the tilt, is at most this fraction of
# the answer's δ (:func:`_tilts`).
_TILT_WRAP = 1e-6

# Truncation budget per tail and phase, as a fraction of the smallest target δ
# of the configuration (ε queries); δ queries keep _TAIL.
TAIL_FRACTION = 1e-4


def _tail_budget(queries, want_epsilon, n_ph):
  """(U,) truncated mass allowed per tail and phase of each configuration."""
  if not want_epsilon:
    return np.full(len(queries), _TAIL)
  least = np.min(np.asarray(queries, np.float64), axis=1)
  return np.maximum(_TAIL, TAIL_FRACTION * least / n_ph)


def _run(q, sigma, steps, h, queries, *, want_epsilon, extra=None, want_lower=True,
         while_waiting=None):
  """Composes U configurations (both directions) and answers (U, K) queries.

  Four stages: the one-step PMFs and Chernoff edges of every phase and
  direction (:func:`_one_step_rows`, XLA), the windows of each configuration
  and direction (:func:`_windows`, host), the FFT composition of the windows
  grouped by length (:func:`_compose_windows`, XLA), and the host read-out
  (:func:`_read_out`).

  Args:
    q, sigma, steps: (U, P) phases of each configuration (steps 0 = padding);
      (U,) is read as one phase.
    h: (U,) grid interval.  queries: (U, K) ε's or target δ's.
    extra: None, or U lists of (``jaxdp.pairs.Mechanism``, count): other
      events of each configuration, discretised on its grid on the host
      (:mod:`jaxdp._src.pld.extra`) and composed as more phases of the kernel.
    want_lower: False for upper bounds alone (``lower`` is then -inf): the
      optimistic PMFs are neither built nor composed; the pessimistic ones
      compose exactly as with lower bounds (same windows, same programs).
    while_waiting: None, or a callable run on the host once the one-step
      kernels are dispatched (the guards' one-step values: the host is idle
      until they finish).
  Returns:
    (upper, lower, grow): (U, K) arrays, for want_epsilon the ε bounds for
    target δ's, otherwise the δ bounds for given ε's; and (U,) factors by
    which h must grow for configurations whose one-step grid or composed
    window would exceed the memory caps (``_MAX_STEP_GRID``, ``_MAX_FFT``).
    Those are not composed (their bounds stay -inf) and no memory is
    allocated for them: the window is known from the Chernoff edges before
    the FFT buffer exists.
  """
  q, sigma, steps = (np.asarray(a, np.float64).reshape(len(h), -1) for a in (q, sigma, steps))
  u_count, n_ph = q.shape
  extra = [[] for _ in range(u_count)] if extra is None else [list(e) for e in extra]
  n_ex = max((len(e) for e in extra), default=0)
  tail = _tail_budget(queries, want_epsilon, n_ph)
  rows, grow = _one_step_rows(q, sigma, steps, h, tail, want_lower)
  if while_waiting is not None:
    while_waiting()
  # Other events on each configuration's grid (jaxdp._src.pld.extra), on the
  # host while the kernels above run.
  caches = [{} for _ in range(u_count)]
  on2 = ([None] * u_count, [None] * u_count)
  for u in np.nonzero(grow <= 1.0)[0] if n_ex else ():
    if extra[u]:
      for d, remove in enumerate((True, False)):
        on2[d][u] = _pld_extra.on_grid(extra[u], float(h[u]), remove, caches[u])
  rows.fetch()
  directions, grow = _windows(rows, on2, extra, steps, tail, n_ex, grow)
  pending = _compose_windows(directions, steps, n_ex, grow, want_lower)
  upper_d, lower, centre, scale, hard = _read_out(pending, directions, h, queries, want_epsilon)
  tilt = _tilts(directions, steps, h, queries, want_epsilon, lower, centre, scale,
                hard & (grow <= 1.0), want_lower)
  if tilt:
    pending = _compose_windows(directions, steps, n_ex, grow, want_lower, tilt=tilt)
    up2_d, lo2, _, _, _ = _read_out(pending, directions, h, queries, want_epsilon, tilt=tilt)
    # Each direction's two upper bounds are certified: the smaller one
    # holds; the configuration's is the worse direction's.
    upper_d = np.minimum(upper_d, up2_d)
    lower = np.maximum(lower, lo2)
  upper = np.max(upper_d, axis=0)
  over = grow > 1.0
  upper[over] = np.nan
  lower[over] = np.nan
  return upper, lower, grow


class _StepRows:
  """One-step PMFs of every phase and direction of a batch (rows [0, R)
  remove, [R, 2R) add, R = U·P), dispatched to XLA in packed chunks;
  :meth:`fetch` brings them to the host.

  Attributes (after fetch): pmfs: (pessimistic, optimistic) lists of 2R
    arrays (rows sharing a PMF share the array); inf: (2R,) +∞ masses;
    edges: (4, 2R) windows a_p, b_p, a_o, b_o; n, i_lo: (2R,) one-step grid
    lengths and starts.
  """

  def __init__(self, n, i_lo, staged):
    self.n, self.i_lo, self._staged = n, i_lo, staged
    self.pmfs = ([np.zeros(1)] * len(n), [np.zeros(1)] * len(n))
    self.inf = np.zeros(len(n))
    self.edges = np.zeros((4, len(n)))

  def fetch(self):
    for sel, members, start, out in self._staged:
      pp, inf_p, po = (np.asarray(o) for o in out[:3])
      win = np.array([[np.asarray(x) for x in w] for w in out[3:]])   # (4, L, rows)
      for r, k in enumerate(sel):
        p_k = pp[start[r]:start[r] + self.n[k]], po[start[r]:start[r] + self.n[k]]
        for layer, row in enumerate(members[r]):
          self.pmfs[0][row], self.pmfs[1][row] = p_k
          self.inf[row] = inf_p[r]
          self.edges[:, row] = win[:, layer, r]
    self._staged = []


def _one_step_rows(q, sigma, steps, h, tail, want_lower):
  """Stage 1: dispatches the one-step kernels of every phase and direction.

  Rows whose kernel inputs are equal (q, σ, h, direction and grid range:
  configurations that differ in T alone, within one bucket of
  :func:`jaxdp._src.pld.step._grid_steps`) share one PMF, built once; each row
  still gets the Chernoff windows of its own step count and tail budget.

  Returns (:class:`_StepRows`, grow): grow (U,) > 1 flags configurations
  whose one-step grid alone exceeds ``_MAX_STEP_GRID`` (not built).
  """
  u_count, n_ph = q.shape
  hh_rows = np.repeat(h, n_ph)
  qf, sf, tf = q.ravel(), sigma.ravel(), steps.ravel()
  live = tf > 0
  tail_rows = np.repeat(tail, n_ph)
  # One-step grids of both directions, packed into the same kernel calls
  # (fewer, fuller calls).
  ranges = [_grid_range(qf, sf, tf, hh_rows, remove, tail_rows) for remove in (True, False)]
  i_lo2 = np.concatenate([np.where(live, lo_, 0) for lo_, _ in ranges])
  n2 = np.concatenate([np.where(live, hi_ - lo_ + 1, 1) for lo_, hi_ in ranges])
  live2 = np.tile(live, 2)
  grow = np.where(live2, n2 / _MAX_STEP_GRID, 0.0).reshape(2, u_count, n_ph).max((0, 2))
  grow = np.maximum(grow, 1.0)
  live_r = live2 & np.tile(np.repeat(grow <= 1.0, n_ph), 2)
  rem2 = np.repeat([True, False], len(qf))
  q2, s2, h2, t2, li2 = (np.tile(x, 2) for x in (qf, sf, hh_rows, tf, -np.log(tail_rows)))
  idx = np.nonzero(live_r)[0]
  keys = np.stack([q2, s2, h2, rem2, i_lo2, n2], axis=1)[idx]
  _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
  shared = [[] for _ in first]
  for i, u in zip(idx, inverse.reshape(-1)):
    shared[u].append(i)
  pmf_rows = idx[first]
  staged = []
  for part, nb_pad in _chunks(n2[pmf_rows]):
    sel = pmf_rows[np.asarray(part)]
    members = [shared[u] for u in np.asarray(part)]
    rob, j0, start, n_rows = _pack(n2[sel], nb_pad)
    r_pad, m = len(start), len(sel)
    # Layer l holds each PMF's l-th row (its first where it has fewer).
    layers = np.array([[g[min(l, len(g) - 1)] for g in members]
                       for l in range(max(len(g) for g in members))])

    def pad(x, fill, rows=sel, r_pad=r_pad, m=m):
      return np.concatenate([x[rows], np.full(r_pad - m, fill, x.dtype)], axis=-1)

    staged.append((sel, members, start,
                   _stage1(pad(q2, 0.5), pad(s2, 1.0), pad(h2, 1.0), pad(i_lo2, 0),
                           np.stack([pad(t2, 1.0, rows=r) for r in layers]),
                           np.stack([pad(li2, 1.0, rows=r) for r in layers]),
                           rob, j0, start, n_rows, remove=pad(rem2, True),
                           want_lower=want_lower)))
  return _StepRows(n2, i_lo2, staged), grow


def _windows(rows, on2, extra, steps, tail, n_ex, grow):
  """Stage 2: the composed windows of each configuration and direction.

  Returns (directions, grow): one dict per direction (PMFs, windows [a, b]
  of each kind (pessimistic, optimistic), +∞ and wrapped masses, the other
  events' shifts and widths, FFT sizes), and grow updated for windows
  longer than ``_MAX_FFT``.
  """
  u_count, n_ph = steps.shape
  half = len(rows.n) // 2
  directions = []
  for d in range(2):
    part = slice(d * half, (d + 1) * half)
    n, i_lo, on = rows.n[part], rows.i_lo[part], on2[d]
    # Union bound over phases: the window of the sum is the sum of windows.
    a_p, b_p, a_o, b_o = rows.edges[:, part].reshape(4, u_count, n_ph).sum(2)
    log_keep = (steps * np.log1p(-rows.inf[part].reshape(u_count, n_ph))).sum(1)
    # The other events' windows and +inf masses join the Gaussian phases'
    # (their window, one for both PMFs, adds to each).
    a_g, b_g = a_p.copy(), b_p.copy()
    inf_cfg, shift, ex_width = _pld_extra.join(on, extra, grow, a_p, b_p, log_keep)
    a_o += a_p - a_g
    b_o += b_p - b_g
    # The truncation budget of each tail: the upper one is booked at +inf,
    # the lower one may wrap to the top.
    wrap_cfg = tail * n_ph + _TAIL * n_ex
    inf_cfg += wrap_cfg
    # Window lengths: powers of two only. Each window depends on its
    # configuration alone (its answer does not depend on what else is in the
    # call), and few distinct lengths means few compiled programs (f·2^k
    # lengths, f in {1,3,5,7,9}, wasted less FFT work but compiled up to five
    # programs per octave).
    win_a, win_b = np.stack([a_p, a_o]), np.stack([b_p, b_o])   # (kind, U)
    size = np.vectorize(_fft_size)(win_b - win_a + 1)
    grow = np.maximum(grow, np.where(grow <= 1.0, size.max(0) / _MAX_FFT, 0.0))
    directions.append(dict(pmfs=(rows.pmfs[0][part], rows.pmfs[1][part]), n=n,
                           n_cfg=n.reshape(u_count, n_ph), lo_cfg=i_lo.reshape(u_count, n_ph),
                           a=win_a, b=win_b, inf_cfg=inf_cfg, shift=shift, ex_width=ex_width,
                           wrap_cfg=wrap_cfg, on=on, size=size))
  return directions, grow


def _tilts(directions, steps, h, queries, want_epsilon, lower, centre, scale, hard, want_lower):
  """The second pass's tilts (:mod:`jaxdp._src.pld.tilt`): for each configuration
  whose first-pass upper bound is dominated by the round-off bound
  (``hard``), {(direction, configuration, kind): (g, first, size)} with g the tilt
  centring its composition at ``centre`` (the first pass's upper read
  without the round-off bound, or the largest queried ε) and, for the
  optimistic windows, ``first``: the loss index below which the lower read
  drops its nodes (at or below the first pass's certified lower ε, or the
  smallest queried ε; dropping mass keeps a lower bound), and ``size`` the
  cycle length of the tilted composition."""
  out = {}
  n_ph = steps.shape[1]
  for u in np.flatnonzero(hard):
    if not np.isfinite(centre[u]):
      continue
    floor = (np.min(queries[u]) if not want_epsilon else
             np.min(np.where(np.isfinite(lower[u]), lower[u], np.inf)))
    rows = [u * n_ph + ph for ph in range(n_ph)]
    for d, dr in enumerate(directions):
      for c in ((0, 1) if want_lower else (0,)):
        phases = _pld_tilt.Phases([dr["pmfs"][c][r] for r in rows], dr["lo_cfg"][u], steps[u])
        g = _pld_tilt.saddle(phases, centre[u] / h[u])
        if g <= 0:
          continue
        first = None
        if c == 1:
          if not np.isfinite(floor):
            continue
          first = int(math.floor(floor / h[u])) - 2
        # The cycle must hold the tilted composition, or its upper tail
        # wraps onto the read nodes amplified by e^{g·n}: the smallest
        # length whose Chernoff bound on that mass is below 1e-6 of the
        # answer's scale.
        edge = int(math.floor(min(centre[u], floor if c == 1 else np.inf) / h[u])) - 2
        size = int(dr["size"][c, u])
        while size <= _MAX_FFT and _pld_tilt.above_wrap(
            phases, g, edge, size) > _TILT_WRAP * scale[u]:
          size *= 2
        if size > _MAX_FFT:
          continue
        out[(d, u, c)] = (g, first, size)
  return out


def _compose_windows(directions, steps, n_ex, grow, want_lower, tilt=None):
  """Stage 3: dispatches the compositions, windows grouped by FFT length.

  Composition calls group the windows of both directions and both kinds
  (pessimistic, optimistic) by FFT length, each window a row of its own:
  two rows per configuration's slot in a call, the same programs whether
  lower bounds are wanted or not. (A call per direction and length, with a
  configuration's two windows side by side, left more padded rows: 83 row
  slots for the 64 windows of benchmarks/pld.py's batch.)

  With ``tilt`` ({(direction, configuration, kind): (g, first, size)},
  from :func:`_tilts`), only those windows are composed, each on a cycle of
  that size with its phases tilted by g (:mod:`jaxdp._src.pld.tilt`).

  Returns [(cells, composed, rot, tilted)]: the (direction, configuration,
  kind) of each real row, the call's outputs (XLA arrays, still computing),
  each row's rotation (:func:`jaxdp._src.pld.compose._compose_group`) and each
  row's tilt parameters (None where untilted).
  """
  u_count, n_ph = steps.shape
  kinds = (0, 1) if want_lower else (0,)
  items = [(d, u, c) for d in range(len(directions)) for c in kinds for u in range(u_count)
           if grow[u] <= 1.0 and (tilt is None or (d, u, c) in tilt)]
  item_size = np.array([directions[d]["size"][c, u] if tilt is None else tilt[(d, u, c)][2]
                        for d, u, c in items], np.int64)
  pending = []
  for sz in np.unique(item_size):
    group = [items[i] for i in np.nonzero(item_size == sz)[0]]
    chunk = max(1, _MAX_ELEMS // (int(sz) * (n_ph + n_ex)))
    for sel, m in _row_batches(np.arange(len(group)), chunk, int(sz)):
      cells = [group[i] for i in sel]
      # PMFs padded to the window (or, rarely, to a one-step grid longer
      # than it, then folded onto the window's cycle on the host).
      width = max(int(sz), _pow2(max(max(int(directions[d]["n_cfg"][u].max()),
                                         int(directions[d]["ex_width"][u])) for d, u, _ in cells)))
      # Every entry is written once below (np.zeros then a copy wrote the
      # PMF entries twice: ~1/3 of this loop's time).
      pp = np.empty((len(cells), n_ph + n_ex, width))
      pp[:, n_ph:] = 0.0
      scratch = np.zeros((n_ph + n_ex, width))   # the other kind's rows of other events
      lo_all = np.zeros((len(cells), n_ph + n_ex), np.int64)
      st_int = np.zeros((len(cells), n_ph + n_ex), np.int64)   # count 0: padding
      win_start = np.zeros(len(cells), np.int64)
      tilted = [None] * len(cells)
      for r, (d, k, c) in enumerate(cells):
        dr = directions[d]
        lo_all[r, :n_ph] = dr["lo_cfg"][k]
        st_int[r, :n_ph] = steps[k]
        win_start[r] = dr["a"][c, k]
        for ph in range(n_ph):
          row = k * n_ph + ph
          pp[r, ph, :dr["n"][row]] = dr["pmfs"][c][row]
          pp[r, ph, dr["n"][row]:] = 0.0
        if dr["on"][k]:
          rows2 = (pp[r], scratch) if c == 0 else (scratch, pp[r])
          _pld_extra.place(dr["on"][k], n_ph, *rows2, lo_all[r], st_int[r])
        if tilt is not None and r < m:
          tilted[r] = _tilt_row(pp[r], lo_all[r], st_int[r], tilt[(d, k, c)])
      # Host folding: sums of width // sz entries >= 0, gamma_{r-1}(u) relatively.
      r_host = max(width // int(sz), 1) - 1
      input_rel = np.full(len(cells), r_host * _U / (1.0 - r_host * _U))
      if tilt is not None:
        input_rel = input_rel + _pld_tilt.INPUT_REL * (1.0 + input_rel)
      if width > sz:   # fold onto the cycle here: one program per (rows, size)
        pp = pp.reshape(len(cells), n_ph + n_ex, width // int(sz), int(sz)).sum(axis=2)
      composed = _compose_group(pp, st_int, input_rel, size=int(sz), bits=power_bits(st_int))
      # Window node j of row r sits at entry (rot_r + j) mod size.
      rot = np.mod(win_start - np.sum(st_int * lo_all, axis=1), int(sz))
      pending.append((cells[:m], composed, rot, tilted[:m]))
  return pending


def _tilt_row(row, lo, st, tilt):
  """Tilts one composition row in place; returns its read-out parameters
  (log_d, log_d_err, c_all, g, above-wrap mass, first node index kept)."""
  g, first, size = tilt
  above = 0.0
  if first is not None:   # optimistic: the mass that wraps down, amplified
    # of every phase on the row (other events' phases included)
    above = _pld_tilt.above_wrap(_pld_tilt.Phases(list(row), lo, st), g, first, size)
  log_d, log_d_err, c_all = _pld_tilt.tilt_row(row, lo, st, g)
  return (log_d, log_d_err, c_all, g, above, first)


def _read_out(pending, directions, h, queries, want_epsilon, tilt=None):
  """Stage 4: the (U, K) upper and lower bounds from the composed windows,
  read on the host (:func:`jaxdp._src.pld.readout.answer`) in dispatch order:
  while one group's windows are read out, XLA composes the later groups.
  Each bound is the worse of the two directions; with ``tilt`` (a second
  pass) a direction it did not recompose has upper bound +inf.

  Returns (upper_d, lower, centre, scale, hard): upper_d (directions, U,
  K) the upper bound of each direction (+inf for a direction a tilted pass
  did not recompose), lower (U, K); centre (U,) the tilt centre
  for a second pass (the largest upper read without round-off bound, ε
  queries; the largest queried ε otherwise), scale (U,) the smallest δ in
  question (target, or read) and hard (U,) whether the round-off bound
  moved an upper answer (by more than 1e-4 relative, or to +inf).
  """
  # Upper bounds per direction: a second pass may recompose some directions
  # only, and a configuration's bound is the worse of its directions.
  upper_d = np.full((len(directions),) + queries.shape, -np.inf)
  lower = np.full(queries.shape, -np.inf)
  raw = np.full(queries.shape, np.nan)
  for cells, composed, rot, tilted in pending:
    composed = [np.asarray(o) for o in composed]
    for c in (0, 1):
      rows = [r for r, cell in enumerate(cells) if cell[2] == c]
      if not rows:
        continue
      ds = [(cells[r][0], cells[r][1]) for r in rows]
      cfg = np.array([k for _, k in ds], np.int64)

      def take(key, ds=ds):
        return np.array([directions[d][key][..., k] for d, k in ds])

      a_w, b_w = take("a")[:, c], take("b")[:, c]
      got = _pld_readout.answer(
          composed[0], composed[1][rows], a_w.astype(np.int64),
          h[cfg], take("inf_cfg"), queries[cfg], take("wrap_cfg"), take("shift")[:, c],
          (b_w - a_w + 1).astype(np.int64), want_epsilon=want_epsilon, lower=c == 1,
          rot=rot[rows], rows=rows, tilt=[tilted[r] for r in rows],
          want_raw=c == 0 and tilt is None)
      if c == 0 and tilt is None:
        got, got_raw = got
        np.fmax.at(raw, cfg, got_raw)
      if c == 1:
        np.maximum.at(lower, cfg, got)
      else:
        for i, (d, k) in enumerate(ds):
          upper_d[d, k] = np.maximum(upper_d[d, k], got[i])
  if tilt is not None:   # directions not recomposed: no bound from this pass
    for d in range(len(directions)):
      done = np.zeros(len(queries), bool)
      done[[u for (dd, u, c) in tilt if c == 0 and dd == d]] = True
      upper_d[d, ~done] = np.inf
  upper = np.max(upper_d, axis=0)
  with np.errstate(invalid="ignore"):   # raw: NaN where not computed (not hard)
    if want_epsilon:
      hard = (upper > raw + 1e-4 * np.maximum(np.abs(raw), 1e-3)) & np.isfinite(raw)
      centre = np.max(np.where(np.isfinite(raw), raw, -np.inf), axis=1)
      scale = np.min(queries, axis=1)
    else:
      hard = (upper > raw * (1.0 + 1e-3)) & (raw > 0)
      centre = np.max(queries, axis=1)
      scale = np.min(np.where(raw > 0, raw, np.inf), axis=1)
  return upper_d, lower, centre, scale, np.any(hard, axis=1)


def _run_within_memory(q, sigma, steps, h, queries, *, want_epsilon, automatic, extra=None,
                       want_lower=True, while_waiting=None):
  """:func:`_run` with the memory caps enforced for every input.

  Configurations whose grids would exceed the caps are recomputed with h
  grown by the reported factor (automatic grids; the answer stays a
  certified bound, only coarser), or rejected with a ``ValueError`` naming
  ``value_discretization_interval`` when the caller fixed h. Where the caps
  still bind after 8 growths, the interval is the trivial (+∞, -∞).
  """
  h = np.asarray(h, np.float64).copy()
  q, sigma, steps = (np.asarray(a, np.float64).reshape(len(h), -1) for a in (q, sigma, steps))
  upper, lower, grow = _run(q, sigma, steps, h, queries, want_epsilon=want_epsilon, extra=extra,
                            want_lower=want_lower, while_waiting=while_waiting)
  for _ in range(8):
    over = np.nonzero(grow > 1.0)[0]
    if not len(over):
      break
    if not automatic:
      k = over[0]
      raise ValueError(
          f"value_discretization_interval={h[k]!r} needs a loss grid {grow[k]:.3g} times "
          f"larger than the memory cap for q={q[k].tolist()}, sigma={sigma[k].tolist()}, "
          f"steps={steps[k].tolist()}; use at least {h[k] * grow[k] * 1.05:.6g} or None.")
    h[over] *= grow[over] * 1.05
    u, l, g = _run(q[over], sigma[over], steps[over], h[over], queries[over],
                   want_epsilon=want_epsilon, want_lower=want_lower,
                   extra=None if extra is None else [extra[i] for i in over])
    upper[over], lower[over] = u, l
    grow = np.ones_like(grow)
    grow[over] = g
  # Where the caps still bind after every growth (the window's length in
  # nodes does not shrink with h: e.g. q = 1e-9, σ = 1e3, T = 1e7, whose
  # one-step loss rounds up to one node at any h, so T steps span ~T
  # nodes), the kernel certifies nothing: the trivial interval, which the
  # callers intersect with the general engine's and the RDP bound (it was
  # NaN, which the guards reported as a jaxdp bug).
  stuck = grow > 1.0
  upper[stuck], lower[stuck] = np.inf, -np.inf
  return upper, lower
