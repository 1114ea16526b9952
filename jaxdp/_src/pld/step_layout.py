"""The packed block layout of the batched PLD's one-step grids.

Rows (phase x direction) of different lengths share one (blocks, ``_BLK``)
array without padding to the longest (:class:`_Rows`: per-row sums, suffix
sums and min-plus scans as a within-block pass plus a pass over block
totals); :func:`_pack` builds the layout on the host and :func:`_chunks`
groups rows into kernel calls of one compiled size. Used by
:mod:`jaxdp._src.pld.step` and :mod:`jaxdp._src.pld.run`; split out of
:mod:`jaxdp._src.pld.step` (moves only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


_BLK = 512             # points per block of the packed one-step layout (_Rows)
_CHUNK_BLOCKS = 2 ** 17 // _BLK  # blocks per one-step kernel call (_chunks)


class _Rows:
  """Packed layout of the one-step grids of several rows (phase x direction).

  Row r's nodes j = 0 .. n_r - 1 occupy whole blocks of ``_BLK`` points
  (its last block padded with j >= n_r), and the blocks of all rows are
  concatenated into one (blocks, _BLK) array, so that no row is padded to
  the longest one.  Every block belongs to one row, hence per-row sums and
  scans are a within-block pass plus a sequential pass over block totals
  that restarts at each row's first (or, backwards, last) block.  Trailing
  filler blocks belong to a dummy row.

  Attributes:
    rob: (blocks,) row of each block.  j: (blocks, _BLK) node index in its row.
    start, n: (rows,) flat index of each row's node 0 and its node count.
  """

  def __init__(self, rob, j0, start, n):
    self.rob = rob
    self.j = j0[:, None] + jnp.arange(_BLK)[None, :]
    self.start = start
    self.n = n
    self.first_blk = j0 == 0
    self.last_blk = j0 + _BLK >= n[rob]

  def row(self, x):
    """(rows,) -> (blocks, 1): a per-row value at every point of the row."""
    return x[self.rob][:, None]

  def first(self, x):
    """Value at node 0 of every row."""
    return x.reshape(-1)[self.start]

  def last(self, x):
    """Value at node n - 1 of every row."""
    return x.reshape(-1)[self.start + self.n - 1]

  # The shifts stay two-dimensional: written as a flat reshape and a 1-D
  # concatenation, every consumer fusion of a shifted array ran ~20x slower
  # on XLA's CPU backend (4 ms against 0.2 ms per 2^15 points), and these
  # shifts were most of the one-step kernel's time.

  @staticmethod
  def nxt(x):
    """x_{j+1} (flat order; across a row end it reads filler or the next row)."""
    head = jnp.concatenate([x[1:, :1], jnp.zeros((1, 1), x.dtype)], axis=0)
    return jnp.concatenate([x[:, 1:], head], axis=1)

  @staticmethod
  def prv(x):
    """x_{j-1} (flat order; at node 0 it reads the previous row's filler)."""
    tail = jnp.concatenate([jnp.zeros((1, 1), x.dtype), x[:-1, -1:]], axis=0)
    return jnp.concatenate([tail, x[:, :-1]], axis=1)

  def cumsum(self, x):
    """Inclusive per-row cumulative sum Σ_{i <= j} x_i."""
    return _seg_cumsum(x[None], self.first_blk[None])[0]

  def rcumsum(self, x):
    """Inclusive per-row reverse cumulative sum Σ_{i >= j} x_i."""
    return _flip(_seg_cumsum(_flip(x)[None], self.last_blk[::-1][None])[0])

  def total(self, x):
    """Per-row sum Σ_j x_j (one reduction; a cumulative sum read at node 0
    computed the same sum in another order)."""
    return jax.ops.segment_sum(jnp.sum(x, axis=-1), self.rob, num_segments=self.n.shape[0])

  def all(self, ok):
    """Per-row logical AND (an exact integer count of the failures)."""
    bad = jnp.cumsum(jnp.sum(~ok, axis=-1))  # per block, then running count
    bad = jnp.concatenate([jnp.zeros((1,), bad.dtype), bad])
    blk0 = self.start // _BLK
    nblk = (self.n + _BLK - 1) // _BLK
    return bad[blk0 + nblk] - bad[blk0] == 0

  def scan_pair(self, cap_f, w_f, cap_r, w_r):
    """Per-row min-plus scans: forward y_j = min(cap_j, y_{j-1} + w_j) and
    reverse y_j = min(cap_j, y_{j+1} + w_j), each starting from +inf at its
    row's first (last) block; see :func:`_scan_minplus`."""
    out = _scan_minplus(jnp.stack([cap_f, _flip(cap_r)]), jnp.stack([w_f, _flip(w_r)]),
                        jnp.stack([self.first_blk, self.last_blk[::-1]]))
    return out[0], _flip(out[1])


def _flip(x):
  """Reverses the flat order of a (blocks, _BLK) array."""
  return x[..., ::-1, ::-1]


def _seg_cumsum(x, reset):
  """Inclusive cumulative sums along the flat order of (k, blocks, _BLK) arrays,
  restarting at the blocks flagged in ``reset`` (k, blocks)."""
  c = jnp.cumsum(x, axis=-1)

  def step(carry, inp):
    tot, first = inp
    carry = jnp.where(first, 0.0, carry)
    return carry + tot, carry

  _, off = jax.lax.scan(step, jnp.zeros(x.shape[0], x.dtype), (c[..., -1].T, reset.T))
  return c + off.T[..., None]


def _scan_minplus(cap, w, reset):
  """y = min(cap, y_prev + w) along the flat order of (k, blocks, _BLK) arrays,
  with y_prev = +inf at the start of the blocks flagged in ``reset`` (k, blocks).

  The map y -> min(c, y + w) composes associatively, so the recursion runs as
  a sequential scan inside every block (all blocks advancing together as one
  vector), a sequential scan over the block aggregates, and one elementwise
  pass; only the sums of the w's are reassociated, as in any parallel scan
  (all w >= 0 here, so each sum keeps its relative precision).
  """
  c = jnp.moveaxis(cap, -1, 0)  # (_BLK, k, blocks)
  ww = jnp.moveaxis(w, -1, 0)
  inf = jnp.full(c.shape[1:], jnp.inf, cap.dtype)

  def step(carry, x):
    cp, wp = carry
    ci, wi = x
    out = (jnp.minimum(ci, cp + wi), wp + wi)
    return out, out

  _, (lc, lw) = jax.lax.scan(step, (inf, jnp.zeros_like(inf)), (c, ww))

  def block_step(y, x):
    cb, wb, first = x
    y = jnp.where(first, jnp.inf, y)
    return jnp.minimum(cb, y + wb), y  # emits the value entering the block

  _, y_in = jax.lax.scan(block_step, inf[:, 0], (lc[-1].T, lw[-1].T, reset.T))
  y = jnp.minimum(lc, y_in.T[None] + lw)
  return jnp.moveaxis(y, 0, -1)


def _pack(n, nb_pad=None):
  """Host: packed layout (:class:`_Rows`) of rows with n[r] nodes.

  ``nb_pad`` blocks in all (at least one more than the rows need: the filler
  belongs to a dummy row); by default the need rounded up with 8 steps per
  octave.  Rows are padded to ``nb_pad`` or more (a power of two, >= 32)
  with dummy rows, so that the number of blocks alone sets the shapes of a
  call (every row holds a block) and calls with different row counts share
  one compiled program.
  Returns (rob, j0, start, n_rows) as NumPy arrays.
  """
  n = np.asarray(n, np.int64)
  rows = len(n)
  nblk = -(-n // _BLK)
  total = int(nblk.sum())
  if nb_pad is None:
    m = max(total + 1, 16)
    step = 1 << max(m.bit_length() - 4, 0)
    nb_pad = -(-m // step) * step
  r_pad = max(_pow2(rows + 1, least=32), nb_pad)
  filler = nb_pad - total
  rob = np.concatenate([np.repeat(np.arange(rows), nblk), np.full(filler, rows)])
  j0 = np.concatenate([np.arange(k) * _BLK for k in nblk] + [np.arange(filler) * _BLK])
  start = np.full(r_pad, total * _BLK, np.int64)
  start[:rows] = (np.cumsum(nblk) - nblk) * _BLK
  n_rows = np.ones(r_pad, np.int64)
  n_rows[:rows] = n
  return rob.astype(np.int32), j0.astype(np.int64), start, n_rows


def _chunks(n):
  """Host: rows (indices into n) grouped into kernel calls (bins of blocks).

  Bins hold ``_CHUNK_BLOCKS`` blocks (2**17 nodes), or the next power of two
  above a longer row; first-fit decreasing packing fills the room left in
  any bin.  One bin size serves almost every call (rows of up to 2**17
  nodes; every PLD calibration round and every new configuration reuses the
  one compiled program, ~3 s of XLA compilation per size).  Calls of 2**15
  nodes ran the kernels ~1.3x faster per node (their working set stays in
  cache), but rows longer than that compiled 2**16- and 2**17-node programs
  as they appeared: 7.5 of the 11.9 s of a first PLD calibration of 32
  targets after a warm-up.  Returns [(rows, nb_pad)].
  """
  nblk = -(-np.asarray(n, np.int64) // _BLK)
  bins = []  # [room, rows, size]; one block of each bin is the dummy row's filler
  for k in np.argsort(-nblk, kind="stable"):
    for b in bins:
      if b[0] >= nblk[k]:
        b[0] -= nblk[k]
        b[1].append(k)
        break
    else:
      size = max(_CHUNK_BLOCKS, _pow2(nblk[k] + 1, least=1))
      bins.append([size - 1 - nblk[k], [k], size])
  return [(sorted(b[1]), b[2]) for b in bins]


def _pow2(n, least=2 ** 12):
  return 1 << int(max(int(n), least) - 1).bit_length()
