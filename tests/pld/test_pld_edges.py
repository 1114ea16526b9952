"""Chernoff window edges of the batched PLD (jaxdp._src.pld.step._chernoff_edges)
against brute force on synthetic PMFs in the packed layout.

References: the exact tail mass of the T-fold convolution (NumPy, small T),
and the best Chernoff edge over a dense grid of orders (NumPy, log-sum-exp).
The PMFs are built to stress the layout: rows spanning many blocks with
their mass far from node 0 (so that e^{±t·j} spans hundreds of orders of
magnitude across a row), empty leading and trailing blocks, point masses,
and rows next to each other in one call.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp._src.pld import step as ps
from jaxdp._src.pld import step_layout as psl
from jaxdp._src.pld import kernel as pld_impl


def _pmfs(rng, kind, longest):
  """Rows of (n, pmf) pairs for one kernel call."""
  rows = []
  for _ in range(rng.integers(1, 5)):
    n = int(rng.choice([m for m in (3, 700, 5000, 40000) if m <= longest]))
    p = np.zeros(n)
    if kind == "point":
      p[rng.integers(0, n)] = 1.0
    else:
      # a bump somewhere in the row (mass far from node 0, empty blocks
      # around it), sometimes with a second, rare far-away atom
      c = rng.uniform(0.05, 0.95) * n
      w = max(rng.uniform(0.002, 0.05) * n, 0.7)
      j = np.arange(n)
      p = np.exp(-0.5 * ((j - c) / w) ** 2)
      p[p < 1e-300] = 0.0
      if kind == "heavy" and n > 10:
        p[rng.integers(0, n)] += 1e-9 * p.sum()
      p /= p.sum()
    rows.append((n, p))
  return rows


def _kernel(rows, steps, tau, upper):
  n = np.array([r[0] for r in rows])
  rob, j0, start, n_rows = psl._pack(n)
  flat = np.zeros(len(rob) * psl._BLK)
  for r, (m, p) in enumerate(rows):
    flat[start[r]:start[r] + m] = p
  r_pad = len(start)
  st = np.ones(r_pad)
  st[:len(rows)] = steps

  @jax.jit
  def run(p, st, rob, j0, start, n_rows, log_inv):
    lay = psl._Rows(rob, j0, start, n_rows)
    return ps._chernoff_edges(p, st, jnp.full(r_pad, 0.01), lay, upper, log_inv=log_inv)[0]

  with jax.enable_x64(True):
    e = run(flat.reshape(-1, psl._BLK), st, rob, j0, start, n_rows, np.full(r_pad, -math.log(tau)))
    return np.asarray(e)[:len(rows)]


def _best_chernoff(p, steps, tau, upper):
  """Best edge over 400 orders (node units), NumPy."""
  j = np.arange(len(p), dtype=np.float64)
  with np.errstate(divide="ignore"):
    lp = np.log(p)
  best = math.inf
  for t in np.geomspace(1e-9, 1e3, 400):
    z = lp + (t * j if upper else -t * j)
    m = z.max()
    k = m + math.log(np.exp(z - m).sum())
    best = min(best, (steps * k - math.log(tau)) / t)
  return best if upper else -best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["bump", "heavy", "point"])
@pytest.mark.parametrize("upper", [True, False])
def test_edges_hold_the_tails_and_are_near_the_best_order(seed, kind, upper):
  rng = np.random.default_rng(seed)
  steps = int(rng.choice([1, 3]))
  rows = _pmfs(rng, kind, 40000 if steps == 1 else 5000)   # direct convolutions
  tau = float(rng.choice([1e-17, 1e-9]))
  got = _kernel(rows, steps, tau, upper)
  for (n, p), e in zip(rows, got):
    assert np.isfinite(e), (n, kind, e)
    comp = p
    for _ in range(steps - 1):
      comp = np.convolve(comp, p)
    # Soundness: the mass beyond the edge is within the budget.
    if upper:
      beyond = comp[int(math.floor(e)) + 1:].sum()
    else:
      beyond = comp[:max(int(math.ceil(e)), 0)].sum()
    assert beyond <= tau * (1 + 1e-9), (n, kind, e, beyond)
    # Accuracy: within 8% of the best order's distance from the mean, plus 2
    # nodes (the order search leaves a bracket of 0.34 octaves, and its
    # largest order 4^10 / span leaves point masses ~1 node wide; the edge
    # is capped at the support's end for upper edges and at 0 for lower ones).
    best = _best_chernoff(p, steps, tau, upper)
    mean = steps * float(np.dot(np.arange(n), p))
    if upper:
      best = min(best, steps * float(np.flatnonzero(p)[-1]))
      assert e - mean <= 1.08 * (best - mean) + 2.0, (n, kind, e, best, mean)
    else:
      best = max(best, 0.0)
      assert mean - e <= 1.08 * (mean - best) + 2.0, (n, kind, e, best, mean)


def test_failed_lower_edge_search_falls_back_to_the_certified_zero(monkeypatch):
  """Runtime guard: an optimistic PMF with mass whose lower-edge search
  returns +inf (what an underflow in the search produced once) gets the
  trivially certified edge (node 0 of the T-fold sum), never the
  pessimistic PMF's uncertified one."""
  real = ps._chernoff_edges

  def broken(p, steps, h, lay, upper, order=None, log_inv=None):
    e, o = real(p, steps, h, lay, upper, order=order, log_inv=log_inv)
    return (e, o) if upper else (jnp.full_like(e, jnp.inf), o)

  monkeypatch.setattr(ps, "_chernoff_edges", broken)
  q, sigma, steps, h = 0.2, 0.8, 12, 0.02
  i_lo, i_hi = pld_impl._grid_range(np.array([q]), np.array([sigma]), np.array([float(steps)]),
                               np.array([h]), True)
  n = int(i_hi[0] - i_lo[0] + 1)
  with jax.enable_x64(True):
    rob, j0, start, n_rows = pld_impl._pack(np.array([n]))
    r_pad = len(start)
    lo_arr = np.zeros(r_pad, np.int64)
    lo_arr[0] = i_lo[0]
    out = ps._edges.__wrapped__(   # the traced function, with the broken search
        *(jnp.asarray(x) for x in ps._one_step(
            np.full(r_pad, q), np.full(r_pad, sigma), np.full(r_pad, h), lo_arr, rob, j0,
            start, n_rows, True, True)[::2]),
        np.full(r_pad, float(steps)), np.full(r_pad, h), lo_arr, np.full(r_pad, 40.0),
        rob, j0, start, n_rows, True)
  a_o = float(np.asarray(out[2])[0])
  assert a_o == steps * i_lo[0] - ps._EDGE_PAD
